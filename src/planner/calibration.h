// The planner's calibration table: both prefill paths timed on one GPU over a grid of (heads, s_q, s_k)
// (DESIGN.md section 5). `mlajit-warmup calibrate` measures it; the planner prefers it to the cost model.
//
// File: <cache_root>/calibration/<sanitized gpu name>.json, outside the kernel cache's v<N>/ tree (whose
// direct children are arch folders). JSON, format_version 1:
//   { "format_version": 1, "gpu_name": "NVIDIA H200", "driver_version": "580.65.06", "topk": 2048,
//     "cells": [ {"heads": 128, "s_q": 4096, "s_k": 8192, "mha_ms": 3.83, "mqa_ms": 4.30}, ... ],
//     "crossover": [ {"heads": 128, "along": "s_k", "s_q": 4096, "kind": "at", "at": 8900.1},
//                    {"heads": 128, "along": "pure_prefill", "kind": "at", "at": 14100.0}, ... ] }
// mha_ms is the MHA path as the planner runs it (up-projection + attention; masked when s_k > topk),
// mqa_ms the sparse MQA path (absorption + output projection + sparse attention). "crossover" is derived
// from the cells for people and tools to read; readers recompute it and never trust the stored copy.
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "planner/cost_model.h"

namespace mlajit {

struct CalibrationCell {
    int heads = 0;
    long s_q = 0, s_k = 0;
    double mha_ms = 0, mqa_ms = 0;
};

enum class CrossoverKind { at, mha_throughout, mqa_throughout };

// Along one measured line of cells: a row (heads, s_q) with s_k rising, or the pure-prefill diagonal
// (s_k = s_q) of one head count. `at` is where log(mha_ms / mqa_ms) first turns non-negative, log-log
// interpolated between the two cells around it (an s_k for a row, s_q = s_k for the diagonal).
// mqa_throughout: MQA already wins at the line's first cell; mha_throughout: MHA wins at every cell.
struct CalibrationCrossover {
    int heads = 0;
    long s_q = 0;  // 0 = the pure-prefill diagonal
    CrossoverKind kind = CrossoverKind::at;
    double at = 0;  // only for kind == at
};

struct CalibrationTable {
    static constexpr int kFormatVersion = 1;
    std::string gpu_name;        // as the driver reports it (cuDeviceGetName)
    std::string driver_version;  // recorded for people; a different driver does not invalidate the table
    int topk = 0;                // the table answers only for this topk
    std::vector<CalibrationCell> cells;
    std::vector<CalibrationCrossover> crossovers;  // derive_crossovers(cells)
};

std::vector<CalibrationCrossover> derive_crossovers(std::span<const CalibrationCell> cells);
const char* crossover_kind_name(CrossoverKind k);

// Throws Error(MLAJIT_ERROR_CONFIG) naming `source` (the file) and the bad field.
void validate(const CalibrationTable& t, std::string_view source);
nlohmann::json to_json(const CalibrationTable& t);
CalibrationTable table_from_json(const nlohmann::json& j, std::string_view source);

// Throws Error(MLAJIT_ERROR_CONFIG) if the file cannot be read, is not JSON or does not validate.
CalibrationTable read_calibration(const std::filesystem::path& file);
// Validates, recomputes the crossovers, creates the folder and replaces the file atomically (temporary
// file and rename, so a concurrent reader sees the old table or the new one). Throws on failure.
void write_calibration(const std::filesystem::path& file, const CalibrationTable& t);

// Letters, digits, '.', '-' kept; every other run of characters becomes one '_' ("NVIDIA H200" ->
// "NVIDIA_H200"); never empty, never starting with '.'.
std::string sanitize_gpu_name(std::string_view gpu_name);
std::filesystem::path calibration_path(const std::filesystem::path& cache_root, std::string_view gpu_name);

// The table that applies to the device named gpu_name, if any:
// - explicit_file (MLAJIT_PLAN_TABLE) when given: read it; a missing or malformed file is an error, since
//   the user asked for it;
// - else calibration_path(cache_root, gpu_name) if it exists; a malformed one there is skipped with one
//   warning (the planner falls back to the cost model; re-running calibrate replaces it), as the kernel
//   cache treats a bad entry as a miss rather than a crash.
// Either way a table measured on another GPU model (gpu_name differs) is ignored with one warning.
std::optional<CalibrationTable> find_calibration(const std::optional<std::filesystem::path>& explicit_file,
                                                 const std::filesystem::path& cache_root, std::string_view gpu_name);

// The GPU side of `mlajit-warmup calibrate` plugs in here: time both paths for one shape on this GPU.
using MeasurePaths = std::function<PathTimes(const AttnShape&)>;
struct CalibrationPoint {
    int heads = 0;
    long s_q = 0, s_k = 0;
};
// Measures every point (in order) and returns the validated table with its crossovers.
CalibrationTable calibrate(std::string gpu_name, std::string driver_version, int topk,
                           std::span<const CalibrationPoint> grid, const MeasurePaths& measure);

}  // namespace mlajit
