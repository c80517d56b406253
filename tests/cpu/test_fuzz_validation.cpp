// Host-side validation fuzzed: random argument sets for every public entry point, each either accepted (a
// plan the GPU can launch) or refused with INVALID_ARGUMENT / UNSUPPORTED and a non-empty message; never a
// crash, never another exception, never a launch on refused input. Runs without a GPU: the ops' plans are
// built from the descriptors alone (what the entry points do before launching), mla_prefill's host part is
// check_mla_args + plan_mla_paths + schedule_mla + the workspace check, mlajit_plan_prefill and
// mlajit_warmup are called through the C ABI, and the handle-taking C entry points with a NULL handle.
//
// A case starts from a valid argument set of random shape and applies 0 to 4 mutations: NULL pointers,
// misalignment, wrong dtypes (also values outside the enum), ndim, sizes (0, -1, 2^31, 2^40, INT64_MAX),
// strides (negative, 0, huge), cu_seqlens (non-monotone, wrong totals, negative, NULL), index widths, heads
// 0 and 129, sm_scale 0 / negative / NaN / inf, struct_size. MLAJIT_FUZZ_CASES (default 100000) and
// MLAJIT_FUZZ_SEED (default: fresh, printed) replay a run; the per-entry-point counts are the figure.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <sstream>

#include "support/fuzz_cases.h"
#include "support/log_capture.h"

using namespace mlajit;
using namespace mlajit::fuzz;

TEST_CASE("fuzz: every entry point accepts or refuses with a message, never crashes (seeded, >= 10^5 cases)") {
    mlajit::test::LogCapture quiet;  // refusals log at debug level only; keep any warning off the output
    const char* seed_env = std::getenv("MLAJIT_FUZZ_SEED");
    const char* cases_env = std::getenv("MLAJIT_FUZZ_CASES");
    const uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : std::random_device{}();
    const int64_t cases = cases_env ? std::atoll(cases_env) : 100'000;
    INFO("MLAJIT_FUZZ_SEED=" << seed);
    Tally tallies[std::size(kEntries)];
    std::mt19937_64 master(seed);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < cases; ++i) {
        // Each case has its own seed (printed on failure): a replay with MLAJIT_FUZZ_SEED=<it>, MLAJIT_FUZZ_CASES=1
        // runs the same first pick of entry point and arguments.
        const uint64_t case_seed = cases == 1 ? seed : master();
        Gen g(case_seed);
        run_one(g, tallies, case_seed);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ostringstream f;
    int64_t all = 0, failures = 0;
    f << "FIGURE fuzz_validation: seed " << seed << ", " << cases << " argument sets in " << secs << " s:";
    for (size_t i = 0; i < std::size(kEntries); ++i) {
        const auto& e = kEntries[i];
        const Tally& tally = tallies[i];
        int64_t nf = 0;
        for (auto& [what, n] : tally.failures) nf += n;
        all += tally.cases;
        failures += nf;
        f << " " << e.name << " " << tally.cases << " (" << tally.accepted << " accepted, " << tally.refused
          << " refused, " << nf << " failures);";
        for (auto& [what, n] : tally.failures) MESSAGE(std::string(e.name) << ": " << n << " x " << what);
        if (!tally.first_failure.empty()) MESSAGE(std::string(e.name) << " first failure: " << tally.first_failure);
    }
    MESSAGE(f.str());
    CHECK(all == cases);
    CHECK(failures == 0);
    for (size_t i = 0; i < std::size(kEntries); ++i) {
        INFO(kEntries[i].name);
        if (kEntries[i].fn != warmup_case) CHECK(tallies[i].accepted > 0);  // the generator must also reach valid sets
        CHECK(tallies[i].refused > 0);
    }
}
