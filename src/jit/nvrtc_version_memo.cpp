#include "jit/nvrtc_version_memo.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace mlajit {

namespace fs = std::filesystem;

namespace {

void own_anchor() {}

bool is_file(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec);  // follows symlinks, as the loader does
}

std::string real(const fs::path& p) {
    std::error_code ec;
    auto r = fs::canonical(p, ec);
    return ec ? p.string() : r.string();
}

// Whether this code's object or the main executable carries DT_RPATH/DT_RUNPATH: their folders come
// before (RPATH) or between (RUNPATH) the places predict_dlopen_file follows.
bool search_paths_in_objects() {
    struct Ctx {
        uintptr_t own;
        bool found = false;
        int index = 0;
    } ctx{reinterpret_cast<uintptr_t>(&own_anchor)};
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) -> int {
            auto* c = static_cast<Ctx*>(data);
            const bool main_exe = c->index++ == 0;
            bool mine = false;
            const ElfW(Dyn)* dyn = nullptr;
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const auto& ph = info->dlpi_phdr[i];
                const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
                if (ph.p_type == PT_LOAD && c->own >= lo && c->own < lo + ph.p_memsz) mine = true;
                if (ph.p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn)*>(lo);
            }
            if ((main_exe || mine) && dyn)
                for (; dyn->d_tag != DT_NULL; ++dyn)
                    if (dyn->d_tag == DT_RPATH || dyn->d_tag == DT_RUNPATH) c->found = true;
            return 0;
        },
        &ctx);
    return ctx.found;
}

#if defined(__x86_64__)
constexpr int32_t kCacheFlagsThisAbi = 0x0303;  // FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
const char* const kDefaultDirs[] = {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib",
                                    "/usr/lib"};
#elif defined(__aarch64__)
constexpr int32_t kCacheFlagsThisAbi = 0x0a03;  // FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64
const char* const kDefaultDirs[] = {"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib",
                                    "/usr/lib"};
#else
constexpr int32_t kCacheFlagsThisAbi = -1;  // unknown ABI: the cache is not followed (the library is loaded)
const char* const kDefaultDirs[] = {"/lib", "/usr/lib"};
#endif

// Where glibc looks for a bare name, in its order; nullopt when it cannot be followed exactly.
std::optional<std::string> predict_bare_name(const std::string& name, const std::string& ld_library_path,
                                             const std::string& ld_so_cache) {
    if (search_paths_in_objects()) return std::nullopt;
    if (!ld_library_path.empty()) {
        size_t start = 0;
        while (start <= ld_library_path.size()) {
            size_t end = ld_library_path.find_first_of(":;", start);
            if (end == std::string::npos) end = ld_library_path.size();
            const std::string dir = ld_library_path.substr(start, end - start);
            start = end + 1;
            if (dir.empty()) return std::nullopt;  // the current folder: not followed
            std::error_code ec;
            if (fs::exists(fs::path(dir) / "glibc-hwcaps", ec)) return std::nullopt;
            for (const char* sub : {"tls", "haswell", "x86_64", "avx512_1", "aarch64"})
                if (fs::exists(fs::path(dir) / sub / name, ec)) return std::nullopt;  // legacy hwcap folders
            if (is_file(fs::path(dir) / name)) return real(fs::path(dir) / name);
        }
    }
    const auto cached = ld_so_cache_lookup(ld_so_cache, name);
    if (!cached) return std::nullopt;
    if (!cached->empty() && is_file(*cached)) return real(*cached);
    for (const char* d : kDefaultDirs)
        if (is_file(fs::path(d) / name)) return std::nullopt;  // a file ldconfig has not seen: not followed
    return "";  // not found: dlopen would fail for this name
}

template <typename T>
bool read_at(std::ifstream& f, uint64_t off, T* out, size_t n = 1) {
    f.seekg(std::streamoff(off));
    f.read(reinterpret_cast<char*>(out), std::streamsize(sizeof(T) * n));
    return bool(f);
}

}  // namespace

std::optional<std::string> ld_so_cache_lookup(const std::string& cache_file, const std::string& soname) {
    if (kCacheFlagsThisAbi < 0) return std::nullopt;
    std::ifstream f(cache_file, std::ios::binary);
    if (!f) return std::nullopt;
    std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // The new format ("glibc-ld.so.cache1.1"), alone or after an old-format block: string offsets count
    // from its header. Header: magic(17) version(3) nlibs(4) len_strings(4) flags(1) pad(3) ext(4) unused(12).
    static const std::string magic = "glibc-ld.so.cache1.1";
    const size_t base = data.find(magic);
    constexpr size_t kHeader = 48, kEntry = 24;
    if (base == std::string::npos || data.size() < base + kHeader) return std::nullopt;
    uint32_t nlibs = 0;
    std::memcpy(&nlibs, data.data() + base + 20, 4);
    if (data.size() < base + kHeader + uint64_t(nlibs) * kEntry) return std::nullopt;
    std::optional<std::string> found;
    for (uint32_t i = 0; i < nlibs; ++i) {
        const char* e = data.data() + base + kHeader + size_t(i) * kEntry;
        int32_t flags = 0;
        uint32_t key = 0, value = 0;
        uint64_t hwcap = 0;
        std::memcpy(&flags, e, 4);
        std::memcpy(&key, e + 4, 4);
        std::memcpy(&value, e + 8, 4);
        std::memcpy(&hwcap, e + 16, 8);
        if (base + key >= data.size() || base + value >= data.size()) return std::nullopt;
        if (std::strncmp(data.c_str() + base + key, soname.c_str(), soname.size() + 1) != 0) continue;
        if (flags != kCacheFlagsThisAbi && flags != 1) continue;
        if (hwcap != 0) return std::nullopt;  // a hardware-capability variant: glibc may prefer it
        if (!found) found = std::string(data.c_str() + base + value);
    }
    return found ? found : std::optional<std::string>("");
}

std::optional<std::string> predict_dlopen_file(const std::vector<std::string>& candidates,
                                               std::optional<std::string> ld_library_path,
                                               const std::string& ld_so_cache) {
    if (!ld_library_path) {
        const char* v = std::getenv("LD_LIBRARY_PATH");
        ld_library_path = v ? v : "";
    }
    for (const auto& c : candidates) {
        if (void* h = dlopen(c.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
            dlclose(h);  // already mapped in this process: loading it is free, so do not predict
            return std::nullopt;
        }
        if (c.find('/') != std::string::npos) {
            if (is_file(c)) return real(c);
            continue;
        }
        auto p = predict_bare_name(c, *ld_library_path, ld_so_cache);
        if (!p) return std::nullopt;
        if (!p->empty()) return p;
    }
    return std::nullopt;  // nothing would load: the caller's load reports it
}

std::optional<std::string> elf_build_id(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    ElfW(Ehdr) eh{};
    if (!f || !read_at(f, 0, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0 || eh.e_phnum > 256)
        return std::nullopt;
    std::vector<ElfW(Phdr)> ph(eh.e_phnum);
    if (!read_at(f, eh.e_phoff, ph.data(), ph.size())) return std::nullopt;
    for (const auto& p : ph) {
        if (p.p_type != PT_NOTE || p.p_filesz > (1u << 16)) continue;
        std::vector<unsigned char> notes(p.p_filesz);
        if (!read_at(f, p.p_offset, notes.data(), notes.size())) return std::nullopt;
        size_t off = 0;
        auto align4 = [](size_t x) { return (x + 3) & ~size_t(3); };
        while (off + 12 <= notes.size()) {
            uint32_t namesz = 0, descsz = 0, type = 0;
            std::memcpy(&namesz, &notes[off], 4);
            std::memcpy(&descsz, &notes[off + 4], 4);
            std::memcpy(&type, &notes[off + 8], 4);
            const size_t name_at = off + 12, desc_at = name_at + align4(namesz);
            if (desc_at + descsz > notes.size()) break;
            if (type == NT_GNU_BUILD_ID && namesz == 4 && std::memcmp(&notes[name_at], "GNU", 4) == 0 && descsz > 0) {
                std::string hex;
                for (size_t i = 0; i < descsz; ++i) hex += fmt::format("{:02x}", notes[desc_at + i]);
                return hex;
            }
            off = desc_at + align4(descsz);
        }
    }
    return std::nullopt;
}

namespace {
constexpr const char* kMemoFile = "nvrtc-versions.json";

nlohmann::json read_memo(const fs::path& root) {
    std::ifstream f(root / kMemoFile);
    if (!f) return nlohmann::json::object();
    auto j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? j : nlohmann::json::object();  // unreadable or damaged: as if empty (rewritten)
}
}  // namespace

std::optional<NvrtcVersion> nvrtc_memo_lookup(const fs::path& root, const std::string& build_id) {
    const auto j = read_memo(root);
    auto it = j.find(build_id);
    if (it == j.end() || !it->is_object()) return std::nullopt;
    const auto ma = it->find("major"), mi = it->find("minor");
    if (ma == it->end() || mi == it->end() || !ma->is_number_integer() || !mi->is_number_integer()) return std::nullopt;
    return NvrtcVersion{ma->get<int>(), mi->get<int>()};
}

bool nvrtc_memo_record(const fs::path& root, const std::string& build_id, NvrtcVersion v) {
    try {
        if (build_id.empty()) return false;
        auto j = read_memo(root);
        j[build_id] = {{"major", v.major}, {"minor", v.minor}};
        std::error_code ec;
        fs::create_directories(root, ec);
        const fs::path tmp = root / fmt::format(".{}.{}.{}", kMemoFile, ::getpid(), std::random_device{}());
        {
            std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
            out << j.dump(1);
            if (!out.flush()) {
                fs::remove(tmp, ec);
                return false;
            }
        }
        fs::rename(tmp, root / kMemoFile, ec);
        if (ec) {
            fs::remove(tmp, ec);
            return false;
        }
        return true;
    } catch (...) {  // best effort: the next process loads NVRTC and tries again
        return false;
    }
}

}  // namespace mlajit
