#include "cli.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ostream>

#include "common/error.h"
#include "config/env.h"
#include "cuda/driver_api.h"

namespace mlajit::cli {

namespace {
std::vector<CommandDef>& registry() {
    static std::vector<CommandDef> r;  // function-local: registrations run during static initialization
    return r;
}
}  // namespace

bool register_command(CommandDef def) {
    registry().push_back(std::move(def));
    return true;
}

std::vector<CommandDef> registered_commands() {
    auto r = registry();
    std::sort(r.begin(), r.end(), [](const CommandDef& a, const CommandDef& b) {
        return a.order != b.order ? a.order < b.order : a.name < b.name;
    });
    return r;
}

void add_cache_dir_flag(CLI::App& sub, std::string& into) {
    sub.add_option("--cache-dir", into,
                   "cache root (overrides MLAJIT_CACHE_DIR; default: $MLAJIT_CACHE_DIR, else "
                   "$XDG_CACHE_HOME/mlajit, else ~/.cache/mlajit)");
}

std::filesystem::path cache_root(const std::string& cache_dir_flag) {
    if (!cache_dir_flag.empty()) return std::filesystem::absolute(cache_dir_flag);
    return default_cache_root_from(config());
}

KernelStore::Options store_options(const std::string& cache_dir_flag) {
    const Config& c = config();
    KernelStore::Options o;
    o.cache_root = cache_root(cache_dir_flag);
    o.cache_mode = c.cache_mode;
    o.offline = c.offline;
    o.nvrtc_flags = c.nvrtc_flags;
    o.lock_timeout_ms = c.lock_timeout_ms;
    return o;
}

CacheMode maintenance_mode() { return config().cache_mode == CacheMode::ro ? CacheMode::ro : CacheMode::rw; }

void require_writable(const DiskCache& disk, const char* what) {
    if (disk.mode() != CacheMode::rw)
        throw UsageError(fmt::format("{} would modify the cache at {}, but MLAJIT_CACHE=ro opens it read-only: unset "
                                     "MLAJIT_CACHE (or set it to rw) to allow it",
                                     what, disk.root().string()));
}

std::vector<Arch> local_gpu_archs(std::string* why_none) {
    std::vector<Arch> out;
    if (!driver_available()) {
        if (why_none) {
            try {
                driver();
            } catch (const std::exception& e) {
                *why_none = e.what();
            }
        }
        return out;
    }
    const DriverApi& d = driver();
    int count = 0;
    cu_check(d.cuDeviceGetCount(&count), "cuDeviceGetCount", "counting the GPUs");
    for (int i = 0; i < count; ++i) {
        CUdevice dev = 0;
        int major = 0, minor = 0;
        cu_check(d.cuDeviceGet(&dev, i), "cuDeviceGet", "opening a GPU to read its compute capability");
        cu_check(d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                 "cuDeviceGetAttribute", "reading a GPU's compute capability");
        cu_check(d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                 "cuDeviceGetAttribute", "reading a GPU's compute capability");
        Arch a = Arch::for_compute_capability(major, minor);
        if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
    if (out.empty() && why_none) *why_none = "the driver reports no GPU";
    return out;
}

std::vector<Arch> resolve_archs(const std::vector<std::string>& arch_flag) {
    std::vector<Arch> out;
    auto add = [&](const std::string& name, const char* source) {
        try {
            Arch a = Arch::parse(name);
            if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
        } catch (const Error& e) {
            throw UsageError(fmt::format("{}: {}", source, e.what()));
        }
    };
    for (const auto& a : arch_flag) add(a, "--arch");
    if (!out.empty()) return out;
    if (config().arch) {
        add(*config().arch, "MLAJIT_ARCH");
        return out;
    }
    std::string why;
    out = local_gpu_archs(&why);
    if (out.empty())
        throw UsageError(fmt::format("no target arch: --arch was not given, MLAJIT_ARCH is unset and no local GPU "
                                     "could be asked. Pass the arch to compile for, e.g. --arch sm_90a (H100/H200) or "
                                     "--arch sm_80 (A100); several are comma-separated.\n(Why no GPU: {})",
                                     why));
    return out;
}

std::string human_bytes(uint64_t bytes) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = double(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string human_age(std::chrono::seconds age) {
    long s = long(age.count());
    if (s < 120) return fmt::format("{}s", s);
    if (s < 2 * 3600) return fmt::format("{}m", s / 60);
    if (s < 2 * 86400) return fmt::format("{}h", s / 3600);
    return fmt::format("{}d", s / 86400);
}

std::chrono::seconds age_of(std::filesystem::file_time_type t) {
    auto d = std::filesystem::file_time_type::clock::now() - t;
    return std::max(std::chrono::seconds(0), std::chrono::duration_cast<std::chrono::seconds>(d));
}

void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows) {
    std::vector<size_t> width(header.size());
    for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
    for (const auto& r : rows)
        for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], r[i].size());
    auto line = [&](const std::vector<std::string>& r) {
        std::string s;
        for (size_t i = 0; i < r.size(); ++i) {
            s += r[i];
            if (i + 1 < r.size()) s += std::string(width[i] - r[i].size() + 2, ' ');
        }
        out << s << "\n";
    };
    line(header);
    for (const auto& r : rows) line(r);
}

uint64_t parse_byte_size(const std::string& flag, const std::string& text) {
    size_t used = 0;
    double v = -1;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    std::string suffix = text.substr(used);
    if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
    if (!suffix.empty() && (suffix.back() == 'i')) suffix.pop_back();
    double mult = 0;
    if (suffix.empty()) mult = 1;
    else if (suffix == "K" || suffix == "k") mult = 1024.0;
    else if (suffix == "M" || suffix == "m") mult = 1024.0 * 1024;
    else if (suffix == "G" || suffix == "g") mult = 1024.0 * 1024 * 1024;
    else if (suffix == "T" || suffix == "t") mult = 1024.0 * 1024 * 1024 * 1024;
    if (used == 0 || mult == 0 || !(v >= 0) || std::isinf(v) || v * mult > 1.8e19)
        throw UsageError(fmt::format("{} {}: not a byte size; give a whole number of bytes or one with a K, M, G or "
                                     "T suffix (binary multiples), e.g. {} 20G",
                                     flag, text, flag));
    return uint64_t(std::llround(v * mult));
}

CLI::Validator arch_validator() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            try {
                Arch::parse(s);
                return {};
            } catch (const Error& e) {
                return e.what();
            }
        },
        "ARCH", "arch");
}

}  // namespace mlajit::cli
