#include "planner/calibration.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "common/log.h"

namespace fs = std::filesystem;

namespace mlajit {

namespace {

constexpr const char* kFix = "Re-run `mlajit-warmup calibrate` to measure a fresh table, or fix the file.";

[[noreturn]] void bad_table(std::string_view source, const std::string& what) {
    fail(MLAJIT_ERROR_CONFIG, "calibration table '{}': {}. {}", source, what, kFix);
}

// First transition to "MQA wins" along a line of (coordinate, log(mha/mqa)) sorted by coordinate.
CalibrationCrossover cross_line(int heads, long s_q, const std::vector<std::pair<double, double>>& line) {
    CalibrationCrossover c{heads, s_q, CrossoverKind::mha_throughout, 0};
    if (line.front().second >= 0) return {heads, s_q, CrossoverKind::mqa_throughout, 0};
    for (size_t i = 0; i + 1 < line.size(); ++i) {
        const auto [x0, d0] = line[i];
        const auto [x1, d1] = line[i + 1];
        if (d0 < 0 && d1 >= 0) {
            const double f = -d0 / (d1 - d0);
            return {heads, s_q, CrossoverKind::at, std::exp(std::log(x0) + f * (std::log(x1) - std::log(x0)))};
        }
    }
    return c;
}

int get_int(const nlohmann::json& obj, const char* key, const std::string& where, std::string_view source) {
    auto it = obj.find(key);
    if (it == obj.end()) bad_table(source, fmt::format("{} has no \"{}\"", where, key));
    if (!it->is_number_integer())
        bad_table(source, fmt::format("{}.{} is {}: must be a whole number", where, key, it->dump()));
    const auto v = it->get<long long>();
    if (v < 0 || v > (1LL << 31) - 1)
        bad_table(source, fmt::format("{}.{} is {}: out of range", where, key, v));
    return int(v);
}

double get_ms(const nlohmann::json& obj, const char* key, const std::string& where, std::string_view source) {
    auto it = obj.find(key);
    if (it == obj.end()) bad_table(source, fmt::format("{} has no \"{}\"", where, key));
    if (!it->is_number()) bad_table(source, fmt::format("{}.{} is {}: must be a number of milliseconds", where, key, it->dump()));
    return it->get<double>();
}

std::string get_string(const nlohmann::json& obj, const char* key, std::string_view source) {
    auto it = obj.find(key);
    if (it == obj.end()) bad_table(source, fmt::format("no \"{}\" field", key));
    if (!it->is_string()) bad_table(source, fmt::format("\"{}\" is {}: must be a string", key, it->dump()));
    return it->get<std::string>();
}

}  // namespace

const char* crossover_kind_name(CrossoverKind k) {
    switch (k) {
        case CrossoverKind::at: return "at";
        case CrossoverKind::mha_throughout: return "mha_throughout";
        case CrossoverKind::mqa_throughout: return "mqa_throughout";
    }
    return "?";
}

std::vector<CalibrationCrossover> derive_crossovers(std::span<const CalibrationCell> cells) {
    // heads -> s_q -> [(s_k, log ratio)], and heads -> diagonal.
    std::map<int, std::map<long, std::vector<std::pair<double, double>>>> rows;
    std::map<int, std::vector<std::pair<double, double>>> diag;
    for (const auto& c : cells) {
        const double d = std::log(c.mha_ms / c.mqa_ms);
        rows[c.heads][c.s_q].emplace_back(double(c.s_k), d);
        if (c.s_k == c.s_q) diag[c.heads].emplace_back(double(c.s_q), d);
    }
    std::vector<CalibrationCrossover> out;
    for (auto& [heads, by_sq] : rows) {
        if (auto it = diag.find(heads); it != diag.end()) {
            std::sort(it->second.begin(), it->second.end());
            out.push_back(cross_line(heads, 0, it->second));
        }
        for (auto& [s_q, line] : by_sq) {
            std::sort(line.begin(), line.end());
            out.push_back(cross_line(heads, s_q, line));
        }
    }
    return out;
}

void validate(const CalibrationTable& t, std::string_view source) {
    if (t.gpu_name.empty()) bad_table(source, "gpu_name is empty: it must be the name the driver reports");
    if (t.topk < 1) bad_table(source, fmt::format("topk is {}: must be at least 1", t.topk));
    if (t.cells.empty()) bad_table(source, "cells is empty: a table needs at least one measured cell");
    std::map<std::tuple<int, long, long>, size_t> seen;
    for (size_t i = 0; i < t.cells.size(); ++i) {
        const auto& c = t.cells[i];
        const std::string where = fmt::format("cells[{}]", i);
        if (c.heads < 1 || c.heads > 128) bad_table(source, fmt::format("{}.heads is {}: must be in 1..128", where, c.heads));
        if (c.s_q < 1) bad_table(source, fmt::format("{}.s_q is {}: must be at least 1", where, c.s_q));
        if (c.s_k < c.s_q)
            bad_table(source, fmt::format("{}.s_k is {}: must be at least s_q ({}), the queries being the last s_q keys",
                                          where, c.s_k, c.s_q));
        for (auto [name, v] : {std::pair{"mha_ms", c.mha_ms}, std::pair{"mqa_ms", c.mqa_ms}})
            if (!(v > 0) || !std::isfinite(v))
                bad_table(source, fmt::format("{}.{} is {}: must be a positive number of milliseconds", where, name, v));
        auto [it, fresh] = seen.emplace(std::tuple{c.heads, c.s_q, c.s_k}, i);
        if (!fresh)
            bad_table(source, fmt::format("{} repeats cells[{}] (heads {}, s_q {}, s_k {}): each point is measured once",
                                          where, it->second, c.heads, c.s_q, c.s_k));
    }
}

nlohmann::json to_json(const CalibrationTable& t) {
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& c : t.cells)
        cells.push_back({{"heads", c.heads}, {"s_q", c.s_q}, {"s_k", c.s_k}, {"mha_ms", c.mha_ms}, {"mqa_ms", c.mqa_ms}});
    nlohmann::json cross = nlohmann::json::array();
    for (const auto& x : derive_crossovers(t.cells)) {
        nlohmann::json e = {{"heads", x.heads}, {"along", x.s_q == 0 ? "pure_prefill" : "s_k"}, {"kind", crossover_kind_name(x.kind)}};
        if (x.s_q != 0) e["s_q"] = x.s_q;
        if (x.kind == CrossoverKind::at) e["at"] = x.at;
        cross.push_back(std::move(e));
    }
    return {{"format_version", CalibrationTable::kFormatVersion},
            {"gpu_name", t.gpu_name},
            {"driver_version", t.driver_version},
            {"topk", t.topk},
            {"cells", std::move(cells)},
            {"crossover", std::move(cross)}};
}

CalibrationTable table_from_json(const nlohmann::json& j, std::string_view source) {
    if (!j.is_object()) bad_table(source, "the top level must be a JSON object");
    const int version = get_int(j, "format_version", "the table", source);
    if (version != CalibrationTable::kFormatVersion)
        bad_table(source, fmt::format("format_version is {}, this mlajit reads version {}", version,
                                      CalibrationTable::kFormatVersion));
    CalibrationTable t;
    t.gpu_name = get_string(j, "gpu_name", source);
    t.driver_version = get_string(j, "driver_version", source);
    t.topk = get_int(j, "topk", "the table", source);
    auto cells = j.find("cells");
    if (cells == j.end() || !cells->is_array()) bad_table(source, "\"cells\" is missing or not an array");
    for (size_t i = 0; i < cells->size(); ++i) {
        const auto& e = (*cells)[i];
        const std::string where = fmt::format("cells[{}]", i);
        if (!e.is_object()) bad_table(source, fmt::format("{} is {}: must be an object", where, e.dump()));
        CalibrationCell c;
        c.heads = get_int(e, "heads", where, source);
        c.s_q = get_int(e, "s_q", where, source);
        c.s_k = get_int(e, "s_k", where, source);
        c.mha_ms = get_ms(e, "mha_ms", where, source);
        c.mqa_ms = get_ms(e, "mqa_ms", where, source);
        t.cells.push_back(c);
    }
    validate(t, source);
    t.crossovers = derive_crossovers(t.cells);
    return t;
}

CalibrationTable read_calibration(const fs::path& file) {
    const std::string source = file.string();
    std::ifstream in(file, std::ios::binary);
    if (!in)
        fail(MLAJIT_ERROR_CONFIG, "cannot open calibration table '{}': {}. Check the path (MLAJIT_PLAN_TABLE) or run "
             "`mlajit-warmup calibrate`.", source, std::strerror(errno));
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) bad_table(source, "not valid JSON");
    return table_from_json(j, source);
}

void write_calibration(const fs::path& file, const CalibrationTable& t) {
    const std::string source = file.string();
    validate(t, source);
    const std::string text = to_json(t).dump(2) + "\n";
    std::error_code ec;
    if (file.has_parent_path()) fs::create_directories(file.parent_path(), ec);
    if (ec)
        fail(MLAJIT_ERROR_CONFIG, "cannot create the folder of calibration table '{}': {}. Make it writable or set "
             "MLAJIT_CACHE_DIR.", source, ec.message());
    std::random_device rd;
    fs::path tmp = file;
    tmp += fmt::format(".tmp.{}.{:x}", ::getpid(), rd());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << text;
        out.flush();
        if (!out) {
            out.close();
            fs::remove(tmp, ec);
            fail(MLAJIT_ERROR_CONFIG, "cannot write calibration table '{}' (via '{}'): {}. Make the folder writable "
                 "or set MLAJIT_CACHE_DIR.", source, tmp.string(), std::strerror(errno));
        }
    }
    fs::rename(tmp, file, ec);
    if (ec) {
        std::error_code ec2;
        fs::remove(tmp, ec2);
        fail(MLAJIT_ERROR_CONFIG, "cannot move calibration table into place at '{}': {}. Make the folder writable or "
             "set MLAJIT_CACHE_DIR.", source, ec.message());
    }
}

std::string sanitize_gpu_name(std::string_view gpu_name) {
    std::string out;
    for (char ch : gpu_name) {
        const bool keep = std::isalnum((unsigned char)ch) || ch == '.' || ch == '-';
        if (keep) out += ch;
        else if (out.empty() || out.back() != '_') out += '_';
    }
    while (!out.empty() && (out.front() == '.' || out.front() == '_')) out.erase(out.begin());
    while (!out.empty() && out.back() == '_') out.pop_back();
    return out.empty() ? "unknown-gpu" : out;
}

fs::path calibration_path(const fs::path& cache_root, std::string_view gpu_name) {
    return cache_root / "calibration" / (sanitize_gpu_name(gpu_name) + ".json");
}

std::optional<CalibrationTable> find_calibration(const std::optional<fs::path>& explicit_file, const fs::path& cache_root,
                                                 std::string_view gpu_name) {
    std::optional<CalibrationTable> t;
    fs::path file;
    if (explicit_file) {
        file = *explicit_file;
        t = read_calibration(file);
    } else {
        file = calibration_path(cache_root, gpu_name);
        std::error_code ec;
        if (!fs::exists(file, ec)) return std::nullopt;
        try {
            t = read_calibration(file);
        } catch (const Error& e) {
            log().warn("ignoring the calibration table in the cache, planning with the H200 cost model instead: {}",
                       e.what());
            return std::nullopt;
        }
    }
    if (t->gpu_name != gpu_name) {
        log().warn("ignoring calibration table '{}': it was measured on '{}', this GPU is '{}'; planning with the "
                   "H200 cost model. Run `mlajit-warmup calibrate` on this GPU.",
                   file.string(), t->gpu_name, gpu_name);
        return std::nullopt;
    }
    return t;
}

CalibrationTable calibrate(std::string gpu_name, std::string driver_version, int topk,
                           std::span<const CalibrationPoint> grid, const MeasurePaths& measure) {
    CalibrationTable t;
    t.gpu_name = std::move(gpu_name);
    t.driver_version = std::move(driver_version);
    t.topk = topk;
    for (const auto& p : grid) {
        const AttnShape s{p.s_q, p.s_k, p.heads, topk};
        check_shape(s, fmt::format("calibration point (heads {}, s_q {}, s_k {})", p.heads, p.s_q, p.s_k));
        const PathTimes m = measure(s);
        t.cells.push_back({p.heads, p.s_q, p.s_k, m.mha_ms, m.mqa_ms});
    }
    validate(t, "(being measured)");
    t.crossovers = derive_crossovers(t.cells);
    return t;
}

}  // namespace mlajit
