// The mlajit-warmup CLI, run as a separate process the way users and CI run it: warmup of a small model
// with real NVRTC compiles of the embedded kernels, cache hits on a second run, parallel compiles, export
// and import, verify with a corrupted entry, prune, flag and environment errors, and `env`.
// Compiles are the slow part (seconds each): one warmed cache is shared by every case that only reads it,
// and cases that modify a cache work on a copy.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "config/env.h"
#include "cuda/driver_api.h"
#include "jit/disk_cache.h"
#include "jit/kernel_spec.h"
#include "jit/nvrtc_api.h"
#include "ops/variants.h"

extern char** environ;

namespace fs = std::filesystem;
using namespace mlajit;

namespace {

using mlajit::test::TempDir;

std::string read_text(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

fs::path tool() {
    // ctest says where the tools are; run by hand, the test binary sits next to them in the build folder.
    if (const char* d = std::getenv("MLAJIT_TEST_TOOLS_DIR")) return fs::path(d) / "mlajit-warmup";
    return fs::read_symlink("/proc/self/exe").parent_path() / "mlajit-warmup";
}

struct Run {
    int code = -1;
    std::string out, err;
    std::string all() const { return out + err; }
    nlohmann::json json() const {
        auto j = nlohmann::json::parse(out, nullptr, false);
        if (j.is_discarded()) FAIL("stdout is not JSON:\n" << out << "\nstderr:\n" << err);
        return j;
    }
};

// Runs mlajit-warmup in an environment without the caller's MLAJIT_* variables (they would change keys
// or arches), plus `env`; only the library locations (MLAJIT_NVRTC_LIB, MLAJIT_CUDA_LIB) pass through. MLAJIT_CACHE_DIR points at a scratch folder unless `env` sets it, so that no
// run can write the user's real cache.
Run run_tool(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {}) {
    static TempDir scratch;
    const fs::path exe = tool();
    REQUIRE_MESSAGE(fs::exists(exe), "mlajit-warmup not found at " << exe.string()
                                                                  << ": build it (cmake --build build --target "
                                                                     "mlajit-warmup) or set MLAJIT_TEST_TOOLS_DIR");
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
        std::string s = *e;
        bool keep = s.rfind("MLAJIT_", 0) != 0 || s.rfind("MLAJIT_NVRTC_LIB=", 0) == 0 ||
                    s.rfind("MLAJIT_CUDA_LIB=", 0) == 0;
        if (keep) envs.push_back(s);
    }
    if (!env.count("MLAJIT_CACHE_DIR")) envs.push_back("MLAJIT_CACHE_DIR=" + (scratch.path / "default-cache").string());
    // For kernel work in progress: run these cases against a scratch copy of kernels_src. Unset (always
    // in CI), the tool compiles the kernels embedded in it.
    if (const char* k = std::getenv("MLAJIT_TEST_KERNELS_DIR")) envs.push_back(std::string("MLAJIT_KERNELS_DIR=") + k);
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);

    std::vector<std::string> argv_s{exe.string()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);

    static int counter = 0;
    const fs::path out_p = scratch.path / ("out" + std::to_string(counter));
    const fs::path err_p = scratch.path / ("err" + std::to_string(counter++));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE_MESSAGE(rc == 0, "posix_spawn " << exe.string() << ": " << std::strerror(rc));
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    Run r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = read_text(out_p);
    r.err = read_text(err_p);
    return r;
}

const std::vector<std::string> kTiny = {"--model", "deepseek-v3.2-tiny", "--tp", "1", "--arch", "sm_80"};

std::vector<std::string> warmup_args(const fs::path& cache, const std::string& jobs) {
    std::vector<std::string> a{"warmup"};
    a.insert(a.end(), kTiny.begin(), kTiny.end());
    a.insert(a.end(), {"--jobs", jobs, "--cache-dir", cache.string(), "--json"});
    return a;
}

std::vector<KernelSpec> tiny_variants() {
    return model_variants(model_preset("deepseek-v3.2-tiny"), {1}, {Arch::parse("sm_80")});
}

std::set<std::string> listed_keys(const fs::path& cache) {
    Run r = run_tool({"list", "--json", "--cache-dir", cache.string()});
    REQUIRE_MESSAGE(r.code == 0, r.all());
    std::set<std::string> keys;
    const nlohmann::json j = r.json();  // named: a temporary would die before the loop body runs
    for (const auto& e : j["entries"]) keys.insert(e["key"].get<std::string>());
    return keys;
}

// The one cache every read-only case shares, warmed up once with real compiles. Kernels that fail to
// compile fail the first case; the others still test the CLI on the entries that were built.
struct Warmed {
    TempDir dir;
    Run run;
    nlohmann::json summary;
    std::set<std::string> keys;  // of the kernels built, from the warmup's own report
    size_t failed = 0;
    int rerun_code() const { return failed ? 1 : 0; }  // what a later warmup of the same set exits with
};
const Warmed& warmed() {
    static Warmed w;
    [[maybe_unused]] static const bool ran = [] {
        w.run = run_tool(warmup_args(w.dir.path, "2"));
        w.summary = nlohmann::json::parse(w.run.out, nullptr, false);
        if (w.summary.is_object()) {
            for (const auto& k : w.summary["kernels"])
                if (k.contains("key")) w.keys.insert(k["key"].get<std::string>());
            w.failed = w.summary["failed"].get<size_t>();
        }
        return true;
    }();
    REQUIRE_MESSAGE(!w.keys.empty(), "the shared warmup built nothing:\n" << w.run.all());
    return w;
}

bool can_compile() {
    if (nvrtc_available()) return true;
    MESSAGE("NVRTC cannot be loaded on this machine: skipping the warmup CLI cases that compile kernels");
    return false;
}

// A copy to modify, leaving the shared cache intact.
void copy_cache(const fs::path& from, const fs::path& to) {
    fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

void put_u32(std::string& s, uint32_t v) {
    for (int i = 0; i < 4; ++i) s.push_back(char(v >> (8 * i)));
}
void put_u64(std::string& s, uint64_t v) {
    for (int i = 0; i < 8; ++i) s.push_back(char(v >> (8 * i)));
}
// An archive in the documented format (tools/warmup/archive.h), written independently of the tool.
std::string make_archive(const std::vector<std::pair<std::string, std::string>>& files) {
    std::string a = "MLAJITAR";
    put_u32(a, 1);
    put_u32(a, DiskCache::kFormatVersion);
    put_u64(a, files.size());
    for (const auto& [path, data] : files) {
        put_u32(a, uint32_t(path.size()));
        put_u32(a, 0);
        put_u64(a, data.size());
        CacheKey sum = xxh3_128(std::span<const char>(data.data(), data.size()));
        put_u64(a, sum.hi);
        put_u64(a, sum.lo);
        a += path + data;
    }
    a += std::string("MLAJEND\0", 8);
    put_u64(a, files.size());
    return a;
}

void write_file(const fs::path& p, const std::string& s) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << s;
}

}  // namespace

TEST_CASE("warmup CLI: warmup compiles every variant of the model into the cache") {
    if (!can_compile()) return;
    const Warmed& w = warmed();
    const auto specs = tiny_variants();
    CHECK_MESSAGE(w.run.code == 0, w.run.err);
    CHECK(w.summary["variants"] == specs.size());
    CHECK(w.summary["compiled"] == specs.size());
    CHECK(w.summary["cached"] == 0);
    CHECK(w.summary["failed"] == 0);
    CHECK(w.summary["bytes_added"].get<uint64_t>() > 0);
    CHECK(w.keys.size() == specs.size());
    // The cache holds exactly those entries, under the spec names the library's ops use.
    Run l = run_tool({"list", "--json", "--cache-dir", w.dir.str()});
    REQUIRE_MESSAGE(l.code == 0, l.all());
    std::set<std::string> listed_specs, want_specs, keys;
    const nlohmann::json listed = l.json();
    for (const auto& e : listed["entries"]) {
        listed_specs.insert(e["spec"].get<std::string>());
        keys.insert(e["key"].get<std::string>());
        CHECK(e["arch"] == "sm_80");
        CHECK(e["cubin_bytes"].get<uint64_t>() > 0);
    }
    for (const auto& s : specs) want_specs.insert(spec_name(s));
    CHECK(listed_specs == want_specs);
    CHECK(keys == w.keys);
    for (const auto& k : w.summary["kernels"]) {
        CAPTURE(k.dump());
        CHECK(want_specs.count(k["spec"].get<std::string>()) == 1);
        if (k["outcome"] == "failed") CHECK(k["error"].get<std::string>().find(k["spec"].get<std::string>()) != std::string::npos);
    }
    // Without a terminal, progress is one plain line per kernel.
    // (Built by appending, not `"[" + string`: GCC 12 at -O3 flags that operator+'s insert with
    // -Wstringop-overflow, a false positive.)
    std::string counter = "[";
    counter += std::to_string(specs.size());
    counter += '/';
    counter += std::to_string(specs.size());
    counter += ']';
    CHECK(w.run.err.find(counter) != std::string::npos);
    CHECK(w.run.err.find('\r') == std::string::npos);
}

TEST_CASE("warmup CLI: a second warmup compiles nothing and prints the summary table") {
    if (!can_compile()) return;
    const Warmed& w = warmed();
    std::vector<std::string> args{"warmup"};
    args.insert(args.end(), kTiny.begin(), kTiny.end());
    args.insert(args.end(), {"--cache-dir", w.dir.str()});
    Run r = run_tool(args);
    REQUIRE_MESSAGE(r.code == w.rerun_code(), r.all());
    // Header row, then one row of values: variants, compiled, already cached, failed, seconds, bytes.
    std::istringstream lines(r.out);
    std::string header, values;
    std::getline(lines, header);
    std::getline(lines, values);
    CHECK(header.find("already cached") != std::string::npos);
    CHECK(header.find("bytes added") != std::string::npos);
    std::istringstream v(values);
    std::string variants, compiled, cached, failed;
    v >> variants >> compiled >> cached >> failed;
    CHECK(variants == std::to_string(tiny_variants().size()));
    CHECK(compiled == "0");
    CHECK(cached == std::to_string(w.keys.size()));
    CHECK(failed == std::to_string(w.failed));
    CHECK(listed_keys(w.dir.path) == w.keys);
}

TEST_CASE("warmup CLI: honours the library's environment variables; --cache-dir overrides MLAJIT_CACHE_DIR") {
    if (!can_compile()) return;
    const Warmed& w = warmed();
    TempDir elsewhere;
    // MLAJIT_ARCH stands in for --arch: the same keys, all cached.
    Run r = run_tool({"warmup", "--model", "deepseek-v3.2-tiny", "--tp", "1", "--cache-dir", w.dir.str(), "--json"},
                     {{"MLAJIT_ARCH", "sm_80"}, {"MLAJIT_CACHE_DIR", elsewhere.str()}});
    REQUIRE_MESSAGE(r.code == w.rerun_code(), r.all());
    CHECK(r.json()["compiled"] == 0);
    CHECK(r.json()["cached"] == w.keys.size());
    CHECK(fs::is_empty(elsewhere.path));

    // Extra NVRTC flags are part of every key: none of the cached entries match. MLAJIT_OFFLINE turns the
    // misses into errors instead of compiles, naming each kernel.
    Run off = run_tool(warmup_args(w.dir.path, "1"), {{"MLAJIT_NVRTC_FLAGS", "-DMLAJIT_CLI_TEST=1"}, {"MLAJIT_OFFLINE", "1"}});
    CHECK(off.code == 1);
    CHECK(off.json()["failed"] == tiny_variants().size());
    CHECK(off.json()["compiled"] == 0);
    CHECK(off.err.find("MLAJIT_OFFLINE") != std::string::npos);
    CHECK(off.err.find("FAILED " + spec_name(tiny_variants()[0])) != std::string::npos);

    // Without --cache-dir, MLAJIT_CACHE_DIR names the cache.
    Run dflt = run_tool({"list", "--json"}, {{"MLAJIT_CACHE_DIR", w.dir.str()}});
    REQUIRE_MESSAGE(dflt.code == 0, dflt.all());
    CHECK(dflt.json()["entries"].size() == w.keys.size());
}

TEST_CASE("warmup CLI: --jobs 1 builds the same keys as --jobs 2") {
    if (!can_compile()) return;
    const Warmed& w = warmed();
    TempDir serial;
    Run r = run_tool(warmup_args(serial.path, "1"));
    REQUIRE_MESSAGE(r.code == w.rerun_code(), r.all());
    CHECK(r.json()["compiled"] == w.keys.size());
    CHECK(listed_keys(serial.path) == w.keys);
}

TEST_CASE("warmup CLI: export then import into an empty cache gives a hit for every key") {
    if (!can_compile()) return;
    const Warmed& w = warmed();
    TempDir work;
    const fs::path archive = work.path / "sm_80.mlajit";
    Run e = run_tool({"export", "--arch", "sm_80", "-o", archive.string(), "--cache-dir", w.dir.str()});
    REQUIRE_MESSAGE(e.code == 0, e.all());
    CHECK(fs::file_size(archive) > 0);

    const fs::path dest = work.path / "imported";
    Run i = run_tool({"import", archive.string(), "--cache-dir", dest.string()});
    REQUIRE_MESSAGE(i.code == 0, i.all());
    CHECK(listed_keys(dest) == w.keys);
    Run again = run_tool(warmup_args(dest, "2"));
    REQUIRE_MESSAGE(again.code == w.rerun_code(), again.all());
    CHECK(again.json()["compiled"] == 0);
    CHECK(again.json()["cached"] == w.keys.size());
    Run verify = run_tool({"verify", "--cache-dir", dest.string()});
    CHECK_MESSAGE(verify.code == 0, verify.all());

    SUBCASE("importing twice finds everything present") {
        Run i2 = run_tool({"import", archive.string(), "--cache-dir", dest.string()});
        REQUIRE_MESSAGE(i2.code == 0, i2.all());
        CHECK(i2.out.find("0 new") != std::string::npos);
    }
    SUBCASE("an archive of another arch is empty: export says there is nothing") {
        Run none = run_tool({"export", "--arch", "sm_90a", "-o", (work.path / "x").string(), "--cache-dir", w.dir.str()});
        CHECK(none.code == 1);
        CHECK(none.err.find("sm_90a") != std::string::npos);
        CHECK_FALSE(fs::exists(work.path / "x"));
    }
    SUBCASE("a damaged archive imports nothing") {
        std::string bytes = read_text(archive);
        bytes[bytes.size() / 2] ^= 0x40;
        const fs::path bad = work.path / "bad.mlajit";
        write_file(bad, bytes);
        const fs::path empty = work.path / "empty";
        Run b = run_tool({"import", bad.string(), "--cache-dir", empty.string()});
        CHECK(b.code == 1);
        CHECK(b.err.find("not a valid mlajit cache archive") != std::string::npos);
        CHECK(listed_keys(empty).empty());
        write_file(bad, read_text(archive).substr(0, bytes.size() - 20));
        Run t = run_tool({"import", bad.string(), "--cache-dir", empty.string()});
        CHECK(t.code == 1);
        CHECK(t.err.find("truncated") != std::string::npos);
    }
}

TEST_CASE("warmup CLI: import refuses paths that leave the cache") {
    TempDir work;
    const std::string key(32, 'a');
    const std::string meta = "{}";
    for (const std::string& path : {"../x/" + key + "/kernel.cubin", "sm_80/../" + key + "/kernel.cubin",
                                    "/sm_80/mha_fwd/" + key + "/kernel.cubin", "sm_80/mha_fwd/" + key + "/../../evil",
                                    "tmp/mha_fwd/" + key + "/kernel.cubin", std::string("sm_80/mha_fwd/nothex/kernel.cubin")}) {
        CAPTURE(path);
        const fs::path a = work.path / "evil.mlajit";
        write_file(a, make_archive({{path, "bytes"}}));
        const fs::path dest = work.path / "dest";
        Run r = run_tool({"import", a.string(), "--cache-dir", dest.string()});
        CHECK(r.code == 1);
        CHECK(r.err.find("refusing to import") != std::string::npos);
        CHECK_FALSE(fs::exists(dest / "v1"));
        CHECK_FALSE(fs::exists(work.path / "x"));
    }
    // The same writer with a well-formed entry imports it, so the refusals above are about the paths.
    const fs::path ok = work.path / "ok.mlajit";
    write_file(ok, make_archive({{"sm_80/mha_fwd/" + key + "/meta.json", meta},
                                 {"sm_80/mha_fwd/" + key + "/kernel.cubin", "not a real cubin"}}));
    Run r = run_tool({"import", ok.string(), "--cache-dir", (work.path / "dest").string()});
    CHECK_MESSAGE(r.code == 0, r.all());
    CHECK(listed_keys(work.path / "dest") == std::set<std::string>{key});
}

TEST_CASE("warmup CLI: verify finds a corrupted cubin and --remove-bad removes it") {
    if (!can_compile()) return;
    const Warmed& w = warmed();
    TempDir copy;
    copy_cache(w.dir.path, copy.path);
    Run clean = run_tool({"verify", "--cache-dir", copy.str()});
    REQUIRE_MESSAGE(clean.code == 0, clean.all());

    // Flip one byte in the middle of one entry's cubin.
    fs::path victim;
    for (const auto& e : fs::recursive_directory_iterator(copy.path))
        if (e.path().filename() == "kernel.cubin") victim = e.path();
    REQUIRE(!victim.empty());
    std::string bytes = read_text(victim);
    bytes[bytes.size() / 2] ^= 0x01;
    write_file(victim, bytes);
    const std::string key = victim.parent_path().filename().string();

    Run bad = run_tool({"verify", "--cache-dir", copy.str()});
    CHECK(bad.code == 1);
    CHECK(bad.out.find("BAD") != std::string::npos);
    CHECK(bad.out.find(key) != std::string::npos);
    CHECK(fs::exists(victim));

    Run removed = run_tool({"verify", "--remove-bad", "--cache-dir", copy.str()});
    CHECK_MESSAGE(removed.code == 0, removed.all());
    CHECK(removed.out.find("1 removed") != std::string::npos);
    CHECK_FALSE(fs::exists(victim.parent_path()));
    auto left = listed_keys(copy.path);
    CHECK(left.size() == w.keys.size() - 1);
    CHECK(left.count(key) == 0);
    Run after = run_tool({"verify", "--cache-dir", copy.str()});
    CHECK_MESSAGE(after.code == 0, after.all());
}

TEST_CASE("warmup CLI: prune removes other versions, temporaries and least recently used entries") {
    if (!can_compile()) return;
    const Warmed& w = warmed();
    TempDir copy;
    copy_cache(w.dir.path, copy.path);
    fs::create_directories(copy.path / "v0" / "sm_80");
    fs::create_directories(copy.path / "v1" / "tmp" / "stale");
    fs::last_write_time(copy.path / "v1" / "tmp" / "stale", fs::file_time_type::clock::now() - std::chrono::hours(2));

    Run r = run_tool({"prune", "--cache-dir", copy.str()});
    REQUIRE_MESSAGE(r.code == 0, r.all());
    CHECK_FALSE(fs::exists(copy.path / "v0"));
    CHECK_FALSE(fs::exists(copy.path / "v1" / "tmp" / "stale"));
    CHECK(listed_keys(copy.path) == w.keys);

    Run all = run_tool({"prune", "--max-bytes", "0", "--cache-dir", copy.str()});
    REQUIRE_MESSAGE(all.code == 0, all.all());
    CHECK(listed_keys(copy.path).empty());
}

TEST_CASE("warmup CLI: bad flags and values exit 2 with a message naming them") {
    TempDir cache;
    struct Case {
        std::vector<std::string> args;
        std::string names;
        std::map<std::string, std::string> env;
    };
    const std::vector<Case> cases = {
        {{"--bogus"}, "--bogus", {}},
        {{"warmup", "--frobnicate", "1"}, "--frobnicate", {}},
        {{"warmup", "--jobs", "abc", "--arch", "sm_80"}, "--jobs", {}},
        {{"warmup", "--jobs", "0", "--arch", "sm_80"}, "--jobs", {}},
        {{"warmup", "--arch", "sm_7"}, "sm_7", {}},
        {{"warmup", "--arch", "sm_70"}, "sm_70", {}},
        {{"warmup", "--model", "llama"}, "--model", {}},
        {{"warmup", "--model", "deepseek-v3.2-tiny", "--tp", "3", "--arch", "sm_80"}, "TP degree 3", {}},
        {{"warmup", "--model", "deepseek-v3.2-tiny", "--tp", "x", "--arch", "sm_80"}, "--tp", {}},
        {{"warmup", "--kv-lora", "256", "--arch", "sm_80"}, "kv_lora=256", {}},
        {{"frobnicate"}, "frobnicate", {}},
        {{"prune", "--max-bytes", "12Q"}, "--max-bytes", {}},
        {{"export", "--arch", "sm_80"}, "--output", {}},
        {{"import"}, "file", {}},
        {{"list", "--json", "extra"}, "extra", {}},
        {{"warmup", "--arch", "sm_80"}, "MLAJIT_MHA_TILE", {{"MLAJIT_MHA_TILE", "9x9"}}},
        {{"warmup", "--arch", "sm_80"}, "MLAJIT_CACHE", {{"MLAJIT_CACHE", "sometimes"}}},
        {{"warmup", "--arch", "sm_80"}, "MLAJIT_CACHE=ro", {{"MLAJIT_CACHE", "ro"}}},
        {{"warmup"}, "MLAJIT_ARCH", {{"MLAJIT_ARCH", "hopper"}}},
    };
    for (const auto& c : cases) {
        std::string joined;
        for (const auto& a : c.args) joined += a + " ";
        CAPTURE(joined);
        auto args = c.args;
        if (args[0] != "frobnicate") args.insert(args.end(), {"--cache-dir", cache.str()});
        Run r = run_tool(args, c.env);
        CHECK(r.code == 2);
        CHECK_MESSAGE(r.err.find(c.names) != std::string::npos, r.all());
    }
    CHECK(!fs::exists(cache.path / "v1"));
}

TEST_CASE("warmup CLI: with no --arch, no MLAJIT_ARCH and no GPU, warmup says to pass --arch") {
    if (driver_available()) {
        MESSAGE("a GPU is present: warmup would target it, so this case does not apply");
        return;
    }
    TempDir cache;
    Run r = run_tool({"--model", "deepseek-v3.2-tiny", "--cache-dir", cache.str()});
    CHECK(r.code == 2);
    CHECK(r.err.find("--arch") != std::string::npos);
}

TEST_CASE("warmup CLI: --help works at every level") {
    Run top = run_tool({"--help"});
    CHECK(top.code == 0);
    for (const char* sub : {"warmup", "list", "verify", "prune", "export", "import", "env"}) {
        CAPTURE(sub);
        CHECK(top.out.find(sub) != std::string::npos);
        Run h = run_tool({sub, "--help"});
        CHECK(h.code == 0);
        CHECK(h.out.find("--help") != std::string::npos);
    }
    Run w = run_tool({"warmup", "--help"});
    for (const char* flag : {"--model", "--heads", "--kv-lora", "--nope", "--rope", "--v", "--topk", "--tp", "--arch",
                             "--jobs", "--cache-dir"}) {
        CAPTURE(flag);
        CHECK(w.out.find(flag) != std::string::npos);
    }
}

TEST_CASE("warmup CLI: env lists every variable with its value and default") {
    const std::string dir = "/some/where/mlajit-cache";
    Run r = run_tool({"env"}, {{"MLAJIT_CACHE_DIR", dir}});
    REQUIRE_MESSAGE(r.code == 0, r.all());
    CHECK(r.out.find("MLAJIT_CACHE_DIR") != std::string::npos);
    CHECK(r.out.find(dir) != std::string::npos);
    for (const auto& d : env_var_docs()) {
        CAPTURE(d.name);
        CHECK(r.out.find(d.name) != std::string::npos);
    }
    Run j = run_tool({"env", "--json"}, {{"MLAJIT_CACHE_DIR", dir}, {"MLAJIT_PATH", "sideways"}});
    CHECK(j.code == 2);  // an invalid value is reported, not hidden
    bool saw_dir = false, saw_bad = false;
    const nlohmann::json vars = j.json();
    for (const auto& v : vars["variables"]) {
        if (v["name"] == "MLAJIT_CACHE_DIR") saw_dir = v["value"] == dir && v["default"].is_string();
        if (v["name"] == "MLAJIT_PATH") saw_bad = v.contains("problem");
    }
    CHECK(saw_dir);
    CHECK(saw_bad);
    CHECK(j.json()["cache_root"] == "(unknown: an environment variable is invalid)");
}
