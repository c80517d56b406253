// Knowing NVRTC's version without loading NVRTC (issue 15: the first call from a warm disk cache must not
// pay for mapping a 110 MB compiler it will not use). The cache key includes NVRTC's version so that
// a kernel is never served from another NVRTC's build; to stay exact without dlopen:
//   1. predict the file dlopen would map (same candidates, same order, glibc's search for bare names),
//      giving up wherever that cannot be told for certain;
//   2. read that file's GNU build id (a few hundred bytes of ELF headers: nothing is mapped or run);
//   3. look the build id up in <cache root>/nvrtc-versions.json, which every process that did load NVRTC
//      fills in (build id -> nvrtcVersion()). A build id names one build of NVRTC, so its version is fixed.
// Any step that fails returns nullopt and the caller loads NVRTC as before (and records it).
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mlajit {

struct NvrtcVersion {
    int major = 0, minor = 0;
    bool operator==(const NvrtcVersion&) const = default;
};

// The file dlopen(candidates[0]), else dlopen(candidates[1]), ... would map, without loading anything.
// nullopt where it cannot be told exactly (then load the library to know): a candidate already in the
// process (loading it again is free), a bare name while this code or the executable carries DT_RPATH or
// DT_RUNPATH, an LD_LIBRARY_PATH with an empty entry or hardware-capability subfolders, a loader-cache
// entry for a hardware-capability subfolder, a file in a default folder that the loader cache lacks.
// `ld_library_path` and `ld_so_cache` are the process's by default (tests pass their own).
std::optional<std::string> predict_dlopen_file(const std::vector<std::string>& candidates,
                                               std::optional<std::string> ld_library_path = std::nullopt,
                                               const std::string& ld_so_cache = "/etc/ld.so.cache");

// The path /etc/ld.so.cache maps `soname` to for this machine's ABI (x86-64 libc6), "" when it has no
// entry, nullopt when the cache cannot be read or the entry is one the prediction cannot follow.
std::optional<std::string> ld_so_cache_lookup(const std::string& cache_file, const std::string& soname);

// The NT_GNU_BUILD_ID note of an ELF file as lowercase hex; nullopt if unreadable or absent.
std::optional<std::string> elf_build_id(const std::string& path);

// <root>/nvrtc-versions.json: {"<build id>": {"major": M, "minor": m}, ...}.
std::optional<NvrtcVersion> nvrtc_memo_lookup(const std::filesystem::path& root, const std::string& build_id);
// Adds one build id (atomically: temporary file + rename; a lost race loses nothing but a later fast path).
// Best effort: never throws; returns whether the file now holds it.
bool nvrtc_memo_record(const std::filesystem::path& root, const std::string& build_id, NvrtcVersion v);

}  // namespace mlajit
