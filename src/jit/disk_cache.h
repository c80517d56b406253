// The on-disk kernel cache (DESIGN.md section 4): cubins keyed by a hash of everything that changes the
// binary, published atomically, verified by checksum on every load, shared by concurrent processes.
//
// Layout under the root:
//   v<N>/<arch>/<family>/<key-hex>/kernel.cubin   the binary
//   v<N>/<arch>/<family>/<key-hex>/meta.json      the caller's metadata plus cubin_bytes, cubin_xxh3_128,
//                                                 format_version, arch, family, key
//   v<N>/<arch>/<family>/<key-hex>/last_used      empty; its mtime is the last hit (prune's LRU order)
//   v<N>/tmp/                                     entries being written, renamed into place when complete
//   v<N>/locks/<key-hex>.lock                     per-key advisory locks (flock)
// Everything directly under v<N>/ other than tmp/ and locks/ is an arch directory; keep other data (such
// as calibration tables) outside v<N>/.
//
// Thread-safe: one DiskCache may be shared by all threads of a process.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mlajit {

struct CacheKey {
    uint64_t hi = 0, lo = 0;
    std::string hex() const;  // 32 lower-case hex chars, hi first
    static std::optional<CacheKey> from_hex(std::string_view s);  // nullopt unless exactly 32 hex chars
    bool operator==(const CacheKey&) const = default;
};

// Streaming XXH3-128, for cache keys (and anything else needing a 128-bit content hash).
class Hasher {
public:
    Hasher();
    ~Hasher();
    Hasher(Hasher&&) noexcept;
    Hasher& operator=(Hasher&&) noexcept;
    Hasher(const Hasher&) = delete;
    Hasher& operator=(const Hasher&) = delete;

    // Raw bytes: update("ab"); update("c") hashes the same as update("abc").
    Hasher& update(std::string_view bytes);
    // 8 bytes little-endian, the same on every host.
    Hasher& update_u64(uint64_t v);
    // Length-prefixed, so a sequence of fields cannot collide with a different split of the same bytes
    // (("ab","c") vs ("a","bc")); use this for key components.
    Hasher& update_field(std::string_view bytes);
    // Does not reset: more updates may follow.
    CacheKey digest() const;

private:
    struct State;
    std::unique_ptr<State> state_;
};

// One-shot XXH3-128 (the cubin checksum).
CacheKey xxh3_128(std::span<const char> bytes);

enum class CacheMode { rw, ro, off };

// $MLAJIT_CACHE_DIR, else $XDG_CACHE_HOME/mlajit, else $HOME/.cache/mlajit. Pure: the caller passes the
// three variables (unset or empty = nullopt/empty path). A relative XDG_CACHE_HOME is ignored, as the XDG
// spec requires. nullopt when none applies: the caller picks a fallback (or mode off) and says so.
std::optional<std::filesystem::path> default_cache_root(const std::optional<std::filesystem::path>& mlajit_cache_dir,
                                                        const std::optional<std::filesystem::path>& xdg_cache_home,
                                                        const std::optional<std::filesystem::path>& home);

struct CacheEntryInfo {
    std::string arch, family;
    CacheKey key;
    std::filesystem::path dir;
    uint64_t cubin_bytes = 0;                    // size of kernel.cubin on disk
    std::filesystem::file_time_type last_used;   // last hit (last_used marker), else the cubin's mtime
    nlohmann::json meta;                         // meta.json as stored; null if unreadable
    uint64_t disk_bytes = 0;                     // all files of the entry (what prune's budget counts)
};

struct CacheVerifyIssue {
    CacheEntryInfo entry;
    std::string problem;
};
struct CacheVerifyReport {
    size_t ok = 0;
    std::vector<CacheVerifyIssue> bad;
    size_t removed = 0;
};
struct CachePruneReport {
    size_t versions_removed = 0;     // v<M>/ directories of other format versions
    size_t temporaries_removed = 0;
    size_t entries_removed = 0;
    uint64_t bytes_removed = 0;      // of removed entries
    uint64_t bytes_kept = 0;         // of the entries left
};

class DiskCache {
public:
    // Part of every key (the caller mixes it in) and of the layout (v<N>/).
    static constexpr int kFormatVersion = 1;

    // Does no I/O: directories are created on the first store. A relative root is made absolute now.
    DiskCache(std::filesystem::path root, CacheMode mode);
    DiskCache(const DiskCache&) = delete;
    DiskCache& operator=(const DiskCache&) = delete;

    // The cubin if the entry exists and its checksum verifies. Missing = miss; corrupt (bad checksum,
    // truncated, unreadable or inconsistent metadata) = miss, logged once per entry at warn level; the
    // caller recompiles and store() replaces it. Never throws for I/O problems.
    // On a hit in rw mode, touches the entry's last_used marker (best effort).
    // After a store() that could not reach the disk (ro mode or degraded), also hits on the bytes it kept
    // in memory. Throws Error(INVALID_ARGUMENT) if arch or family is not a plain path component.
    std::optional<std::vector<char>> load(std::string_view arch, std::string_view family, const CacheKey& key);

    // Publishes atomically (temporary dir under v<N>/tmp/, fsync files and dir, rename into place). If a
    // valid entry for the key is there already (another process won), keeps it; a corrupt one is
    // replaced. Returns true iff a valid entry for the key is on disk afterwards.
    // false without I/O in ro and off modes (silently). If the directory cannot be written (read-only,
    // full, permission), logs ONE warning per root per process, switches this cache to memory-only
    // (writable() becomes false; later stores skip the disk) and returns false; never throws for I/O.
    // Whenever the bytes do not reach the disk (except mode off), they are kept in memory so load() hits.
    // `meta` should be an object (anything else is kept under "meta"); the fields listed at the top of
    // this file are set by the cache and override the caller's.
    bool store(std::string_view arch, std::string_view family, const CacheKey& key, std::span<const char> cubin,
               const nlohmann::json& meta);

    // Per-key advisory lock so that N processes (and threads) compile a key once. Correctness never
    // depends on it: on timeout, in ro/off mode or when the lock file cannot be opened, the guard is
    // unheld and the caller compiles anyway. Lock files are never deleted (only with a whole other-version
    // directory). Not to be held across fork(): the child would share, and could release, the lock.
    class KeyLock {
    public:
        KeyLock() = default;
        ~KeyLock();
        KeyLock(KeyLock&& o) noexcept;
        KeyLock& operator=(KeyLock&& o) noexcept;
        KeyLock(const KeyLock&) = delete;
        KeyLock& operator=(const KeyLock&) = delete;
        bool held() const { return fd_ >= 0; }
        // Unheld because another holder kept it past the timeout (not because locking does not apply, as in
        // ro/off mode or an unwritable directory): the case worth telling the user about.
        bool timed_out() const { return timed_out_; }
        void release();

    private:
        friend class DiskCache;
        explicit KeyLock(int fd) : fd_(fd) {}
        int fd_ = -1;
        bool timed_out_ = false;
    };
    KeyLock lock(const CacheKey& key, std::chrono::milliseconds timeout);

    // --- Maintenance (the warmup CLI). Entries of this format version only, sorted by arch, family, key.
    std::vector<CacheEntryInfo> list() const;
    // The mutating ones below do nothing in ro/off mode (one warning says to reopen with rw).
    // Re-checks every entry's checksum; with remove_bad, deletes the bad ones.
    CacheVerifyReport verify(bool remove_bad = false);
    // True if the entry existed and is gone. Readers never see a half-removed entry.
    bool remove(std::string_view arch, std::string_view family, const CacheKey& key);
    // Leftovers of interrupted stores under v<N>/tmp/ older than min_age (younger ones may be in use).
    size_t clean_temporaries(std::chrono::seconds min_age = std::chrono::seconds(60));
    // Removes <root>/v<M>/ for every M != kFormatVersion (nothing else under the root). Count removed.
    size_t remove_other_versions();
    // remove_other_versions + clean_temporaries, then deletes least-recently-used entries until the
    // entries' disk_bytes add up to at most max_bytes.
    CachePruneReport prune(uint64_t max_bytes);

    const std::filesystem::path& version_dir() const { return vdir_; }  // <root>/v<N>
    std::filesystem::path entry_dir(std::string_view arch, std::string_view family, const CacheKey& key) const;
    const std::filesystem::path& root() const { return root_; }
    CacheMode mode() const { return mode_; }
    // rw mode and no write has failed yet.
    bool writable() const { return mode_ == CacheMode::rw && !degraded_.load(std::memory_order_relaxed); }

private:
    bool publish(const std::filesystem::path& dest, const CacheKey& key, std::string_view arch,
                 std::string_view family, std::span<const char> cubin, const nlohmann::json& meta);
    void degrade(const std::string& what);
    void keep_in_memory(const std::filesystem::path& dest, std::span<const char> cubin);
    bool mutating_allowed(const char* op);
    std::filesystem::path unique_tmp_name(std::string_view stem) const;

    std::filesystem::path root_;
    std::filesystem::path vdir_;
    CacheMode mode_;
    std::atomic<bool> degraded_{false};
    std::atomic<bool> have_memory_{false};
    std::mutex memory_mu_;
    std::unordered_map<std::string, std::vector<char>> memory_;  // entry dir -> cubin, when not on disk
};

}  // namespace mlajit
