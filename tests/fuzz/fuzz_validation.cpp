// libFuzzer target for the host-side validation (issue 14): the fuzzer's bytes drive the same case
// generators as the seeded doctest property test (tests/support/fuzz_cases.h), every public C entry point
// and the ops' planners included. A case that is neither accepted nor refused with INVALID_ARGUMENT /
// UNSUPPORTED and a message aborts (libFuzzer keeps the input); a crash, an ASan/UBSan report or a hang is
// a finding by itself.
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DMLAJIT_FUZZ=ON -DMLAJIT_SANITIZE=address,undefined
//   cmake --build build-fuzz --target mlajit-fuzz-validation
//   build-fuzz/mlajit-fuzz-validation -max_total_time=600 -print_final_stats=1 corpus/
#include <cstdio>
#include <cstdlib>

#include "support/fuzz_cases.h"
#include "common/log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace mlajit::fuzz;
    // Refusals log at debug level; warnings (e.g. an unknown GPU name) would flood the output: errors only.
    static const bool quiet = [] {
        mlajit::log().set_level(spdlog::level::err);
        return true;
    }();
    (void)quiet;
    Gen g(data, size);
    Tally tallies[std::size(kEntries)];
    const size_t i = run_one(g, tallies, 0);
    if (!tallies[i].failures.empty()) {
        std::fprintf(stderr, "mlajit-fuzz-validation: %s: %s\n", kEntries[i].name, tallies[i].first_failure.c_str());
        std::abort();
    }
    return 0;
}
