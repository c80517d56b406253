// The on-disk kernel cache: hits, misses, corruption, degraded directories, maintenance, locks and
// concurrent processes. Every test works in its own fresh directory under the system temp dir.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "jit/disk_cache.h"

namespace fs = std::filesystem;
using namespace mlajit;
using namespace std::chrono_literals;

namespace {

uint64_t fresh_seed() {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
}

std::vector<char> random_bytes(std::mt19937_64& rng, size_t n) {
    std::vector<char> v(n);
    for (auto& c : v) c = static_cast<char>(rng() & 0xff);
    return v;
}

CacheKey random_key(std::mt19937_64& rng) { return {rng(), rng()}; }

struct TempDir {
    fs::path path;
    TempDir() {
        std::random_device rd;
        path = fs::temp_directory_path() / ("mlajit-dc-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
        fs::create_directories(path);
    }
    ~TempDir() {
        // Tests make directories read-only; give write access back or remove_all fails as non-root.
        std::error_code ec;
        for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
             it.increment(ec))
            if (it->is_directory(ec)) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
        fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

// Collects what the cache logs, on whichever logger it uses.
class CollectSink : public spdlog::sinks::base_sink<std::mutex> {
public:
    std::vector<std::pair<spdlog::level::level_enum, std::string>> msgs;

protected:
    void sink_it_(const spdlog::details::log_msg& m) override {
        msgs.emplace_back(m.level, std::string(m.payload.data(), m.payload.size()));
    }
    void flush_() override {}
};

struct LogCapture {
    std::shared_ptr<spdlog::logger> logger;
    std::shared_ptr<CollectSink> sink = std::make_shared<CollectSink>();
    spdlog::level::level_enum old_level;
    LogCapture() {
        mlajit::log();  // the library's logger, created on first use: capture that one
        logger = spdlog::get("mlajit");
        if (!logger) logger = spdlog::default_logger();
        old_level = logger->level();
        if (old_level > spdlog::level::warn) logger->set_level(spdlog::level::warn);
        logger->sinks().push_back(sink);
    }
    ~LogCapture() {
        auto& s = logger->sinks();
        s.erase(std::remove(s.begin(), s.end(), sink), s.end());
        logger->set_level(old_level);
    }
    size_t warnings() const {
        return size_t(std::count_if(sink->msgs.begin(), sink->msgs.end(),
                                    [](const auto& m) { return m.first == spdlog::level::warn; }));
    }
    std::string all() const {
        std::string s;
        for (const auto& m : sink->msgs) s += m.second + "\n";
        return s;
    }
};

std::string read_text(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

void write_text(const fs::path& p, const std::string& s) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << s;
}

bool dir_is_empty_or_absent(const fs::path& p) {
    std::error_code ec;
    return !fs::exists(p, ec) || fs::is_empty(p, ec);
}

// Whether chmod 0555 actually stops this process from writing (it does not for root).
bool chmod_blocks_writes(const fs::path& scratch) {
    fs::path d = scratch / "probe_dir";
    fs::create_directories(d);
    ::chmod(d.c_str(), 0555);
    int fd = ::open((d / "probe").c_str(), O_WRONLY | O_CREAT, 0644);
    bool blocked = fd < 0;
    if (fd >= 0) ::close(fd);
    ::chmod(d.c_str(), 0755);
    fs::remove_all(d);
    return blocked;
}

void chmod_tree(const fs::path& root, mode_t dir_mode) {
    for (auto& e : fs::recursive_directory_iterator(root))
        if (e.is_directory()) ::chmod(e.path().c_str(), dir_mode);
    ::chmod(root.c_str(), dir_mode);
}

const nlohmann::json kMeta = {{"spec", {{"family", "sparse_mqa_fwd"}, {"h_q", 128}}}, {"nvrtc_log", "ok"}};

}  // namespace

TEST_CASE("CacheKey hex and XXH3-128 hashing") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);

    CacheKey k = random_key(rng);
    std::string h = k.hex();
    CHECK(h.size() == 32);
    CHECK(h.find_first_not_of("0123456789abcdef") == std::string::npos);
    REQUIRE(CacheKey::from_hex(h).has_value());
    CHECK(*CacheKey::from_hex(h) == k);
    CHECK(CacheKey{0x1, 0x2}.hex() == "00000000000000010000000000000002");
    CHECK_FALSE(CacheKey::from_hex(h.substr(1)).has_value());
    CHECK_FALSE(CacheKey::from_hex(h.substr(1) + "g").has_value());

    // Published XXH128 test vector for empty input (canonical form: high half first).
    CHECK(xxh3_128({}).hex() == "99aa06d3014798d86001c324468d497f");
    CHECK(Hasher().digest().hex() == "99aa06d3014798d86001c324468d497f");

    // Streaming in random pieces equals one shot.
    auto bytes = random_bytes(rng, 1 + rng() % 100000);
    Hasher hs;
    size_t pos = 0;
    while (pos < bytes.size()) {
        size_t n = std::min<size_t>(bytes.size() - pos, 1 + rng() % 5000);
        hs.update(std::string_view(bytes.data() + pos, n));
        pos += n;
    }
    CHECK(hs.digest() == xxh3_128(bytes));
    bytes[rng() % bytes.size()] ^= 1;
    CHECK_FALSE(hs.digest() == xxh3_128(bytes));

    // Raw updates concatenate; fields do not collide across splits.
    CHECK(Hasher().update("ab").update("c").digest() == Hasher().update("abc").digest());
    CHECK_FALSE(Hasher().update_field("ab").update_field("c").digest() ==
                Hasher().update_field("a").update_field("bc").digest());
    CHECK_FALSE(Hasher().update_u64(1).digest() == Hasher().update_u64(2).digest());
    const char le1[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    CHECK(Hasher().update_u64(1).digest() == xxh3_128(le1));
}

TEST_CASE("default_cache_root precedence") {
    using P = std::optional<fs::path>;
    CHECK(default_cache_root(P("/a/x"), P("/b"), P("/h")) == fs::path("/a/x"));
    CHECK(default_cache_root(P("rel/x"), P("/b"), P("/h")) == fs::path("rel/x"));
    CHECK(default_cache_root(P(""), P("/b"), P("/h")) == fs::path("/b/mlajit"));
    CHECK(default_cache_root(std::nullopt, P("/b"), P("/h")) == fs::path("/b/mlajit"));
    CHECK(default_cache_root(std::nullopt, P(""), P("/h")) == fs::path("/h/.cache/mlajit"));
    CHECK(default_cache_root(std::nullopt, P("relative"), P("/h")) == fs::path("/h/.cache/mlajit"));
    CHECK(default_cache_root(std::nullopt, std::nullopt, P("/h")) == fs::path("/h/.cache/mlajit"));
    CHECK_FALSE(default_cache_root(std::nullopt, std::nullopt, std::nullopt).has_value());
    CHECK_FALSE(default_cache_root(P(""), P(""), P("")).has_value());
}

TEST_CASE("miss, then store, then a hit with identical bytes") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    DiskCache c(t.path / "cache", CacheMode::rw);
    CHECK(c.writable());
    CacheKey key = random_key(rng);
    auto cubin = random_bytes(rng, 1000 + rng() % 300000);

    CHECK_FALSE(c.load("sm_90a", "sparse_mqa_fwd", key).has_value());
    REQUIRE(c.store("sm_90a", "sparse_mqa_fwd", key, cubin, kMeta));
    auto got = c.load("sm_90a", "sparse_mqa_fwd", key);
    REQUIRE(got.has_value());
    CHECK(*got == cubin);

    // A fresh object (another process) sees the same entry on disk.
    DiskCache c2(t.path / "cache", CacheMode::rw);
    auto got2 = c2.load("sm_90a", "sparse_mqa_fwd", key);
    REQUIRE(got2.has_value());
    CHECK(*got2 == cubin);
    // Other arch, family or key: miss.
    CHECK_FALSE(c2.load("sm_90", "sparse_mqa_fwd", key).has_value());
    CHECK_FALSE(c2.load("sm_90a", "mha_fwd", key).has_value());
    CHECK_FALSE(c2.load("sm_90a", "sparse_mqa_fwd", CacheKey{key.hi, key.lo ^ 1}).has_value());

    // Layout and metadata as documented.
    fs::path dir = t.path / "cache" / "v1" / "sm_90a" / "sparse_mqa_fwd" / key.hex();
    CHECK(c.entry_dir("sm_90a", "sparse_mqa_fwd", key) == dir);
    CHECK(fs::file_size(dir / "kernel.cubin") == cubin.size());
    auto meta = nlohmann::json::parse(read_text(dir / "meta.json"));
    CHECK(meta["spec"] == kMeta["spec"]);
    CHECK(meta["nvrtc_log"] == "ok");
    CHECK(meta["cubin_bytes"] == cubin.size());
    CHECK(meta["cubin_xxh3_128"] == xxh3_128(cubin).hex());
    CHECK(meta["key"] == key.hex());
    CHECK(meta["format_version"] == DiskCache::kFormatVersion);
    CHECK(meta["arch"] == "sm_90a");
    // Nothing left behind in the staging area.
    CHECK(dir_is_empty_or_absent(t.path / "cache" / "v1" / "tmp"));

    // A hit refreshes the last-use marker.
    auto old = fs::file_time_type::clock::now() - 10h;
    fs::last_write_time(dir / "last_used", old);
    REQUIRE(c.load("sm_90a", "sparse_mqa_fwd", key).has_value());
    CHECK(fs::last_write_time(dir / "last_used") > old + 9h);
}

TEST_CASE("a second store for the same key keeps the first entry") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    DiskCache a(t.path, CacheMode::rw), b(t.path, CacheMode::rw);
    CacheKey key = random_key(rng);
    auto first = random_bytes(rng, 5000);
    auto second = random_bytes(rng, 7000);
    REQUIRE(a.store("sm_80", "mha_fwd", key, first, kMeta));
    CHECK(b.store("sm_80", "mha_fwd", key, second, {{"other", true}}));  // true: a valid entry is on disk
    for (DiskCache* c : {&a, &b}) {
        auto got = c->load("sm_80", "mha_fwd", key);
        REQUIRE(got.has_value());
        CHECK(*got == first);
    }
    CHECK(nlohmann::json::parse(read_text(a.entry_dir("sm_80", "mha_fwd", key) / "meta.json")).count("other") == 0);
    CHECK(dir_is_empty_or_absent(a.version_dir() / "tmp"));
}

TEST_CASE("a truncated cubin is a miss (warned once); store replaces it") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    DiskCache c(t.path, CacheMode::rw);
    CacheKey key = random_key(rng);
    auto cubin = random_bytes(rng, 20000 + rng() % 20000);
    REQUIRE(c.store("sm_90a", "topk_mask", key, cubin, kMeta));
    fs::path f = c.entry_dir("sm_90a", "topk_mask", key) / "kernel.cubin";
    fs::resize_file(f, cubin.size() / 2);

    LogCapture cap;
    CHECK_FALSE(c.load("sm_90a", "topk_mask", key).has_value());
    CHECK_FALSE(c.load("sm_90a", "topk_mask", key).has_value());
    CHECK(cap.warnings() == 1);
    CHECK(cap.all().find("truncated") != std::string::npos);

    REQUIRE(c.store("sm_90a", "topk_mask", key, cubin, kMeta));
    auto got = c.load("sm_90a", "topk_mask", key);
    REQUIRE(got.has_value());
    CHECK(*got == cubin);
    CHECK(fs::file_size(f) == cubin.size());
    CHECK(dir_is_empty_or_absent(c.version_dir() / "tmp"));
}

TEST_CASE("one flipped bit in the cubin is a miss") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    DiskCache c(t.path, CacheMode::rw);
    CacheKey key = random_key(rng);
    auto cubin = random_bytes(rng, 1 + rng() % 100000);
    REQUIRE(c.store("sm_90a", "f", key, cubin, kMeta));
    fs::path f = c.entry_dir("sm_90a", "f", key) / "kernel.cubin";
    auto bad = cubin;
    size_t bit = rng() % (bad.size() * 8);
    INFO("flipped bit " << bit);
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    write_text(f, std::string(bad.begin(), bad.end()));
    REQUIRE(fs::file_size(f) == cubin.size());
    LogCapture cap;
    CHECK_FALSE(c.load("sm_90a", "f", key).has_value());
    CHECK(cap.warnings() == 1);
    CHECK(cap.all().find("checksum") != std::string::npos);
    REQUIRE(c.store("sm_90a", "f", key, cubin, kMeta));
    CHECK(c.load("sm_90a", "f", key) == std::optional(cubin));
}

TEST_CASE("corrupt meta.json is a miss, and store repairs it") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    DiskCache c(t.path, CacheMode::rw);
    CacheKey key = random_key(rng);
    auto cubin = random_bytes(rng, 4096);
    REQUIRE(c.store("sm_90a", "f", key, cubin, kMeta));
    fs::path m = c.entry_dir("sm_90a", "f", key) / "meta.json";
    auto meta = nlohmann::json::parse(read_text(m));

    SUBCASE("not JSON") { write_text(m, read_text(m).substr(0, 20)); }
    SUBCASE("empty") { write_text(m, ""); }
    SUBCASE("no checksum") {
        meta.erase("cubin_xxh3_128");
        write_text(m, meta.dump());
    }
    SUBCASE("wrong checksum") {
        meta["cubin_xxh3_128"] = CacheKey{rng(), rng()}.hex();
        write_text(m, meta.dump());
    }
    SUBCASE("wrong size") {
        meta["cubin_bytes"] = cubin.size() + 1;
        write_text(m, meta.dump());
    }
    SUBCASE("missing") { fs::remove(m); }
    SUBCASE("unreadable (a directory)") {
        fs::remove(m);
        fs::create_directory(m);
    }

    LogCapture cap;
    CHECK_FALSE(c.load("sm_90a", "f", key).has_value());
    CHECK(cap.warnings() == 1);
    REQUIRE(c.store("sm_90a", "f", key, cubin, kMeta));
    CHECK(c.load("sm_90a", "f", key) == std::optional(cubin));
}

TEST_CASE("an unwritable cache directory degrades to memory with one warning") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    CacheKey existing = random_key(rng), k1 = random_key(rng), k2 = random_key(rng);
    auto cubin_existing = random_bytes(rng, 3000), c1 = random_bytes(rng, 3000), c2 = random_bytes(rng, 3000);

    const bool chmod_works = chmod_blocks_writes(t.path);
    fs::path root;
    if (chmod_works) {
        root = t.path / "readonly";
        REQUIRE(DiskCache(root, CacheMode::rw).store("sm_90a", "f", existing, cubin_existing, kMeta));
        chmod_tree(root, 0555);
    } else {
        // Running as root: permissions do not stop writes, but nothing can be created under a regular file.
        write_text(t.path / "file_not_dir", "x");
        root = t.path / "file_not_dir" / "cache";
    }
    INFO("root=" << root.string() << " chmod_works=" << chmod_works);

    LogCapture cap;
    DiskCache c(root, CacheMode::rw);
    CHECK(c.writable());
    CHECK_FALSE(c.store("sm_90a", "f", k1, c1, kMeta));
    CHECK_FALSE(c.writable());
    CHECK_FALSE(c.store("sm_90a", "f", k2, c2, kMeta));
    // A second object on the same root does not warn again either.
    DiskCache again(root, CacheMode::rw);
    CHECK_FALSE(again.store("sm_90a", "f", k2, c2, kMeta));
    CHECK(cap.warnings() == 1);
    CHECK(cap.all().find(root.string()) != std::string::npos);

    // In-memory caching for this process; nothing reached the disk.
    CHECK(c.load("sm_90a", "f", k1) == std::optional(c1));
    CHECK(c.load("sm_90a", "f", k2) == std::optional(c2));
    CHECK_FALSE(DiskCache(root, CacheMode::rw).load("sm_90a", "f", k1).has_value());
    auto t0 = std::chrono::steady_clock::now();
    auto unlocked = c.lock(k1, 1000ms);
    CHECK_FALSE(unlocked.held());
    CHECK_FALSE(unlocked.timed_out());  // locking does not apply here: no waiting, nothing to report
    CHECK(std::chrono::steady_clock::now() - t0 < 500ms);
    if (chmod_works) CHECK(c.load("sm_90a", "f", existing) == std::optional(cubin_existing));

    // ro mode on the same directory: silent.
    DiskCache ro(root, CacheMode::ro);
    CHECK_FALSE(ro.store("sm_90a", "f", k1, c1, kMeta));
    if (chmod_works) CHECK(ro.load("sm_90a", "f", existing) == std::optional(cubin_existing));
    CHECK(cap.warnings() == 1);
}

TEST_CASE("read-only mode loads existing entries and never writes") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    CacheKey old_key = random_key(rng), new_key = random_key(rng);
    auto old_cubin = random_bytes(rng, 9000), new_cubin = random_bytes(rng, 9000);
    {
        DiskCache rw(t.path, CacheMode::rw);
        REQUIRE(rw.store("sm_90a", "f", old_key, old_cubin, kMeta));
    }
    fs::path marker = DiskCache(t.path, CacheMode::rw).entry_dir("sm_90a", "f", old_key) / "last_used";
    auto old_time = fs::file_time_type::clock::now() - 5h;
    fs::last_write_time(marker, old_time);

    LogCapture cap;
    DiskCache ro(t.path, CacheMode::ro);
    CHECK_FALSE(ro.writable());
    CHECK(ro.load("sm_90a", "f", old_key) == std::optional(old_cubin));
    CHECK(fs::last_write_time(marker) == old_time);  // no marker touch in ro
    CHECK_FALSE(ro.store("sm_90a", "f", new_key, new_cubin, kMeta));
    CHECK_FALSE(fs::exists(ro.entry_dir("sm_90a", "f", new_key)));
    CHECK(dir_is_empty_or_absent(ro.version_dir() / "tmp"));
    CHECK(ro.load("sm_90a", "f", new_key) == std::optional(new_cubin));  // kept in memory
    CHECK_FALSE(ro.lock(new_key, 1000ms).held());
    CHECK_FALSE(ro.lock(new_key, 1000ms).timed_out());
    CHECK_FALSE(fs::exists(ro.version_dir() / "locks"));
    CHECK(cap.warnings() == 0);
    // Maintenance that writes refuses (one warning), and removes nothing.
    CHECK_FALSE(ro.remove("sm_90a", "f", old_key));
    CHECK(ro.prune(0).entries_removed == 0);
    CHECK(cap.warnings() == 1);
    CHECK(ro.list().size() == 1);
}

TEST_CASE("off mode: every call is a miss or a no-op") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    CacheKey key = random_key(rng), other = random_key(rng);
    auto cubin = random_bytes(rng, 2000);
    REQUIRE(DiskCache(t.path / "c", CacheMode::rw).store("sm_90a", "f", key, cubin, kMeta));

    DiskCache off(t.path / "c", CacheMode::off);
    CHECK_FALSE(off.writable());
    CHECK_FALSE(off.load("sm_90a", "f", key).has_value());
    CHECK_FALSE(off.store("sm_90a", "f", other, cubin, kMeta));
    CHECK_FALSE(off.load("sm_90a", "f", other).has_value());  // not even in memory
    CHECK_FALSE(off.lock(key, 10ms).held());
    CHECK(off.list().empty());
    CHECK_FALSE(fs::exists(off.entry_dir("sm_90a", "f", other)));

    DiskCache off2(t.path / "never_created", CacheMode::off);
    CHECK_FALSE(off2.store("sm_90a", "f", other, cubin, kMeta));
    CHECK_FALSE(fs::exists(t.path / "never_created"));
    CHECK_NOTHROW(DiskCache("", CacheMode::off));
    CHECK_THROWS_AS(DiskCache("", CacheMode::rw), mlajit::Error);
}

TEST_CASE("invalid arch or family names are rejected with a clear error") {
    TempDir t;
    DiskCache c(t.path, CacheMode::rw);
    std::vector<char> b(10, 'x');
    for (std::string bad : {"", "..", ".hidden", "sm 90", "a/b", "tmp", "locks"}) {
        INFO("arch='" << bad << "'");
        CHECK_THROWS_WITH_AS(c.load(bad, "f", {}), doctest::Contains("arch"), mlajit::Error);
        CHECK_THROWS_AS(c.store(bad, "f", {}, b, {}), mlajit::Error);
    }
    CHECK_THROWS_WITH_AS(c.load("sm_90a", "a/b", {}), doctest::Contains("family"), mlajit::Error);
    CHECK_NOTHROW(c.load("sm_90a", "tmp", {}));  // only the arch level holds tmp/ and locks/
    CHECK(dir_is_empty_or_absent(t.path / "v1"));
}

TEST_CASE("leftover temporaries older than a minute are cleaned") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    DiskCache c(t.path, CacheMode::rw);
    CacheKey key = random_key(rng);
    auto cubin = random_bytes(rng, 1000);
    REQUIRE(c.store("sm_90a", "f", key, cubin, kMeta));
    fs::path tmp = c.version_dir() / "tmp";
    REQUIRE(fs::is_directory(tmp));
    CHECK(fs::is_empty(tmp));

    // As an interrupted store leaves them: a half-written entry dir, and a stray file.
    fs::create_directories(tmp / "stale.123.0.abcd");
    write_text(tmp / "stale.123.0.abcd" / "kernel.cubin", "partial");
    write_text(tmp / "stray", "x");
    fs::create_directories(tmp / "fresh.456.0.abcd");
    auto now = fs::file_time_type::clock::now();
    fs::last_write_time(tmp / "stale.123.0.abcd", now - 2min);
    fs::last_write_time(tmp / "stray", now - 61s);
    fs::last_write_time(tmp / "fresh.456.0.abcd", now - 30s);

    CHECK(c.clean_temporaries() == 2);
    CHECK_FALSE(fs::exists(tmp / "stale.123.0.abcd"));
    CHECK_FALSE(fs::exists(tmp / "stray"));
    CHECK(fs::exists(tmp / "fresh.456.0.abcd"));  // may belong to a store in progress
    CHECK(c.load("sm_90a", "f", key) == std::optional(cubin));
    CHECK(c.clean_temporaries(0s) == 1);
    CHECK(fs::is_empty(tmp));
}

TEST_CASE("list, verify, remove, and prune by bytes in least-recent-use order; other versions removed") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    DiskCache c(t.path, CacheMode::rw);
    std::vector<CacheKey> keys;
    std::vector<std::vector<char>> cubins;
    const char* archs[] = {"sm_80", "sm_90a"};
    for (int i = 0; i < 5; ++i) {
        keys.push_back(random_key(rng));
        cubins.push_back(random_bytes(rng, 10000));
        REQUIRE(c.store(archs[i % 2], "f", keys[i], cubins[i], kMeta));
    }
    auto arch_of = [&](int i) { return std::string(archs[i % 2]); };

    auto listed = c.list();
    REQUIRE(listed.size() == 5);
    for (const auto& e : listed) {
        auto it = std::find(keys.begin(), keys.end(), e.key);
        REQUIRE(it != keys.end());
        int i = int(it - keys.begin());
        CHECK(e.arch == arch_of(i));
        CHECK(e.family == "f");
        CHECK(e.cubin_bytes == 10000);
        CHECK(e.disk_bytes > e.cubin_bytes);
        CHECK(e.dir == c.entry_dir(e.arch, "f", e.key));
        CHECK(e.meta["cubin_xxh3_128"] == xxh3_128(cubins[i]).hex());
    }
    CHECK(std::is_sorted(listed.begin(), listed.end(),
                         [](auto& a, auto& b) { return std::tie(a.arch, a.key.hi) < std::tie(b.arch, b.key.hi); }));

    // Use order, oldest first: 1, 2, 3, 4, then 0 is hit now.
    auto base = fs::file_time_type::clock::now() - 10h;
    for (int i = 0; i < 5; ++i) fs::last_write_time(c.entry_dir(arch_of(i), "f", keys[i]) / "last_used", base + i * 1h);
    REQUIRE(c.load(arch_of(0), "f", keys[0]).has_value());

    // Other format versions (whole trees) go; anything else under the root stays.
    fs::create_directories(t.path / "v0" / "sm_90a" / "f" / keys[0].hex());
    write_text(t.path / "v0" / "sm_90a" / "f" / keys[0].hex() / "kernel.cubin", "old");
    fs::create_directories(t.path / "v17" / "locks");
    fs::create_directories(t.path / "vnext");
    write_text(t.path / "calibration.json", "{}");
    write_text(c.version_dir() / "tmp" / "leftover", "x");
    fs::last_write_time(c.version_dir() / "tmp" / "leftover", fs::file_time_type::clock::now() - 5min);

    std::map<int, uint64_t> bytes;
    for (const auto& e : c.list()) bytes[int(std::find(keys.begin(), keys.end(), e.key) - keys.begin())] = e.disk_bytes;
    uint64_t budget = bytes[0] + bytes[3] + bytes[4];
    auto r = c.prune(budget);
    CHECK(r.versions_removed == 2);
    CHECK(r.temporaries_removed == 1);
    CHECK(r.entries_removed == 2);
    CHECK(r.bytes_removed == bytes[1] + bytes[2]);
    CHECK(r.bytes_kept == budget);
    CHECK_FALSE(fs::exists(t.path / "v0"));
    CHECK_FALSE(fs::exists(t.path / "v17"));
    CHECK(fs::exists(t.path / "vnext"));
    CHECK(fs::exists(t.path / "calibration.json"));
    for (int i = 0; i < 5; ++i) {
        INFO("entry " << i);
        bool kept = i == 0 || i == 3 || i == 4;
        CHECK(c.load(arch_of(i), "f", keys[i]).has_value() == kept);
    }
    CHECK(c.list().size() == 3);
    CHECK(c.prune(budget).entries_removed == 0);

    // verify: damage one entry, and leave an empty key directory behind.
    fs::resize_file(c.entry_dir(arch_of(3), "f", keys[3]) / "kernel.cubin", 100);
    CacheKey empty_key = random_key(rng);
    fs::create_directories(c.entry_dir("sm_90a", "f", empty_key));
    auto v = c.verify();
    CHECK(v.ok == 2);
    REQUIRE(v.bad.size() == 2);
    CHECK(v.removed == 0);
    CHECK(c.list().size() == 4);
    v = c.verify(/*remove_bad=*/true);
    CHECK(v.removed == 2);
    CHECK(c.list().size() == 2);
    CHECK(c.verify().bad.empty());

    // remove one
    CHECK(c.remove(arch_of(4), "f", keys[4]));
    CHECK_FALSE(c.remove(arch_of(4), "f", keys[4]));
    CHECK_FALSE(c.load(arch_of(4), "f", keys[4]).has_value());
    CHECK(c.load(arch_of(0), "f", keys[0]) == std::optional(cubins[0]));
    CHECK(c.list().size() == 1);
    CHECK(fs::is_empty(c.version_dir() / "tmp"));

    CHECK(c.prune(0).entries_removed == 1);
    CHECK(c.list().empty());
}

TEST_CASE("a busy lock times out into an unheld guard; a free one is held") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    DiskCache c(t.path, CacheMode::rw);
    CacheKey key = random_key(rng), other = random_key(rng);

    auto first = c.lock(key, 1000ms);
    REQUIRE(first.held());
    CHECK(fs::exists(c.version_dir() / "locks" / (key.hex() + ".lock")));

    auto t0 = std::chrono::steady_clock::now();
    auto second = c.lock(key, 150ms);
    auto waited = std::chrono::steady_clock::now() - t0;
    CHECK_FALSE(second.held());
    CHECK(second.timed_out());
    CHECK_FALSE(first.timed_out());
    CHECK(waited >= 150ms);
    CHECK(waited < 3s);
    CHECK(c.lock(other, 10ms).held());  // locks are per key
    CHECK_FALSE(c.lock(key, 0ms).held());

    // Released by a waiter's peer while it waits: the waiter gets it.
    std::thread releaser([&] {
        std::this_thread::sleep_for(100ms);
        first.release();
    });
    auto third = c.lock(key, 5s);
    releaser.join();
    CHECK(third.held());
    CHECK_FALSE(first.held());

    // Moving transfers ownership; the lock file stays.
    DiskCache::KeyLock moved = std::move(third);
    CHECK(moved.held());
    CHECK_FALSE(third.held());  // NOLINT(bugprone-use-after-move): moved-from state is specified
    moved = DiskCache::KeyLock();
    CHECK(c.lock(key, 10ms).held());
    CHECK(fs::exists(c.version_dir() / "locks" / (key.hex() + ".lock")));
}

namespace {

// Exit codes of a child in the concurrency test, so that a failure says which step failed.
enum ChildFail { kBadFirstHit = 10, kNotHeld = 11, kStoreFailed = 12, kFinalMiss = 13, kFinalWrong = 14,
                 kCountFile = 15, kException = 20 };

int child_main(int i, const fs::path& root, const fs::path& count_file, const std::vector<CacheKey>& keys,
               const std::vector<std::vector<char>>& cubins) {
    try {
        DiskCache c(root, CacheMode::rw);
        for (size_t j = 0; j < keys.size(); ++j) {
            size_t k = (size_t(i) + j) % keys.size();  // staggered orders: every key is contended
            if (auto hit = c.load("sm_90a", "f", keys[k])) {
                if (*hit != cubins[k]) return kBadFirstHit;
                continue;
            }
            auto guard = c.lock(keys[k], 30s);
            if (!guard.held()) return kNotHeld;
            if (!c.load("sm_90a", "f", keys[k])) {
                std::this_thread::sleep_for(50ms);  // "compile"
                int fd = ::open(count_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
                if (fd < 0) return kCountFile;
                std::string line = keys[k].hex() + "\n";
                bool ok = ::write(fd, line.data(), line.size()) == ssize_t(line.size());
                ::close(fd);
                if (!ok) return kCountFile;
                if (!c.store("sm_90a", "f", keys[k], cubins[k], {{"child", i}})) return kStoreFailed;
            }
            guard.release();
            auto got = c.load("sm_90a", "f", keys[k]);
            if (!got) return kFinalMiss;
            if (*got != cubins[k]) return kFinalWrong;
        }
        return 0;
    } catch (...) {
        return kException;
    }
}

}  // namespace

TEST_CASE("8 processes starting together compile each of 4 keys exactly once") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    const fs::path root = t.path / "cache", count_file = t.path / "compiles.log";
    std::vector<CacheKey> keys;
    std::vector<std::vector<char>> cubins;
    for (int i = 0; i < 4; ++i) {
        keys.push_back(random_key(rng));
        cubins.push_back(random_bytes(rng, 1000 + rng() % 200000));
    }

    // Children block on the pipe until the parent closes its write end: all start at the same moment.
    int gate[2];
    REQUIRE(::pipe(gate) == 0);
    std::fflush(stdout);
    std::fflush(stderr);
    std::vector<pid_t> pids;
    for (int i = 0; i < 8; ++i) {
        pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            ::close(gate[1]);
            char ch;
            while (::read(gate[0], &ch, 1) < 0 && errno == EINTR) {}
            ::_exit(child_main(i, root, count_file, keys, cubins));  // _exit: no doctest teardown in the child
        }
        pids.push_back(pid);
    }
    ::close(gate[0]);
    ::close(gate[1]);

    for (size_t i = 0; i < pids.size(); ++i) {
        int status = 0;
        REQUIRE(::waitpid(pids[i], &status, 0) == pids[i]);
        INFO("child " << i << " status " << status << " (exit code " << WEXITSTATUS(status) << ")");
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
    }

    std::map<std::string, int> compiles;
    std::istringstream lines(read_text(count_file));
    for (std::string line; std::getline(lines, line);) ++compiles[line];
    CHECK(compiles.size() == keys.size());
    for (const auto& k : keys) {
        INFO("key " << k.hex());
        CHECK(compiles[k.hex()] == 1);
    }
    DiskCache c(root, CacheMode::rw);
    for (size_t k = 0; k < keys.size(); ++k) CHECK(c.load("sm_90a", "f", keys[k]) == std::optional(cubins[k]));
    CHECK(c.verify().bad.empty());
    CHECK(fs::is_empty(c.version_dir() / "tmp"));
}

TEST_CASE("a disk hit of a 200 KB cubin is cheap") {
    uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    TempDir t;
    DiskCache c(t.path, CacheMode::rw);
    CacheKey key = random_key(rng);
    auto cubin = random_bytes(rng, 200 * 1024);
    REQUIRE(c.store("sm_90a", "sparse_mqa_fwd", key, cubin, kMeta));
    for (int i = 0; i < 50; ++i) REQUIRE(c.load("sm_90a", "sparse_mqa_fwd", key).has_value());
    std::vector<double> us;
    for (int i = 0; i < 2000; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        auto got = c.load("sm_90a", "sparse_mqa_fwd", key);
        auto t1 = std::chrono::steady_clock::now();
        REQUIRE(got.has_value());
        REQUIRE(got->size() == cubin.size());
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(us.begin(), us.end());
    double median = us[us.size() / 2];
    MESSAGE("disk-hit load of a 200 KiB cubin: median " << median << " us, p10 " << us[us.size() / 10] << " us, p90 "
                                                       << us[us.size() * 9 / 10] << " us (2000 loads)");
    // A compile takes about a second; a hit must cost a tiny fraction of that even on a slow CI disk.
    CHECK(median < 20000.0);
}
