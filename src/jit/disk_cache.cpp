#include "jit/disk_cache.h"

#include "common/log.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include "common/error.h"

namespace mlajit {

namespace fs = std::filesystem;

// The lead will point this at the shared logger (common/log.h).

namespace {

constexpr const char* kCubinFile = "kernel.cubin";
constexpr const char* kMetaFile = "meta.json";
constexpr const char* kMarkerFile = "last_used";
// A cubin is a few MB at most; a bigger file is damage, and reading it would only waste memory.
constexpr uint64_t kMaxCubinBytes = uint64_t(1) << 30;
constexpr uint64_t kMaxMetaBytes = uint64_t(64) << 20;

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

// Process-wide, so that a problem is reported once however many DiskCache objects see it.
bool first_time(const std::string& what) {
    static std::mutex mu;
    static std::set<std::string> seen;
    std::lock_guard<std::mutex> g(mu);
    return seen.insert(what).second;
}

bool valid_component(std::string_view s) {
    if (s.empty() || s.size() > 128 || s[0] == '.') return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
               c == '.';
    });
}

void check_names(std::string_view arch, std::string_view family) {
    if (!valid_component(arch) || arch == "tmp" || arch == "locks")
        fail_arg("kernel cache: arch '{}' is not usable as a directory name (allowed: letters, digits, '_', '-', '.', "
                 "not starting with '.', not 'tmp' or 'locks', at most 128 chars); pass the exact target, e.g. sm_90a",
                 arch);
    if (!valid_component(family))
        fail_arg("kernel cache: family '{}' is not usable as a directory name (allowed: letters, digits, '_', '-', '.', "
                 "not starting with '.', at most 128 chars); pass the kernel family name, e.g. sparse_mqa_fwd",
                 family);
}

// Thrown inside store() only; store() turns it into the one "cannot write" warning.
struct WriteError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Fd {
public:
    explicit Fd(int fd = -1) : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }
    bool ok() const { return fd_ >= 0; }
    void reset() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    int release() { return std::exchange(fd_, -1); }
    void assign(int fd) {
        reset();
        fd_ = fd;
    }

private:
    int fd_;
};

int open_retry(const char* path, int flags, mode_t mode = 0, int dirfd = AT_FDCWD) {
    int fd;
    do fd = ::openat(dirfd, path, flags | O_CLOEXEC, mode);
    while (fd < 0 && errno == EINTR);
    return fd;
}

// read_whole's code for a path that exists but is no regular file (a directory, FIFO, device).
constexpr int kNotRegularFile = -1;

std::string read_error_text(int e) { return e == kNotRegularFile ? "not a regular file" : errno_text(e); }

// Reads the whole file into `out`; returns 0, an errno or kNotRegularFile. EFBIG if it exceeds max_bytes,
// EIO if it shrank while being read.
template <typename Buf>
int read_whole(const fs::path& path, Buf& out, uint64_t max_bytes, uint64_t* size_out = nullptr, int dirfd = AT_FDCWD) {
    // O_NONBLOCK: a FIFO in place of a cache file would otherwise block open() until a writer comes, that
    // is forever (found by tests/cpu/test_cache_faults.cpp). It changes nothing for regular files.
    Fd fd(open_retry(path.c_str(), O_RDONLY | O_NONBLOCK, 0, dirfd));
    if (!fd.ok()) return errno;
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return errno;
    if (!S_ISREG(st.st_mode)) return kNotRegularFile;
    uint64_t size = uint64_t(st.st_size);
    if (size_out) *size_out = size;
    if (size > max_bytes) return EFBIG;
    out.resize(size);
    uint64_t done = 0;
    while (done < size) {
        ssize_t n = ::read(fd.get(), out.data() + done, size - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EIO;
        done += uint64_t(n);
    }
    return 0;
}

void write_whole(const fs::path& path, std::string_view data) {
    Fd fd(open_retry(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644));
    if (!fd.ok()) throw WriteError(fmt::format("cannot create {}: {}", path.string(), errno_text(errno)));
    size_t done = 0;
    while (done < data.size()) {
        ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw WriteError(fmt::format("cannot write {}: {}", path.string(), errno_text(errno)));
        }
        done += size_t(n);
    }
    // Without fsync the rename can reach the disk before the data: a crash would publish a hollow entry.
    if (::fsync(fd.get()) != 0)
        throw WriteError(fmt::format("cannot fsync {}: {}", path.string(), errno_text(errno)));
    if (::close(fd.release()) != 0)
        throw WriteError(fmt::format("cannot close {}: {}", path.string(), errno_text(errno)));
}

// Makes the directory's entries (a rename, new files) durable. Some file systems refuse fsync on a
// directory (EINVAL); they give no stronger guarantee to ask for, so that is not an error.
void fsync_dir(const fs::path& dir) {
    Fd fd(open_retry(dir.c_str(), O_RDONLY | O_DIRECTORY));
    if (!fd.ok()) throw WriteError(fmt::format("cannot open directory {}: {}", dir.string(), errno_text(errno)));
    if (::fsync(fd.get()) != 0 && errno != EINVAL)
        throw WriteError(fmt::format("cannot fsync directory {}: {}", dir.string(), errno_text(errno)));
}

void create_dirs(const fs::path& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw WriteError(fmt::format("cannot create directory {}: {}", dir.string(), ec.message()));
}

enum class EntryState { ok, missing, corrupt };

struct Checked {
    EntryState state = EntryState::missing;
    std::string problem;
    std::vector<char> cubin;
};

Checked corrupt(std::string problem) { return {EntryState::corrupt, std::move(problem), {}}; }

// The one definition of a valid entry, shared by load, store (is theirs good?) and verify. Both files are
// read through one open descriptor of the entry's directory, so they come from the same entry even when a
// concurrent remove or republish renames it away between the two reads (publication and removal are
// renames of the whole directory). A problem found in an entry that is no longer the one at `dir` (its
// directory was renamed away, and is perhaps being deleted, while we read) is a race, not damage: it reads
// as a plain miss. Found by tests/cpu/test_cache_faults.cpp (a false "kernel.cubin is missing" about 1 in
// 40,000 loads under SIGKILLed concurrent writers, which a second look only made rarer).
Checked check_entry(const fs::path& dir, const CacheKey& key) {
    Fd dfd(open_retry(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NONBLOCK));
    if (!dfd.ok()) {
        if (errno == ENOENT || errno == ENOTDIR) return {};  // store() moves a non-directory aside itself
        return corrupt(fmt::format("the entry's directory is unreadable: {}", errno_text(errno)));
    }
    // Still the entry at `dir`? Our descriptor pins the inode, so its number cannot be reused meanwhile.
    auto still_published = [&] {
        struct stat held, now;
        return ::fstat(dfd.get(), &held) == 0 && ::stat(dir.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
               held.st_dev == now.st_dev;
    };
    auto damaged = [&](std::string problem) -> Checked {
        if (!still_published()) return {};
        return corrupt(std::move(problem));
    };
    std::string meta_text;
    if (int e = read_whole(kMetaFile, meta_text, kMaxMetaBytes, nullptr, dfd.get())) {
        if (e == ENOENT || e == ENOTDIR) {
            // No metadata but a cubin means damage (publication is atomic), not a plain miss.
            struct stat st;
            if (::fstatat(dfd.get(), kCubinFile, &st, 0) == 0) return damaged("meta.json is missing");
            return {};
        }
        return damaged(fmt::format("meta.json is unreadable: {}", read_error_text(e)));
    }
    auto meta = nlohmann::json::parse(meta_text, nullptr, /*allow_exceptions=*/false);
    if (meta.is_discarded()) return damaged("meta.json is not valid JSON");
    if (!meta.is_object()) return damaged("meta.json is not a JSON object");
    auto bytes_it = meta.find("cubin_bytes");
    auto sum_it = meta.find("cubin_xxh3_128");
    if (bytes_it == meta.end() || !bytes_it->is_number_unsigned())
        return damaged("meta.json has no unsigned integer 'cubin_bytes'");
    if (sum_it == meta.end() || !sum_it->is_string()) return damaged("meta.json has no string 'cubin_xxh3_128'");
    auto expected_sum = CacheKey::from_hex(sum_it->get_ref<const std::string&>());
    if (!expected_sum) return damaged("meta.json's 'cubin_xxh3_128' is not 32 hex digits");
    if (auto k = meta.find("key"); k != meta.end() && (!k->is_string() || k->get_ref<const std::string&>() != key.hex()))
        return damaged(fmt::format("meta.json's 'key' does not match the directory name {}", key.hex()));
    uint64_t want = bytes_it->get<uint64_t>();

    Checked out;
    uint64_t size = 0;
    if (int e = read_whole(kCubinFile, out.cubin, std::min(want, kMaxCubinBytes), &size, dfd.get())) {
        if (e == EFBIG) return damaged(fmt::format("kernel.cubin has {} bytes, meta.json says {}", size, want));
        if (e == ENOENT) return damaged("kernel.cubin is missing");
        return damaged(fmt::format("kernel.cubin is unreadable: {}", read_error_text(e)));
    }
    if (size != want)
        return damaged(fmt::format("kernel.cubin has {} bytes, meta.json says {} (truncated?)", size, want));
    if (xxh3_128(out.cubin) != *expected_sum) return damaged("kernel.cubin does not match its checksum");
    out.state = EntryState::ok;
    return out;
}

// A second look where the first found damage: a published entry replaced between our open and our check
// (still_published() then compares the NEW entry) is seen whole on the second look.
Checked check_entry_twice(const fs::path& dir, const CacheKey& key) {
    Checked c = check_entry(dir, key);
    return c.state == EntryState::corrupt ? check_entry(dir, key) : c;
}

void touch(const fs::path& p) {
    if (::utimensat(AT_FDCWD, p.c_str(), nullptr, 0) == 0 || errno != ENOENT) return;
    // Entries from older tools may lack the marker. O_NOFOLLOW: a dangling symlink in its place must not
    // create a file wherever it points.
    Fd fd(open_retry(p.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK, 0644));
}

// Error-code directory iteration: maintenance must survive entries vanishing under concurrent use.
template <typename F>
void for_each_dir_entry(const fs::path& dir, F&& f) {
    std::error_code ec;
    fs::directory_iterator it(dir, ec), end;
    for (; !ec && it != end; it.increment(ec)) f(*it);
}

std::string mode_name(CacheMode m) {
    switch (m) {
        case CacheMode::rw: return "rw";
        case CacheMode::ro: return "ro";
        case CacheMode::off: return "off";
    }
    return "?";
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Keys and hashing

std::string CacheKey::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

std::optional<CacheKey> CacheKey::from_hex(std::string_view s) {
    if (s.size() != 32) return std::nullopt;
    CacheKey k;
    for (size_t i = 0; i < 32; ++i) {
        char c = s[i];
        uint64_t d;
        if (c >= '0' && c <= '9') d = uint64_t(c - '0');
        else if (c >= 'a' && c <= 'f') d = uint64_t(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') d = uint64_t(c - 'A' + 10);
        else return std::nullopt;
        uint64_t& half = i < 16 ? k.hi : k.lo;
        half = (half << 4) | d;
    }
    return k;
}

struct Hasher::State {
    XXH3_state_t st;
};

Hasher::Hasher() : state_(std::make_unique<State>()) { XXH3_128bits_reset(&state_->st); }
Hasher::~Hasher() = default;
Hasher::Hasher(Hasher&&) noexcept = default;
Hasher& Hasher::operator=(Hasher&&) noexcept = default;

Hasher& Hasher::update(std::string_view bytes) {
    XXH3_128bits_update(&state_->st, bytes.data(), bytes.size());
    return *this;
}

Hasher& Hasher::update_u64(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    XXH3_128bits_update(&state_->st, b, sizeof b);
    return *this;
}

Hasher& Hasher::update_field(std::string_view bytes) {
    update_u64(bytes.size());
    return update(bytes);
}

CacheKey Hasher::digest() const {
    XXH128_hash_t h = XXH3_128bits_digest(&state_->st);
    return {h.high64, h.low64};
}

CacheKey xxh3_128(std::span<const char> bytes) {
    XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
    return {h.high64, h.low64};
}

std::optional<fs::path> default_cache_root(const std::optional<fs::path>& mlajit_cache_dir,
                                           const std::optional<fs::path>& xdg_cache_home,
                                           const std::optional<fs::path>& home) {
    auto set = [](const std::optional<fs::path>& p) { return p && !p->empty(); };
    if (set(mlajit_cache_dir)) return *mlajit_cache_dir;
    if (set(xdg_cache_home) && xdg_cache_home->is_absolute()) return *xdg_cache_home / "mlajit";
    if (set(home)) return *home / ".cache" / "mlajit";
    return std::nullopt;
}

// ---------------------------------------------------------------------------------------------------------
// DiskCache

DiskCache::DiskCache(fs::path root, CacheMode mode) : mode_(mode) {
    if (root.empty() && mode != CacheMode::off)
        fail_arg("kernel cache: the cache root is empty; pass a directory (MLAJIT_CACHE_DIR) or use mode off");
    // Absolute now, so that a later chdir by the host application cannot move the cache.
    std::error_code ec;
    root_ = root.empty() ? root : fs::absolute(root, ec);
    if (ec) root_ = root;
    // fmt rather than `"v" + std::to_string(...)`: GCC 12's inliner sees an impossible memcpy bound in
    // operator+(const char*, string&&) at -O3 and raises -Wstringop-overflow (a false positive).
    vdir_ = root_ / fmt::format("v{}", kFormatVersion);
}

fs::path DiskCache::entry_dir(std::string_view arch, std::string_view family, const CacheKey& key) const {
    return vdir_ / arch / family / key.hex();
}

fs::path DiskCache::unique_tmp_name(std::string_view stem) const {
    // pid + counter is unique on one host; the random part covers hosts sharing a network file system.
    static std::atomic<uint64_t> counter{0};
    std::random_device rd;
    return vdir_ / "tmp" /
           fmt::format("{}.{}.{}.{:08x}", stem, ::getpid(), counter.fetch_add(1, std::memory_order_relaxed), rd());
}

std::optional<std::vector<char>> DiskCache::load(std::string_view arch, std::string_view family,
                                                 const CacheKey& key) {
    if (mode_ == CacheMode::off) return std::nullopt;
    check_names(arch, family);
    fs::path dir = entry_dir(arch, family, key);
    if (have_memory_.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> g(memory_mu_);
        if (auto it = memory_.find(dir.string()); it != memory_.end()) return it->second;
    }
    try {
        Checked c = check_entry_twice(dir, key);
        if (c.state == EntryState::ok) {
            if (mode_ == CacheMode::rw) touch(dir / kMarkerFile);
            return std::move(c.cubin);
        }
        if (c.state == EntryState::corrupt && first_time("corrupt:" + dir.string()))
            log().warn("kernel cache: entry {} is corrupt ({}); treating it as a miss, the kernel will be "
                       "recompiled and the entry replaced. If this repeats, check the disk, or delete the directory.",
                       dir.string(), c.problem);
    } catch (const std::exception& e) {
        // Only allocation or JSON-library surprises get here; a cache must never take the caller down.
        if (first_time("corrupt:" + dir.string()))
            log().warn("kernel cache: reading entry {} failed ({}); treating it as a miss", dir.string(), e.what());
    }
    return std::nullopt;
}

void DiskCache::keep_in_memory(const fs::path& dest, std::span<const char> cubin) {
    std::lock_guard<std::mutex> g(memory_mu_);
    memory_[dest.string()].assign(cubin.begin(), cubin.end());
    have_memory_.store(true, std::memory_order_release);
}

void DiskCache::degrade(const std::string& what) {
    degraded_.store(true, std::memory_order_relaxed);
    if (first_time("degraded:" + root_.string()))
        log().warn("kernel cache: cannot write to {}: {}. Continuing with an in-memory cache for this process: "
                   "kernels compiled now are not saved and will be compiled again by the next process. To fix: make "
                   "the directory writable or free space, or set MLAJIT_CACHE_DIR to a writable directory; "
                   "MLAJIT_CACHE=ro uses an existing cache read-only without this warning.",
                   root_.string(), what);
}

bool DiskCache::store(std::string_view arch, std::string_view family, const CacheKey& key,
                      std::span<const char> cubin, const nlohmann::json& meta) {
    if (mode_ == CacheMode::off) return false;
    check_names(arch, family);
    fs::path dest = entry_dir(arch, family, key);
    if (writable()) {
        try {
            if (publish(dest, key, arch, family, cubin, meta)) return true;
        } catch (const WriteError& e) {
            degrade(e.what());
        } catch (const std::exception& e) {
            degrade(fmt::format("unexpected error while writing {}: {}", dest.string(), e.what()));
        }
    }
    keep_in_memory(dest, cubin);
    return false;
}

bool DiskCache::publish(const fs::path& dest, const CacheKey& key, std::string_view arch, std::string_view family,
                        std::span<const char> cubin, const nlohmann::json& meta) {
    // Another process may have published while we compiled: reading is far cheaper than writing + fsync.
    Checked existing = check_entry(dest, key);
    if (existing.state == EntryState::ok) return true;

    const fs::path parent = dest.parent_path();
    create_dirs(vdir_ / "tmp");
    create_dirs(parent);

    nlohmann::json m = meta.is_object() ? meta : meta.is_null() ? nlohmann::json::object() : nlohmann::json{{"meta", meta}};
    m["format_version"] = kFormatVersion;
    m["arch"] = std::string(arch);
    m["family"] = std::string(family);
    m["key"] = key.hex();
    m["cubin_bytes"] = uint64_t(cubin.size());
    m["cubin_xxh3_128"] = xxh3_128(cubin).hex();
    // NVRTC logs may hold bytes that are not UTF-8; dump() would throw on them.
    std::string meta_text = m.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";

    const fs::path work = unique_tmp_name(key.hex());
    if (::mkdir(work.c_str(), 0755) != 0)
        throw WriteError(fmt::format("cannot create directory {}: {}", work.string(), errno_text(errno)));
    struct Cleanup {
        const fs::path& p;
        ~Cleanup() {
            std::error_code ec;
            fs::remove_all(p, ec);
        }
    } cleanup{work};

    write_whole(work / kCubinFile, std::string_view(cubin.data(), cubin.size()));
    write_whole(work / kMetaFile, meta_text);
    write_whole(work / kMarkerFile, {});
    fsync_dir(work);

    for (int attempt = 0; attempt < 4; ++attempt) {
        if (::rename(work.c_str(), dest.c_str()) == 0) {
            fsync_dir(parent);
            // A new family or arch directory must itself be durable in its parent.
            fsync_dir(parent.parent_path());
            fsync_dir(vdir_);
            return true;
        }
        int e = errno;
        if (e == EEXIST || e == ENOTEMPTY) {
            Checked theirs = check_entry_twice(dest, key);
            if (theirs.state == EntryState::ok) return true;  // another process won: keep theirs
            if (theirs.state == EntryState::corrupt) {
                // Move the bad entry aside in one step so readers see it or nothing, never half of it.
                fs::path trash = unique_tmp_name("trash-" + key.hex());
                if (::rename(dest.c_str(), trash.c_str()) == 0) {
                    std::error_code ec;
                    fs::remove_all(trash, ec);
                    log().info("kernel cache: replaced corrupt entry {}", dest.string());
                }
            }
            continue;
        }
        if (e == ENOTDIR) {
            // Something that is not a directory (a file, a symlink) sits where the entry goes: rename() cannot
            // replace it with a directory. Move it aside like a corrupt entry; without this, one such file
            // made every store of the process fail and the cache go memory-only (test_cache_faults.cpp).
            struct stat st;
            if (::lstat(dest.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
                fs::path trash = unique_tmp_name("trash-" + key.hex());
                if (::rename(dest.c_str(), trash.c_str()) == 0) {
                    std::error_code ec;
                    fs::remove(trash, ec);
                    log().info("kernel cache: replaced {}, which was not a directory", dest.string());
                }
                continue;
            }
        }
        if (e == ENOENT) {  // the family directory vanished (concurrent maintenance): recreate and retry
            create_dirs(parent);
            continue;
        }
        throw WriteError(fmt::format("cannot rename {} to {}: {}", work.string(), dest.string(), errno_text(e)));
    }
    throw WriteError(fmt::format("could not publish {}: it kept changing under concurrent writers", dest.string()));
}

// ---------------------------------------------------------------------------------------------------------
// Locks

DiskCache::KeyLock::~KeyLock() { release(); }
DiskCache::KeyLock::KeyLock(KeyLock&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), timed_out_(std::exchange(o.timed_out_, false)) {}
DiskCache::KeyLock& DiskCache::KeyLock::operator=(KeyLock&& o) noexcept {
    if (this != &o) {
        release();
        fd_ = std::exchange(o.fd_, -1);
        timed_out_ = std::exchange(o.timed_out_, false);
    }
    return *this;
}
void DiskCache::KeyLock::release() {
    if (fd_ < 0) return;
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
    fd_ = -1;
}

DiskCache::KeyLock DiskCache::lock(const CacheKey& key, std::chrono::milliseconds timeout) {
    // Without a store at the end, holding the lock would only serialize compiles that all happen anyway.
    if (!writable()) return {};
    const fs::path dir = vdir_ / "locks";
    const fs::path path = dir / (key.hex() + ".lock");
    Fd fd(open_retry(path.c_str(), O_RDWR | O_CREAT, 0644));
    if (!fd.ok() && errno == ENOENT) {
        std::error_code ec;
        fs::create_directories(dir, ec);
        fd.assign(open_retry(path.c_str(), O_RDWR | O_CREAT, 0644));
    }
    if (!fd.ok()) {
        log().debug("kernel cache: cannot open lock file {}: {}; compiling without the lock", path.string(),
                    errno_text(errno));
        return {};
    }
    // flock has no timed wait; polling keeps this signal-free and lets a waiter give up cleanly.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
        if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return KeyLock(fd.release());
        if (errno == EINTR) continue;
        if (errno != EWOULDBLOCK) {
            log().debug("kernel cache: cannot lock {}: {}; compiling without the lock", path.string(),
                        errno_text(errno));
            return {};
        }
        auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            log().debug("kernel cache: lock {} still busy after {} ms; compiling without it", path.string(),
                        timeout.count());
            KeyLock unheld;
            unheld.timed_out_ = true;
            return unheld;
        }
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
        pause = std::min(pause * 2, std::chrono::milliseconds(25));
    }
}

// ---------------------------------------------------------------------------------------------------------
// Maintenance

std::vector<CacheEntryInfo> DiskCache::list() const {
    std::vector<CacheEntryInfo> out;
    if (mode_ == CacheMode::off) return out;
    for_each_dir_entry(vdir_, [&](const fs::directory_entry& a) {
        std::string arch = a.path().filename().string();
        std::error_code ec;
        if (arch == "tmp" || arch == "locks" || !valid_component(arch) || !a.is_directory(ec)) return;
        for_each_dir_entry(a.path(), [&](const fs::directory_entry& f) {
            std::string family = f.path().filename().string();
            if (!valid_component(family) || !f.is_directory(ec)) return;
            for_each_dir_entry(f.path(), [&](const fs::directory_entry& k) {
                auto key = CacheKey::from_hex(k.path().filename().string());
                if (!key || !k.is_directory(ec)) return;
                CacheEntryInfo info;
                info.arch = arch;
                info.family = family;
                info.key = *key;
                info.dir = k.path();
                for_each_dir_entry(k.path(), [&](const fs::directory_entry& file) {
                    std::error_code fec;
                    if (!file.is_regular_file(fec)) return;
                    uint64_t sz = file.file_size(fec);
                    if (fec) return;
                    info.disk_bytes += sz;
                    if (file.path().filename() == kCubinFile) info.cubin_bytes = sz;
                });
                std::error_code tec;
                info.last_used = fs::last_write_time(k.path() / kMarkerFile, tec);
                if (tec) info.last_used = fs::last_write_time(k.path() / kCubinFile, tec);
                if (tec) info.last_used = fs::last_write_time(k.path(), tec);
                std::string text;
                if (read_whole(k.path() / kMetaFile, text, kMaxMetaBytes) == 0) {
                    auto j = nlohmann::json::parse(text, nullptr, false);
                    if (!j.is_discarded()) info.meta = std::move(j);
                }
                out.push_back(std::move(info));
            });
        });
    });
    std::sort(out.begin(), out.end(), [](const CacheEntryInfo& x, const CacheEntryInfo& y) {
        return std::tie(x.arch, x.family, x.key.hi, x.key.lo) < std::tie(y.arch, y.family, y.key.hi, y.key.lo);
    });
    return out;
}

bool DiskCache::mutating_allowed(const char* op) {
    if (mode_ == CacheMode::rw) return true;
    if (first_time("maintenance:" + root_.string()))
        log().warn("kernel cache: {} skipped: the cache at {} is opened in mode {}; reopen it in mode rw "
                   "(MLAJIT_CACHE=rw) to modify it",
                   op, root_.string(), mode_name(mode_));
    return false;
}

namespace {
// Renamed away first so that a concurrent reader sees the whole entry or none of it.
bool remove_entry_dir(const fs::path& dir, const fs::path& trash) {
    std::error_code ec;
    fs::create_directories(trash.parent_path(), ec);
    if (::rename(dir.c_str(), trash.c_str()) == 0) {
        fs::remove_all(trash, ec);
        return true;
    }
    if (errno == ENOENT) return false;
    return fs::remove_all(dir, ec) > 0 && !ec;
}
}  // namespace

CacheVerifyReport DiskCache::verify(bool remove_bad) {
    CacheVerifyReport r;
    bool may_remove = remove_bad && mutating_allowed("removing bad entries");
    for (auto& info : list()) {
        Checked c = check_entry(info.dir, info.key);
        if (c.state == EntryState::ok) {
            ++r.ok;
            continue;
        }
        std::string problem = c.state == EntryState::missing ? "empty entry directory" : c.problem;
        if (may_remove && remove_entry_dir(info.dir, unique_tmp_name("trash-" + info.key.hex()))) ++r.removed;
        r.bad.push_back({std::move(info), std::move(problem)});
    }
    return r;
}

bool DiskCache::remove(std::string_view arch, std::string_view family, const CacheKey& key) {
    check_names(arch, family);
    if (!mutating_allowed("remove")) return false;
    return remove_entry_dir(entry_dir(arch, family, key), unique_tmp_name("trash-" + key.hex()));
}

size_t DiskCache::clean_temporaries(std::chrono::seconds min_age) {
    if (!mutating_allowed("cleaning temporaries")) return 0;
    size_t n = 0;
    const auto now = fs::file_time_type::clock::now();
    for_each_dir_entry(vdir_ / "tmp", [&](const fs::directory_entry& e) {
        std::error_code ec;
        auto t = fs::last_write_time(e.path(), ec);
        if (ec || now - t < min_age) return;
        if (fs::remove_all(e.path(), ec) > 0 && !ec) ++n;
    });
    return n;
}

size_t DiskCache::remove_other_versions() {
    if (!mutating_allowed("removing other format versions")) return 0;
    size_t n = 0;
    const std::string mine = vdir_.filename().string();
    for_each_dir_entry(root_, [&](const fs::directory_entry& e) {
        std::string name = e.path().filename().string();
        std::error_code ec;
        if (name == mine || name.size() < 2 || name[0] != 'v' || e.is_symlink(ec) || !e.is_directory(ec)) return;
        if (!std::all_of(name.begin() + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; })) return;
        if (fs::remove_all(e.path(), ec) > 0 && !ec) ++n;
        else log().warn("kernel cache: cannot remove old cache version {}: {}; delete it by hand", e.path().string(),
                        ec.message());
    });
    return n;
}

CachePruneReport DiskCache::prune(uint64_t max_bytes) {
    CachePruneReport r;
    if (!mutating_allowed("prune")) return r;
    r.versions_removed = remove_other_versions();
    r.temporaries_removed = clean_temporaries();
    auto entries = list();
    std::stable_sort(entries.begin(), entries.end(),
                     [](const CacheEntryInfo& a, const CacheEntryInfo& b) { return a.last_used < b.last_used; });
    uint64_t total = 0;
    for (const auto& e : entries) total += e.disk_bytes;
    for (const auto& e : entries) {
        if (total <= max_bytes) break;
        if (remove_entry_dir(e.dir, unique_tmp_name("trash-" + e.key.hex()))) {
            ++r.entries_removed;
            r.bytes_removed += e.disk_bytes;
            total -= e.disk_bytes;
        }
    }
    r.bytes_kept = total;
    return r;
}

}  // namespace mlajit
