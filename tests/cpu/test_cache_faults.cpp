// The disk cache under faults, with figures (docs/RELIABILITY.md quotes the "FIGURE" lines):
//   - processes x threads compiling and loading shared and private keys while one process at a time is
//     SIGKILLed, aimed at the moment it has a publish in progress (many rounds);
//   - a full disk (bytes, then inodes) at every step of a publish, a read-only mount;
//   - entries damaged in every way a disk or a person can (truncated, extended, bit-flipped, files replaced
//     by directories, FIFOs, symlinks, another key's entry, the entry replaced by a file);
//   - stale lock files and temporaries of dead processes;
//   - two library versions (different kernel sources => different keys; a newer format's v2/ tree) sharing
//     one cache root.
// The invariant everywhere: nothing crashes or hangs, a load returns the exact bytes stored for the key or
// nothing, and every key ends valid once the fault is gone.
//
// The compile step is a fake: a key's "cubin" is a deterministic function of the key, so any process can
// check what it loaded, and the test runs in seconds on CPU. It follows KernelStore::produce's protocol
// (load; lock; load; compile; store).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <spdlog/sinks/base_sink.h>

#include "common/log.h"
#include "jit/disk_cache.h"
#include "support/isolated_fs.h"
#include "support/log_capture.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace mlajit;
using namespace std::chrono_literals;
using mlajit::test::ChildReport;
using mlajit::test::FsKind;

namespace {

constexpr const char* kArch = "sm_90a";
constexpr const char* kFamily = "sparse_mqa_fwd";

uint64_t fresh_seed() {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
}

int env_int(const char* name, int fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : fallback;
}

// "Kernel sources" of one library version + an index: different sources give different keys.
CacheKey key_of(std::string_view library, int i) {
    Hasher h;
    h.update_field(library).update_u64(uint64_t(i));
    return h.digest();
}

// The fake compiler: bytes that depend only on the key, 2 KiB to ~260 KiB.
std::vector<char> fake_cubin(const CacheKey& k) {
    std::mt19937_64 rng(k.hi ^ (k.lo * 0x9e3779b97f4a7c15ull));
    std::vector<char> v(2048 + size_t(k.lo % (256 * 1024)));
    for (auto& c : v) c = static_cast<char>(rng() & 0xff);
    return v;
}

void figure(const std::string& s) { MESSAGE("FIGURE " << s); }

std::string fmt_str(const std::ostringstream& s) { return s.str(); }

// Cross-process counters, in shared memory that survives the SIGKILL of any writer.
struct SharedCounters {
    std::atomic<uint64_t> loads{0}, hits{0}, wrong_hits{0}, compiles{0}, stores_ok{0}, stores_refused{0},
        removes{0}, exceptions{0}, warnings{0};
    std::atomic<int> stop{0};
    // The first warnings' text, so that a failure says which warning it was (the process may be dead).
    static constexpr int kKeptWarnings = 4, kWarningChars = 600;
    char warning_text[kKeptWarnings][kWarningChars] = {};
    std::string warnings_seen() const {
        std::string all;
        for (int i = 0; i < kKeptWarnings && i < int(warnings.load()); ++i)
            all += std::string("\n  warning: ") + std::string(warning_text[i], strnlen(warning_text[i], kWarningChars));
        return all;
    }
};

SharedCounters* map_shared_counters() {
    void* p = ::mmap(nullptr, sizeof(SharedCounters), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    return new (p) SharedCounters();
}

struct WorkerPlan {
    const std::vector<CacheKey>* keys;
    const std::vector<std::vector<char>>* cubins;
    std::vector<size_t> shared;        // indices every process uses
    std::vector<size_t> own;           // indices only this process uses
    int threads = 3;
    int ops_per_thread = -1;           // -1: until counters->stop
    int remove_one_in = 6;             // after a hit, remove the entry now and then: forces republication
};

// Counts the library's warnings into shared memory (a SIGKILLed process cannot report them later).
class WarningCounter : public spdlog::sinks::base_sink<std::mutex> {
public:
    explicit WarningCounter(SharedCounters* sh) : sh_(sh) {}

protected:
    void sink_it_(const spdlog::details::log_msg& m) override {
        if (m.level < spdlog::level::warn) return;
        const uint64_t i = sh_->warnings++;
        if (i < uint64_t(SharedCounters::kKeptWarnings)) {
            const size_t n = std::min<size_t>(m.payload.size(), SharedCounters::kWarningChars - 1);
            std::memcpy(sh_->warning_text[i], m.payload.data(), n);
        }
    }
    void flush_() override {}

private:
    SharedCounters* sh_;
};

// One process of the concurrency tests: threads sharing one DiskCache, running KernelStore's protocol.
int worker_process(const fs::path& root, const WorkerPlan& plan, SharedCounters* sh, uint64_t seed) {
    try {
        mlajit::log();
        if (auto logger = spdlog::get("mlajit")) logger->sinks() = {std::make_shared<WarningCounter>(sh)};
        DiskCache cache(root, CacheMode::rw);
        std::vector<std::thread> threads;
        for (int t = 0; t < plan.threads; ++t) {
            threads.emplace_back([&, t] {
                std::mt19937_64 rng(seed + uint64_t(t) * 7919);
                for (int op = 0; plan.ops_per_thread < 0 || op < plan.ops_per_thread; ++op) {
                    if (plan.ops_per_thread < 0 && sh->stop.load()) break;
                    try {
                        const auto& pool = (plan.own.empty() || rng() % 2 == 0) ? plan.shared : plan.own;
                        const size_t k = pool[rng() % pool.size()];
                        const CacheKey& key = (*plan.keys)[k];
                        const auto& want = (*plan.cubins)[k];
                        auto check = [&](const std::optional<std::vector<char>>& got) {
                            ++sh->loads;
                            if (!got) return false;
                            ++sh->hits;
                            if (*got != want) ++sh->wrong_hits;
                            return true;
                        };
                        if (check(cache.load(kArch, kFamily, key))) {
                            if (plan.remove_one_in > 0 && rng() % uint64_t(plan.remove_one_in) == 0) {
                                cache.remove(kArch, kFamily, key);
                                ++sh->removes;
                            }
                            continue;
                        }
                        auto guard = cache.lock(key, 5s);
                        if (check(cache.load(kArch, kFamily, key))) continue;
                        ++sh->compiles;
                        if (cache.store(kArch, kFamily, key, want, {{"by", ::getpid()}})) ++sh->stores_ok;
                        else ++sh->stores_refused;
                        check(cache.load(kArch, kFamily, key));  // may miss: another thread may have removed it
                    } catch (...) {
                        ++sh->exceptions;
                    }
                }
            });
        }
        for (auto& th : threads) th.join();
        return 0;
    } catch (...) {
        ++sh->exceptions;
        return 2;
    }
}

pid_t spawn(const std::function<int()>& f) {
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        // Workers loop until the parent says stop: if the test process dies first, they must die too.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(1);
        ::_exit(f());
    }
    return pid;
}

// pid of the process that owns a temporary under v<N>/tmp/ ("<stem>.<pid>.<counter>.<random>"), -1 if none.
pid_t tmp_owner(const std::string& name) {
    auto a = name.find('.');
    if (a == std::string::npos) return -1;
    auto b = name.find('.', a + 1);
    if (b == std::string::npos) return -1;
    return pid_t(std::atoi(name.substr(a + 1, b - a - 1).c_str()));
}

size_t count_entries(const fs::path& dir) {
    std::error_code ec;
    size_t n = 0;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) ++n;
    return n;
}

// Every key loads exactly or misses; a miss is repaired by one store; verify finds nothing bad.
void check_every_key_ends_valid(const fs::path& root, const std::vector<CacheKey>& keys,
                                const std::vector<std::vector<char>>& cubins, size_t* were_valid) {
    DiskCache c(root, CacheMode::rw);
    size_t valid = 0;
    for (size_t k = 0; k < keys.size(); ++k) {
        INFO("key " << k << " " << keys[k].hex());
        auto got = c.load(kArch, kFamily, keys[k]);
        if (got) {
            CHECK(*got == cubins[k]);
            ++valid;
        } else {
            CHECK(c.store(kArch, kFamily, keys[k], cubins[k], {}));
        }
        CHECK(c.load(kArch, kFamily, keys[k]) == std::optional(cubins[k]));
        // A lock left by a process that died is no lock: flock dies with its holder.
        CHECK(c.lock(keys[k], 0ms).held());
    }
    auto report = c.verify();
    CHECK(report.bad.empty());
    CHECK(report.ok == keys.size());
    if (were_valid) *were_valid = valid;
}

}  // namespace

TEST_CASE("cache faults: SIGKILL mid-publish, N processes x M threads, shared and private keys") {
    const uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    mlajit::test::TempDir t("faults-kill");
    const fs::path root = t.path / "cache";
    const int processes = 4, threads = 3, shared_keys = 8, own_keys = 4;
    const int rounds = env_int("MLAJIT_FAULT_ROUNDS", 150);

    std::vector<CacheKey> keys;
    std::vector<std::vector<char>> cubins;
    for (int i = 0; i < shared_keys + processes * own_keys; ++i) {
        keys.push_back(key_of("kill-test-" + std::to_string(seed), i));
        cubins.push_back(fake_cubin(keys.back()));
    }
    SharedCounters* sh = map_shared_counters();
    auto plan_for = [&](int slot) {
        WorkerPlan p{&keys, &cubins, {}, {}, threads};
        for (int i = 0; i < shared_keys; ++i) p.shared.push_back(size_t(i));
        for (int i = 0; i < own_keys; ++i) p.own.push_back(size_t(shared_keys + slot * own_keys + i));
        return p;
    };
    std::vector<pid_t> pids(processes);
    auto start = [&](int slot) {
        WorkerPlan p = plan_for(slot);
        uint64_t s = rng();
        pids[size_t(slot)] = spawn([&, p, s] { return worker_process(root, p, sh, s); });
    };
    for (int i = 0; i < processes; ++i) start(i);

    const fs::path tmp = root / ("v" + std::to_string(DiskCache::kFormatVersion)) / "tmp";
    int aimed = 0, landed_mid_publish = 0, random_kills = 0, not_killed = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int round = 0; round < rounds; ++round) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        // Aim: a live worker's publish temporary (not a removal's trash) seen under tmp/.
        int slot = -1;
        fs::path seen;
        const auto deadline = std::chrono::steady_clock::now() + 100ms;
        while (slot < 0 && std::chrono::steady_clock::now() < deadline) {
            std::error_code ec;
            for (auto it = fs::directory_iterator(tmp, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
                const std::string name = it->path().filename().string();
                if (name.rfind("trash-", 0) == 0) continue;
                auto owner = std::find(pids.begin(), pids.end(), tmp_owner(name));
                if (owner != pids.end()) {
                    slot = int(owner - pids.begin());
                    seen = it->path();
                    break;
                }
            }
        }
        if (slot >= 0) ++aimed;
        else {
            slot = int(rng() % processes);
            ++random_kills;
        }
        ::kill(pids[size_t(slot)], SIGKILL);
        int status = 0;
        REQUIRE(::waitpid(pids[size_t(slot)], &status, 0) == pids[size_t(slot)]);
        // Anything but our SIGKILL (a crash, an abort, an early exit) is a failure.
        INFO("round " << round << " status " << status);
        if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
            ++not_killed;
            CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
        }
        std::error_code ec;
        if (!seen.empty() && fs::exists(seen, ec)) ++landed_mid_publish;  // its cleanup never ran
        start(slot);
    }
    sh->stop = 1;
    for (pid_t p : pids) {
        int status = 0;
        REQUIRE(::waitpid(p, &status, 0) == p);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    CHECK(sh->wrong_hits.load() == 0);
    CHECK(sh->exceptions.load() == 0);
    CHECK(sh->stores_refused.load() == 0);
    // Nothing is damaged here, so a warning (a "corrupt entry") would be a false alarm.
    CHECK_MESSAGE(sh->warnings.load() == 0, sh->warnings.load() << " warning(s):" << sh->warnings_seen());
    CHECK(sh->hits.load() > 0);
    CHECK(sh->compiles.load() > 0);
    const size_t leftovers = count_entries(tmp);
    size_t valid = 0;
    check_every_key_ends_valid(root, keys, cubins, &valid);
    {
        DiskCache c(root, CacheMode::rw);
        // Dead processes' temporaries are old after a minute; with no writer left, age 0 takes them all.
        c.clean_temporaries(0s);
        CHECK(count_entries(tmp) == 0);
    }
    std::ostringstream f;
    f << "cache_kill: " << processes << " processes x " << threads << " threads, " << keys.size() << " keys ("
      << shared_keys << " shared), " << rounds << " SIGKILL rounds in " << seconds << " s: " << aimed
      << " aimed at a publish in progress (" << landed_mid_publish << " provably mid-publish: temporary left behind), "
      << random_kills << " at a random moment; " << sh->loads.load() << " loads, " << sh->hits.load() << " hits, "
      << sh->wrong_hits.load() << " wrong bytes loaded, " << sh->compiles.load() << " compiles, "
      << sh->stores_ok.load() << " stores, " << sh->stores_refused.load() << " refused, " << sh->removes.load()
      << " removes, " << sh->exceptions.load() << " exceptions, " << sh->warnings.load() << " warnings, " << not_killed
      << " deaths not by our SIGKILL; "
      << leftovers << " temporaries left by the dead (cleaned); " << valid << "/" << keys.size()
      << " keys valid at the end, the rest repaired by one store";
    figure(fmt_str(f));
    ::munmap(sh, sizeof(SharedCounters));
}

namespace {

// Which step of a publish a degrade warning names.
std::string failure_point(const std::string& log) {
    for (const char* p : {"kernel.cubin", "meta.json", "last_used", "cannot create directory", "cannot fsync",
                          "cannot rename"})
        if (log.find(p) != std::string::npos) return p;
    return "other";
}

uint64_t free_bytes(const fs::path& dir) {
    struct statvfs s;
    return ::statvfs(dir.c_str(), &s) == 0 ? uint64_t(s.f_bavail) * s.f_bsize : 0;
}
uint64_t free_inodes(const fs::path& dir) {
    struct statvfs s;
    return ::statvfs(dir.c_str(), &s) == 0 ? uint64_t(s.f_favail) : 0;
}

void fill_file(const fs::path& p, uint64_t bytes) {
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    std::vector<char> block(64 * 1024, 'x');
    while (bytes > 0) {
        ssize_t n = ::write(fd, block.data(), std::min<uint64_t>(bytes, block.size()));
        if (n <= 0) break;
        bytes -= uint64_t(n);
    }
    ::close(fd);
}

// One store into a cache whose disk is full at some point of the publish. The writer keeps its bytes in
// memory; nobody else ever sees a partial entry; the key is published once space is back.
struct FullDiskStep {
    bool stored = false;
    std::string point;
};
FullDiskStep full_disk_step(const fs::path& root, const CacheKey& key, const std::vector<char>& cubin,
                            const std::function<void()>& make_full, const std::function<void()>& free_space,
                            ChildReport& r) {
    FullDiskStep out;
    mlajit::test::LogCapture logs;
    make_full();
    {
        DiskCache writer(root, CacheMode::rw);
        out.stored = writer.store(kArch, kFamily, key, cubin, {{"nvrtc_log", std::string(3000, 'l')}});
        r.check(writer.load(kArch, kFamily, key) == std::optional(cubin), "the writer lost its own bytes on a full disk");
        if (!out.stored) {
            r.check(!writer.writable(), "a failed store did not switch the cache to memory");
            r.check(logs.warnings() == 1, "a full disk gave " + std::to_string(logs.warnings()) + " warnings, not 1");
            out.point = failure_point(logs.all());
        }
        DiskCache reader(root, CacheMode::rw);
        auto got = reader.load(kArch, kFamily, key);
        r.check(!got || *got == cubin, "another process loaded wrong bytes after a full-disk store");
        r.check(got.has_value() == out.stored, "store's result does not say whether the entry is on disk");
        r.check(reader.verify().bad.empty(), "a full disk left a bad entry behind");
        r.check(count_entries(reader.version_dir() / "tmp") == 0, "a full disk left a temporary behind");
    }
    free_space();
    DiskCache again(root, CacheMode::rw);
    r.check(again.store(kArch, kFamily, key, cubin, {}), "the key could not be stored once space was back");
    r.check(DiskCache(root, CacheMode::rw).load(kArch, kFamily, key) == std::optional(cubin),
            "the key is not valid once space was back");
    return out;
}

}  // namespace

TEST_CASE("cache faults: a full disk (bytes and inodes) at every step of a publish") {
    const uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    mlajit::test::TempDir t("faults-full");
    fs::create_directories(t.path / "mnt");
    mlajit::test::IsolatedFsOptions opt;
    opt.size_bytes = 2u << 20;
    opt.max_inodes = 400;
    auto outcome = mlajit::test::run_with_isolated_fs(t.path / "mnt", t.path / "report", opt,
                                                      [&](const fs::path& dir, FsKind kind, ChildReport& r) {
        const CacheKey key0 = key_of("full-" + std::to_string(seed), 0);
        const std::vector<char> cubin(96 * 1024, 'c');
        std::map<std::string, int> points;
        int steps = 0, refused = 0;
        if (kind == FsKind::none) {
            // No mount: RLIMIT_FSIZE makes writes past 48 KiB fail (EFBIG, not ENOSPC), the closest stand-in.
            // Only the soft limit moves, so that a non-root process can raise it back.
            ::signal(SIGXFSZ, SIG_IGN);
            struct rlimit old_lim{};
            ::getrlimit(RLIMIT_FSIZE, &old_lim);
            struct rlimit lim = old_lim;
            lim.rlim_cur = 48 * 1024;
            ::setrlimit(RLIMIT_FSIZE, &lim);
            auto s = full_disk_step(dir / "r0", key0, cubin, [] {}, [&] { ::setrlimit(RLIMIT_FSIZE, &old_lim); }, r);
            r.check(!s.stored, "RLIMIT_FSIZE did not stop the store");
            r.figure("cache_full_disk: fallback RLIMIT_FSIZE=48KiB (EFBIG): 1 refused store, failure at " + s.point);
            return;
        }
        // Bytes: leave 0..150 KiB free in 3 KiB steps, so the publish runs out at each of its writes.
        for (int i = 0; i <= 50; ++i, ++steps) {
            const fs::path root = dir / ("b" + std::to_string(i));
            fs::create_directories(root);
            const fs::path filler = dir / "filler";
            auto s = full_disk_step(root, key_of("full-b-" + std::to_string(seed), i), cubin,
                                    [&] {
                                        uint64_t avail = free_bytes(dir);
                                        uint64_t leave = uint64_t(i) * 3 * 1024;
                                        fill_file(filler, avail > leave ? avail - leave : 0);
                                    },
                                    [&] { fs::remove(filler); }, r);
            if (!s.stored) {
                ++refused;
                ++points["ENOSPC at " + s.point];
            }
            fs::remove_all(root);
        }
        // Inodes: leave 0..12 free, so directory and file creation fail in turn.
        for (int i = 0; i <= 12; ++i, ++steps) {
            const fs::path root = dir / ("i" + std::to_string(i));
            fs::create_directories(root);
            std::vector<fs::path> fillers;
            auto s = full_disk_step(root, key_of("full-i-" + std::to_string(seed), i), cubin,
                                    [&] {
                                        uint64_t avail = free_inodes(dir);
                                        for (uint64_t j = 0; j + uint64_t(i) < avail; ++j) {
                                            fillers.push_back(dir / ("inode" + std::to_string(j)));
                                            fill_file(fillers.back(), 0);
                                        }
                                    },
                                    [&] {
                                        for (auto& p : fillers) fs::remove(p);
                                    }, r);
            if (!s.stored) {
                ++refused;
                ++points["no inode at " + s.point];
            }
            fs::remove_all(root);
        }
        std::ostringstream f;
        f << "cache_full_disk (" << mlajit::test::fs_kind_name(kind) << ", 2 MiB, 400 inodes): " << steps
          << " stores of a 96 KiB entry with the disk full at a different point, " << refused
          << " refused (the rest fit); failure points:";
        for (auto& [p, n] : points) f << " " << p << " x" << n << ";";
        f << " every refused store kept its bytes in memory, left no entry or temporary, and every key was valid "
             "once space was back";
        r.figure(f.str());
        r.check(refused >= 10, "the sweep did not hit a full disk often enough: " + std::to_string(refused));
    });
    INFO(outcome.description);
    CHECK(outcome.exited_cleanly);
    for (auto& fl : outcome.failures) FAIL_CHECK(fl);
    for (auto& fg : outcome.figures) figure(fg);
    CHECK(!outcome.figures.empty());
}

TEST_CASE("cache faults: a read-only cache directory (a read-only mount: EROFS even for root)") {
    const uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    mlajit::test::TempDir t("faults-ro");
    fs::create_directories(t.path / "mnt");
    auto outcome = mlajit::test::run_with_isolated_fs(t.path / "mnt", t.path / "report", {},
                                                      [&](const fs::path& dir, FsKind kind, ChildReport& r) {
        mlajit::test::LogCapture logs;
        const fs::path root = dir / "cache";
        std::vector<CacheKey> keys;
        std::vector<std::vector<char>> cubins;
        for (int i = 0; i < 7; ++i) {
            keys.push_back(key_of("ro-" + std::to_string(seed), i));
            cubins.push_back(fake_cubin(keys.back()));
        }
        {
            DiskCache w(root, CacheMode::rw);
            for (int i = 0; i < 6; ++i) r.check(w.store(kArch, kFamily, keys[size_t(i)], cubins[size_t(i)], {}), "setup store");
            auto l = w.lock(keys[0], 0ms);  // a lock file exists for key 0
        }
        std::string how;
        if (kind != FsKind::none && mlajit::test::remount_readonly(dir)) how = "read-only remount (EROFS)";
        else if (::geteuid() != 0) {
            for (auto& e : fs::recursive_directory_iterator(root))
                if (e.is_directory()) ::chmod(e.path().c_str(), 0555);
            ::chmod(root.c_str(), 0555);
            how = "chmod 0555 (EACCES)";
        } else {
            r.figure("cache_read_only: skipped (root and no mount namespace: nothing can make a directory read-only)");
            return;
        }
        int loads = 0;
        DiskCache c(root, CacheMode::rw);
        for (int rep = 0; rep < 20; ++rep)
            for (int i = 0; i < 6; ++i, ++loads)
                r.check(c.load(kArch, kFamily, keys[size_t(i)]) == std::optional(cubins[size_t(i)]),
                        "an entry on a read-only disk did not load");
        auto l = c.lock(keys[0], 100ms);
        r.check(!l.held() && !l.timed_out(), "a lock on a read-only disk is neither held nor timed out");
        r.check(!c.store(kArch, kFamily, keys[6], cubins[6], {}), "a store on a read-only disk claimed success");
        r.check(c.load(kArch, kFamily, keys[6]) == std::optional(cubins[6]), "the refused store's bytes were not kept");
        r.check(!c.writable(), "the cache did not switch to memory");
        r.check(!c.store(kArch, kFamily, keys[6], cubins[6], {}), "second store");
        auto v = c.verify(true);
        r.check(v.ok == 6 && v.bad.empty(), "verify on a read-only disk");
        r.check(c.prune(0).entries_removed == 0, "prune removed entries from a read-only disk");
        c.clean_temporaries(0s);
        const size_t warnings_rw = logs.warnings();
        r.check(warnings_rw >= 1, "no warning that the cache cannot be written");
        DiskCache ro(root, CacheMode::ro);
        for (int i = 0; i < 6; ++i)
            r.check(ro.load(kArch, kFamily, keys[size_t(i)]) == std::optional(cubins[size_t(i)]), "ro-mode load");
        r.check(!ro.store(kArch, kFamily, keys[6], cubins[6], {}), "ro-mode store");
        r.check(logs.warnings() == warnings_rw, "mode ro warned about a read-only directory");
        std::ostringstream f;
        f << "cache_read_only (" << how << ", " << mlajit::test::fs_kind_name(kind) << "): " << loads
          << " loads of 6 entries all exact, 2 stores refused and kept in memory, lock unheld without waiting, "
             "verify/prune/clean ran and changed nothing, "
          << warnings_rw << " warning(s) in mode rw, 0 in mode ro";
        r.figure(f.str());
        if (how.rfind("chmod", 0) == 0) {  // give write access back, or the parent cannot delete the tree
            for (auto& e : fs::recursive_directory_iterator(root))
                if (e.is_directory()) ::chmod(e.path().c_str(), 0755);
            ::chmod(root.c_str(), 0755);
        }
    });
    INFO(outcome.description);
    CHECK(outcome.exited_cleanly);
    for (auto& fl : outcome.failures) FAIL_CHECK(fl);
    for (auto& fg : outcome.figures) figure(fg);
}

namespace {

enum Damage {
    truncate_cubin, extend_cubin, flip_cubin_bit, flip_meta_bit, truncate_meta, cubin_is_dir, meta_is_dir,
    entry_is_file, no_cubin, no_meta, cubin_is_fifo, meta_is_fifo, cubin_links_dev_zero, cubin_dangling_link,
    other_keys_cubin, other_keys_entry, entry_empty, marker_is_dir, kDamageKinds
};
const char* damage_name(int d) {
    static const char* names[] = {"truncated cubin", "extended cubin", "one cubin bit flipped", "one meta.json bit flipped",
                                  "truncated meta.json", "cubin replaced by a directory", "meta.json replaced by a directory",
                                  "entry replaced by a file", "cubin deleted", "meta.json deleted", "cubin replaced by a FIFO",
                                  "meta.json replaced by a FIFO", "cubin a symlink to /dev/zero", "cubin a dangling symlink",
                                  "another key's cubin", "another key's whole entry", "empty entry directory",
                                  "last_used replaced by a directory"};
    return names[d];
}

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}
void spit(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary | std::ios::trunc) << s; }

void apply_damage(int d, const fs::path& e, const fs::path& other, std::mt19937_64& rng) {
    const fs::path cubin = e / "kernel.cubin", meta = e / "meta.json";
    auto flip = [&](const fs::path& p) {
        std::string s = slurp(p);
        if (s.empty()) return;
        s[rng() % s.size()] ^= char(1u << (rng() % 8));
        spit(p, s);
    };
    switch (d) {
        case truncate_cubin: fs::resize_file(cubin, rng() % fs::file_size(cubin)); break;
        case extend_cubin: spit(cubin, slurp(cubin) + std::string(1 + rng() % 100, 'z')); break;
        case flip_cubin_bit: flip(cubin); break;
        case flip_meta_bit: flip(meta); break;
        case truncate_meta: fs::resize_file(meta, rng() % fs::file_size(meta)); break;
        case cubin_is_dir: fs::remove(cubin); fs::create_directory(cubin); break;
        case meta_is_dir: fs::remove(meta); fs::create_directories(meta / "x"); break;
        case entry_is_file: fs::remove_all(e); spit(e, "not an entry"); break;
        case no_cubin: fs::remove(cubin); break;
        case no_meta: fs::remove(meta); break;
        case cubin_is_fifo: fs::remove(cubin); ::mkfifo(cubin.c_str(), 0644); break;
        case meta_is_fifo: fs::remove(meta); ::mkfifo(meta.c_str(), 0644); break;
        case cubin_links_dev_zero: fs::remove(cubin); fs::create_symlink("/dev/zero", cubin); break;
        case cubin_dangling_link: fs::remove(cubin); fs::create_symlink(e / "nowhere", cubin); break;
        case other_keys_cubin: fs::copy_file(other / "kernel.cubin", cubin, fs::copy_options::overwrite_existing); break;
        case other_keys_entry:
            fs::remove_all(e);
            fs::copy(other, e, fs::copy_options::recursive);
            break;
        case entry_empty: fs::remove_all(e); fs::create_directory(e); break;
        case marker_is_dir: fs::remove(e / "last_used"); fs::create_directory(e / "last_used"); break;
    }
}

}  // namespace

TEST_CASE("cache faults: entries damaged in every way (truncated, bit-flipped, replaced by directories...)") {
    const uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    mlajit::test::TempDir t("faults-damage");
    fs::create_directories(t.path / "mnt");
    mlajit::test::IsolatedFsOptions opt;
    opt.size_bytes = 256u << 20;
    auto outcome = mlajit::test::run_with_isolated_fs(t.path / "mnt", t.path / "report", opt,
                                                      [&](const fs::path& dir, FsKind kind, ChildReport& r) {
        mlajit::test::LogCapture logs;  // every damaged entry warns once: keep that off the test's output
        std::mt19937_64 rng(seed);
        // On tmpfs fsync is free: many rounds. On a real disk each store pays five fsyncs.
        const int rounds = env_int("MLAJIT_FAULT_DAMAGE_ROUNDS", kind == FsKind::none ? 360 : 1800);
        const fs::path root = dir / "cache";
        DiskCache c(root, CacheMode::rw);
        const CacheKey other = key_of("damage-other-" + std::to_string(seed), 0);
        const auto other_cubin = fake_cubin(other);
        r.check(c.store(kArch, kFamily, other, other_cubin, {}), "setup");
        std::vector<int> refused(kDamageKinds), intact(kDamageKinds), wrong(kDamageKinds), unrepaired(kDamageKinds);
        std::vector<CacheKey> all;
        for (int i = 0; i < rounds; ++i) {
            const int d = i % kDamageKinds;
            const CacheKey key = key_of("damage-" + std::to_string(seed), i);
            std::vector<char> cubin(1 + rng() % (64 * 1024));
            for (auto& ch : cubin) ch = char(rng());
            if (!c.store(kArch, kFamily, key, cubin, {{"nvrtc_log", "ptxas info: 128 registers"}})) {
                r.fail("setup store failed");
                return;
            }
            apply_damage(d, c.entry_dir(kArch, kFamily, key), c.entry_dir(kArch, kFamily, other), rng);
            DiskCache fresh(root, CacheMode::rw);  // another process: no memory of the original bytes
            auto got = fresh.load(kArch, kFamily, key);
            if (!got) ++refused[size_t(d)];
            else if (*got == cubin) ++intact[size_t(d)];
            else ++wrong[size_t(d)];
            // The next compile's store repairs the entry, without degrading the cache.
            if (!fresh.store(kArch, kFamily, key, cubin, {}) || !fresh.writable() ||
                DiskCache(root, CacheMode::rw).load(kArch, kFamily, key) != std::optional(cubin))
                ++unrepaired[size_t(d)];
            all.push_back(key);
        }
        auto v = c.verify();
        r.check(v.bad.empty(), std::to_string(v.bad.size()) + " bad entries remain after repair");
        r.check(v.ok == all.size() + 1, "verify counted " + std::to_string(v.ok) + " good entries");
        std::ostringstream f;
        f << "cache_damage (" << mlajit::test::fs_kind_name(kind) << "): " << rounds << " damaged entries, "
          << kDamageKinds << " kinds; per kind refused/loaded-intact/WRONG/unrepaired:";
        int total_wrong = 0, total_unrepaired = 0;
        for (int d = 0; d < kDamageKinds; ++d) {
            f << " " << damage_name(d) << " " << refused[size_t(d)] << "/" << intact[size_t(d)] << "/" << wrong[size_t(d)]
              << "/" << unrepaired[size_t(d)] << ";";
            total_wrong += wrong[size_t(d)];
            total_unrepaired += unrepaired[size_t(d)];
            r.check(wrong[size_t(d)] == 0, std::string("wrong bytes loaded after: ") + damage_name(d));
            r.check(unrepaired[size_t(d)] == 0, std::string("not repaired by a store after: ") + damage_name(d));
        }
        f << " total wrong " << total_wrong << ", unrepaired " << total_unrepaired;
        r.figure(f.str());
    });
    INFO(outcome.description);
    CHECK(outcome.exited_cleanly);
    for (auto& fl : outcome.failures) FAIL_CHECK(fl);
    for (auto& fg : outcome.figures) figure(fg);
}

TEST_CASE("cache faults: stale locks and temporaries of dead processes") {
    const uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    mlajit::test::TempDir t("faults-stale");
    const fs::path root = t.path / "cache";
    DiskCache c(root, CacheMode::rw);
    const int rounds = 20;
    double worst_ms = 0;
    for (int i = 0; i < rounds; ++i) {
        const CacheKey key = key_of("stale-" + std::to_string(seed), i);
        int ready[2];
        REQUIRE(::pipe(ready) == 0);
        pid_t pid = spawn([&] {
            DiskCache mine(root, CacheMode::rw);
            auto l = mine.lock(key, 1s);
            char ok = l.held() ? '1' : '0';
            (void)!::write(ready[1], &ok, 1);
            for (;;) ::pause();  // holds the lock until killed
            return 0;
        });
        char ok = 0;
        REQUIRE(::read(ready[0], &ok, 1) == 1);
        ::close(ready[0]);
        ::close(ready[1]);
        CHECK(ok == '1');
        CHECK_FALSE(c.lock(key, 0ms).held());  // really held by the child
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        auto t0 = std::chrono::steady_clock::now();
        auto l = c.lock(key, 2s);
        worst_ms = std::max(worst_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        CHECK(l.held());
        CHECK(fs::exists(c.version_dir() / "locks" / (key.hex() + ".lock")));  // the file stays, the lock does not
    }

    // A lock file that is a directory, and a locks/ that is a file: no lock, no error, stores still work.
    mlajit::test::LogCapture logs;
    const CacheKey k1 = key_of("stale-dir-" + std::to_string(seed), 0);
    fs::create_directories(c.version_dir() / "locks" / (k1.hex() + ".lock"));
    auto l1 = c.lock(k1, 50ms);
    CHECK_FALSE(l1.held());
    CHECK_FALSE(l1.timed_out());
    CHECK(c.store(kArch, kFamily, k1, fake_cubin(k1), {}));
    mlajit::test::TempDir t2("faults-stale2");
    DiskCache c2(t2.path, CacheMode::rw);
    fs::create_directories(c2.version_dir());
    spit(c2.version_dir() / "locks", "a file where the locks directory should be");
    auto l2 = c2.lock(k1, 50ms);
    CHECK_FALSE(l2.held());
    CHECK_FALSE(l2.timed_out());
    CHECK(c2.store(kArch, kFamily, k1, fake_cubin(k1), {}));
    CHECK(c2.writable());

    // A dead writer's temporary: invisible to loads, kept while young (it may be a live writer's), removed old.
    const CacheKey k2 = key_of("stale-tmp-" + std::to_string(seed), 0);
    const fs::path old_tmp = c.version_dir() / "tmp" / (k2.hex() + ".999999.0.0");
    const fs::path young_tmp = c.version_dir() / "tmp" / (k2.hex() + ".999998.0.0");
    for (auto& p : {old_tmp, young_tmp}) {
        fs::create_directories(p);
        spit(p / "kernel.cubin", "half a cub");
    }
    fs::last_write_time(old_tmp, fs::file_time_type::clock::now() - 10min);
    CHECK_FALSE(c.load(kArch, kFamily, k2).has_value());
    CHECK(c.clean_temporaries() == 1);
    CHECK_FALSE(fs::exists(old_tmp));
    CHECK(fs::exists(young_tmp));
    CHECK(c.store(kArch, kFamily, k2, fake_cubin(k2), {}));
    CHECK(c.load(kArch, kFamily, k2) == std::optional(fake_cubin(k2)));
    CHECK(logs.warnings() == 0);
    std::ostringstream f;
    f << "cache_stale_locks: " << rounds << " lock holders SIGKILLed: the next lock() was held after at most "
      << worst_ms << " ms (the kernel drops a dead holder's flock); lock file as a directory and locks/ as a file: "
         "unheld, no wait, stores fine; a dead writer's temporary never loads and is cleaned once old";
    figure(fmt_str(f));
}

namespace {
std::map<std::string, std::string> snapshot(const fs::path& dir) {
    std::map<std::string, std::string> m;
    for (auto& e : fs::recursive_directory_iterator(dir))
        m[fs::relative(e.path(), dir).string()] = e.is_regular_file() ? slurp(e.path()) : "<dir>";
    return m;
}
}  // namespace

TEST_CASE("cache faults: two library versions share one cache root") {
    const uint64_t seed = fresh_seed();
    INFO("seed=" << seed);
    std::mt19937_64 rng(seed);
    mlajit::test::TempDir t("faults-versions");
    const fs::path root = t.path / "cache";
    // A newer cache format's tree, as a later mlajit would write it.
    const fs::path newer = root / ("v" + std::to_string(DiskCache::kFormatVersion + 1));
    const CacheKey nk = key_of("newer-format", 0);
    fs::create_directories(newer / kArch / kFamily / nk.hex());
    spit(newer / kArch / kFamily / nk.hex() / "kernel.cubin", "a v2 cubin");
    spit(newer / kArch / kFamily / nk.hex() / "meta.json", "{\"format_version\": 2, \"new_field\": []}");
    const auto newer_before = snapshot(newer);

    // Two library builds whose kernel sources differ: the same kernels get different keys, and both run at once.
    const int per_lib = 10;
    std::vector<CacheKey> keys;
    std::vector<std::vector<char>> cubins;
    for (const char* lib : {"mlajit-0.1 sources", "mlajit-0.2 sources"})
        for (int i = 0; i < per_lib; ++i) {
            keys.push_back(key_of(lib, i));
            cubins.push_back(fake_cubin(keys.back()));
        }
    SharedCounters* sh = map_shared_counters();
    std::vector<pid_t> pids;
    for (int p = 0; p < 4; ++p) {
        WorkerPlan plan{&keys, &cubins, {}, {}, 2, 60, 0};
        for (int i = 0; i < per_lib; ++i) plan.shared.push_back(size_t((p % 2) * per_lib + i));
        uint64_t s = rng();
        pids.push_back(spawn([&, plan, s] { return worker_process(root, plan, sh, s); }));
    }
    for (pid_t p : pids) {
        int status = 0;
        REQUIRE(::waitpid(p, &status, 0) == p);
        CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    }
    CHECK(sh->wrong_hits.load() == 0);
    CHECK(sh->exceptions.load() == 0);
    CHECK(sh->stores_refused.load() == 0);
    CHECK(sh->compiles.load() == keys.size());  // each key compiled once across both libraries' processes
    size_t valid = 0;
    check_every_key_ends_valid(root, keys, cubins, &valid);
    CHECK(valid == keys.size());
    {
        DiskCache c(root, CacheMode::rw);
        CHECK(c.list().size() == keys.size());  // the newer format's entry is not ours to list
        c.verify(true);
        c.clean_temporaries(0s);
    }
    CHECK(snapshot(newer) == newer_before);  // load, store, lock, verify and clean never touch another format
    std::ostringstream f;
    f << "cache_two_versions: 2 library builds (different kernel sources => different keys) x 2 processes x 2 "
         "threads, "
      << sh->loads.load() << " loads, " << sh->hits.load() << " hits, " << sh->wrong_hits.load() << " wrong, "
      << sh->compiles.load() << " compiles for " << keys.size() << " keys (each once), " << valid << "/"
      << keys.size() << " valid; a newer format's v" << DiskCache::kFormatVersion + 1
      << "/ tree byte-identical after load/store/lock/verify/clean (only an explicit prune removes it)";
    figure(fmt_str(f));
    ::munmap(sh, sizeof(SharedCounters));
}
