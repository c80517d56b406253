// `warmup` (the default subcommand): compiles every kernel variant a model launches into the disk cache,
// on a pool of threads, through the same KernelStore and variant list the library serves from.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli.h"
#include "common/error.h"
#include "config/env.h"
#include "ops/variants.h"
#include "progress.h"

namespace mlajit::cli {
namespace {

struct Flags {
    std::string model = "deepseek-v3.2";
    std::optional<int> heads, kv_lora, nope, rope, v, topk;
    std::vector<int> tp = {1, 2, 4, 8};
    std::vector<std::string> archs;
    int jobs = 0;  // 0: one per hardware thread
    std::string cache_dir;
    bool json = false;
};

struct Result {
    KernelSpec spec;
    std::string name;
    CacheKey key;
    Progress::Outcome outcome = Progress::Outcome::failed;
    double seconds = 0;
    uint64_t bytes_added = 0;
    std::string error;
};

ModelConfig model_from(const Flags& f) {
    ModelConfig m = model_preset(f.model);
    bool custom = false;
    auto set = [&](const std::optional<int>& flag, int& dim) {
        if (flag && *flag != dim) {
            dim = *flag;
            custom = true;
        }
    };
    set(f.heads, m.heads);
    set(f.kv_lora, m.kv_lora);
    set(f.nope, m.d_nope);
    set(f.rope, m.d_rope);
    set(f.v, m.d_v);
    set(f.topk, m.topk);
    if (custom) m.name += " (custom dims)";
    return m;
}

uint64_t entry_bytes(const std::filesystem::path& dir) {
    uint64_t n = 0;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        std::error_code fec;
        if (it->is_regular_file(fec)) n += it->file_size(fec);
    }
    return n;
}

Result warm_one(KernelStore& store, const KernelSpec& spec) {
    Result r;
    r.spec = spec;
    r.name = spec_name(spec);
    auto t0 = std::chrono::steady_clock::now();
    try {
        auto cub = store.cubin(spec);
        r.key = cub->key;
        if (cub->origin == Cubin::Origin::compiled) {
            r.outcome = Progress::Outcome::compiled;
            r.bytes_added = entry_bytes(store.disk().entry_dir(spec.arch.name(), family_info(spec.family).name, cub->key));
        } else {
            r.outcome = Progress::Outcome::cached;
        }
    } catch (const std::exception& e) {
        r.outcome = Progress::Outcome::failed;
        r.error = e.what();
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

const char* outcome_name(Progress::Outcome o) {
    return o == Progress::Outcome::compiled ? "compiled" : o == Progress::Outcome::cached ? "cached" : "failed";
}

int run(const Flags& f) {
    const Config& c = config();
    if (c.cache_mode != CacheMode::rw)
        throw UsageError(fmt::format("MLAJIT_CACHE={} keeps warmup from writing the cache, so its work would be lost: "
                                     "unset MLAJIT_CACHE (or set it to rw)",
                                     cache_mode_name(c.cache_mode)));
    const ModelConfig model = model_from(f);
    const std::vector<Arch> archs = resolve_archs(f.archs);
    const std::vector<KernelSpec> specs = model_variants(model, f.tp, archs);
    const int jobs = f.jobs > 0 ? f.jobs : int(std::max(1u, std::thread::hardware_concurrency()));

    KernelStore store(store_options(f.cache_dir));
    std::string arch_list, tp_list;
    for (const auto& a : archs) arch_list += (arch_list.empty() ? "" : ",") + a.name();
    for (int t : f.tp) tp_list += (tp_list.empty() ? "" : ",") + std::to_string(t);
    std::cerr << fmt::format("warmup: {} (tp {}) for {}: {} variants into {} with {} job{}{}\n", model.name, tp_list,
                             arch_list, specs.size(), store.disk().root().string(), jobs, jobs == 1 ? "" : "s",
                             c.offline ? " (MLAJIT_OFFLINE=1: checking the cache, compiling nothing)" : "");

    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Result> results(specs.size());
    {
        Progress progress(specs.size(), ::isatty(STDERR_FILENO) == 1);
        // Longest compiles first (the Hopper attention kernels take 1-1.5 s, most others 0.1-0.4 s): in list
        // order the jobs could end on one long kernel while the others idle. Results stay in list order.
        std::vector<size_t> order(specs.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t b) { return compile_cost_hint(specs[a]) > compile_cost_hint(specs[b]); });
        std::atomic<size_t> next{0};
        auto worker = [&] {
            for (;;) {
                const size_t n = next.fetch_add(1);
                if (n >= specs.size()) return;
                const size_t i = order[n];
                progress.started(spec_name(specs[i]));
                results[i] = warm_one(store, specs[i]);
                progress.finished(results[i].name, results[i].outcome, results[i].seconds);
            }
        };
        std::vector<std::thread> pool;
        for (int j = 1; j < std::min<int>(jobs, int(specs.size())); ++j) pool.emplace_back(worker);
        worker();
        for (auto& t : pool) t.join();
        progress.finish();
    }
    const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    size_t compiled = 0, cached = 0, failed = 0;
    uint64_t bytes = 0;
    for (const auto& r : results) {
        compiled += r.outcome == Progress::Outcome::compiled;
        cached += r.outcome == Progress::Outcome::cached;
        failed += r.outcome == Progress::Outcome::failed;
        bytes += r.bytes_added;
    }
    const bool saved = store.disk().writable();

    if (f.json) {
        nlohmann::json j = {{"model", model.name},      {"cache_dir", store.disk().root().string()},
                            {"variants", specs.size()}, {"compiled", compiled},
                            {"cached", cached},         {"failed", failed},
                            {"seconds", total_s},       {"bytes_added", bytes},
                            {"saved", saved},           {"kernels", nlohmann::json::array()}};
        for (const auto& r : results) {
            nlohmann::json k = {{"spec", r.name}, {"arch", r.spec.arch.name()}, {"family", family_info(r.spec.family).name},
                                {"outcome", outcome_name(r.outcome)}, {"seconds", r.seconds}};
            if (r.outcome != Progress::Outcome::failed) k["key"] = r.key.hex();
            else k["error"] = r.error;
            j["kernels"].push_back(std::move(k));
        }
        std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
        print_table(std::cout, {"variants", "compiled", "already cached", "failed", "total seconds", "bytes added"},
                    {{std::to_string(specs.size()), std::to_string(compiled), std::to_string(cached),
                      std::to_string(failed), fmt::format("{:.1f}", total_s),
                      fmt::format("{} ({})", bytes, human_bytes(bytes))}});
    }

    for (const auto& r : results)
        if (r.outcome == Progress::Outcome::failed) std::cerr << "\nFAILED " << r.name << ":\n" << r.error << "\n";
    if (failed)
        std::cerr << fmt::format("\nwarmup: {} of {} kernels failed (above). Fix the cause and run warmup again: "
                                 "kernels that succeeded are cached and will not be rebuilt.\n",
                                 failed, specs.size());
    if (!saved && compiled) {
        std::cerr << fmt::format("warmup: the kernels could not be written to {} (see the warning above): make it "
                                 "writable or pass --cache-dir with a writable directory\n",
                                 store.disk().root().string());
        return kExitFailed;
    }
    return failed ? kExitFailed : kExitOk;
}

[[maybe_unused]] const bool registered = register_command({
    "warmup",
    "compile every kernel variant of a model into the cache (the default subcommand)",
    10,
    [](CLI::App& sub) -> Runner {
        auto f = std::make_shared<Flags>();
        std::string presets;
        for (const auto& n : model_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
        sub.add_option("--model", f->model, "model preset: " + presets)
            ->check(CLI::IsMember(model_preset_names()))
            ->capture_default_str();
        sub.add_option("--heads", f->heads, "attention heads before tensor parallelism (overrides the preset)")
            ->check(CLI::Range(1, 128));
        sub.add_option("--kv-lora", f->kv_lora, "latent KV width (overrides the preset)")->check(CLI::PositiveNumber);
        sub.add_option("--nope", f->nope, "no-position part of the q/k head dim (overrides the preset)")
            ->check(CLI::PositiveNumber);
        sub.add_option("--rope", f->rope, "rotary part of the q/k head dim (overrides the preset)")
            ->check(CLI::PositiveNumber);
        sub.add_option("--v", f->v, "value head dim (overrides the preset)")->check(CLI::PositiveNumber);
        sub.add_option("--topk", f->topk, "DSA top-k keys per query (overrides the preset)")->check(CLI::PositiveNumber);
        sub.add_option("--tp", f->tp, "tensor-parallel degrees, comma-separated")
            ->delimiter(',')
            ->check(CLI::Range(1, 128))
            ->capture_default_str();
        sub.add_option("--arch", f->archs,
                       "target archs, comma-separated, e.g. sm_90a,sm_80 (default: MLAJIT_ARCH, else the local "
                       "GPUs' archs)")
            ->delimiter(',')
            ->check(arch_validator());
        sub.add_option("--jobs,-j", f->jobs, "parallel compiles (default: one per hardware thread)")
            ->check(CLI::Range(1, 1024));
        add_cache_dir_flag(sub, f->cache_dir);
        sub.add_flag("--json", f->json, "print the summary as JSON on stdout (with every kernel's key and outcome)");
        return [f] { return run(*f); };
    },
});

}  // namespace
}  // namespace mlajit::cli
