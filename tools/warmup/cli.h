// What every mlajit-warmup subcommand shares: the registry (a subcommand is one cmd_<name>.cpp that calls
// register_command at static-initialization time, so adding one touches no other file), exit codes, and
// the helpers that make the CLI agree with the library on the cache root, the options and the arch.
#pragma once
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

#include "jit/disk_cache.h"
#include "jit/kernel_spec.h"
#include "jit/kernel_store.h"

namespace mlajit::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // the work ran and something failed (a compile, a bad entry)
inline constexpr int kExitUsage = 2;   // bad flags, bad values, bad environment: nothing was done

// A bad flag value or combination found after parsing; main prints it and exits with kExitUsage.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// What runs after a successful parse; returns the exit code.
using Runner = std::function<int()>;

struct CommandDef {
    std::string name;
    std::string summary;
    int order = 100;  // position in the top-level --help
    // Adds the subcommand's flags to `sub` (bound to state the returned Runner owns).
    std::function<Runner(CLI::App& sub)> setup;
};
// Returns true so it can initialize a namespace-scope variable in the command's file.
bool register_command(CommandDef def);
// Sorted by order, then name.
std::vector<CommandDef> registered_commands();
// The subcommand run when none is named.
inline constexpr const char* kDefaultCommand = "warmup";

// --cache-dir, overriding MLAJIT_CACHE_DIR (and XDG_CACHE_HOME, HOME) like the library resolves them.
void add_cache_dir_flag(CLI::App& sub, std::string& into);
std::filesystem::path cache_root(const std::string& cache_dir_flag);

// The library's KernelStore options from config() (MLAJIT_NVRTC_FLAGS, MLAJIT_OFFLINE, ...), with only
// what flags set overridden, so that warmup computes the keys a server with the same environment uses.
KernelStore::Options store_options(const std::string& cache_dir_flag);

// Maintenance commands manage the directory whatever MLAJIT_CACHE says, except that ro is honoured.
CacheMode maintenance_mode();
// Throws UsageError when the cache was opened read-only (MLAJIT_CACHE=ro) and `what` would modify it.
void require_writable(const DiskCache& disk, const char* what);

// --arch values; else MLAJIT_ARCH; else the local GPUs' archs; else UsageError saying to pass --arch.
std::vector<Arch> resolve_archs(const std::vector<std::string>& arch_flag);
// Distinct archs of the visible GPUs (empty without a driver; `why_none` then says why).
std::vector<Arch> local_gpu_archs(std::string* why_none = nullptr);

// "1.5 MiB"; "12 B".
std::string human_bytes(uint64_t bytes);
// "45s", "12m", "3h", "9d".
std::string human_age(std::chrono::seconds age);
// Seconds since the file time, never negative.
std::chrono::seconds age_of(std::filesystem::file_time_type t);
// Left-aligned columns, two spaces apart; the last column is not padded.
void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows);
// "123", "10K", "1.5G" (binary multiples) -> bytes; throws UsageError naming `flag`.
uint64_t parse_byte_size(const std::string& flag, const std::string& text);

// The CLI11 validator for comma lists of archs (reports the flag and the bad value at parse time).
CLI::Validator arch_validator();

}  // namespace mlajit::cli
