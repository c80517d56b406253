// The FP8 latent cache on the host: e4m3fn encode/decode against the format's definition (all 256 codes),
// the kernels' bit-level encoder (a line-by-line port of kernels_src/quantize_cache/e4m3.cuh) against the
// reference, the row layout, and every validation error of the writer and of the one call's FP8 form.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>

#include "common/error.h"
#include "jit/compiler.h"
#include "jit/nvrtc_api.h"
#include "mlajit/mlajit.hpp"
#include "ops/kernel_configs.h"
#include "ops/mla_prefill.h"
#include "ops/ops.h"
#include "planner/planner.h"
#include "reference/fp8.h"
#include "support/expect_invalid.h"

using namespace mlajit;
using mlajit::test::has;
using mlajit::test::invalid;
namespace R = mlajit::ref;

namespace {

void* fake(uintptr_t n) { return reinterpret_cast<void*>(0x100000 * n); }
mlajit_tensor t(void* data, mlajit_dtype dt, std::initializer_list<int64_t> shape) { return contiguous_tensor(data, dt, shape); }

// The kernels' encoder, ported statement by statement (PTX add.rn / mul.rn are float + and * here).
uint8_t kernel_encode(float x) {
    const uint32_t bits = std::bit_cast<uint32_t>(x);
    const uint32_t sign = (bits >> 24) & 0x80u;
    const uint32_t mag = bits & 0x7fffffffu;
    if (mag > 0x7f800000u) return 0x7f;
    if (mag >= 0x43e00000u) return uint8_t(sign | 0x7eu);
    if (mag < 0x3c800000u) {
        const float q = std::bit_cast<float>(mag) * 512.f;
        const float r = q + 8388608.f;
        return uint8_t(sign | (std::bit_cast<uint32_t>(r) - 0x4b000000u));
    }
    const uint32_t rounded = mag + 0x7ffffu + ((mag >> 20) & 1u);
    const uint32_t code = ((rounded >> 23) - 120u) << 3 | ((rounded >> 20) & 7u);
    return uint8_t(sign | code);
}
float kernel_decode(uint32_t c) {
    const uint32_t mag = c & 0x7fu;
    float v;
    if (mag == 0x7fu) v = std::bit_cast<float>(0x7fc00000u);
    else if (mag < 8u) v = float(mag) * 0.001953125f;
    else v = std::bit_cast<float>(((mag >> 3) + 120u) << 23 | (mag & 7u) << 20);
    return (c & 0x80u) ? -v : v;
}

bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

}  // namespace

TEST_CASE("fp8: all 256 e4m3fn codes decode to the format's values") {
    // The table written out from the definition, independently of e4m3_value: exponent field e, mantissa m.
    int nans = 0;
    for (int c = 0; c < 256; ++c) {
        CAPTURE(c);
        const int e = (c >> 3) & 15, m = c & 7;
        const double sign = c & 0x80 ? -1.0 : 1.0;
        double want;
        if (e == 15 && m == 7) want = std::nan("");
        else if (e == 0) want = sign * m * std::pow(2.0, -9);          // subnormal: m/8 * 2^(1-7)
        else want = sign * (8 + m) * std::pow(2.0, e - 7 - 3);         // (1 + m/8) * 2^(e-7)
        const double got = R::e4m3_value(uint8_t(c));
        if (std::isnan(want)) {
            ++nans;
            CHECK(std::isnan(got));
            CHECK(std::isnan(kernel_decode(uint32_t(c))));
            continue;
        }
        CHECK(got == want);
        CHECK(std::signbit(got) == bool(c & 0x80));  // -0 is 0x80
        CHECK(same(kernel_decode(uint32_t(c)), float(want)));
        // Every finite code is a fixed point of both encoders.
        CHECK(R::e4m3_encode(float(want)) == c);
        CHECK(kernel_encode(float(want)) == c);
    }
    CHECK(nans == 2);
    CHECK(R::e4m3_value(0x7e) == 448.0);
    CHECK(R::e4m3_value(0x01) == std::ldexp(1.0, -9));  // smallest subnormal
    CHECK(R::e4m3_value(0x08) == std::ldexp(1.0, -6));  // smallest normal
}

TEST_CASE("fp8: encoding rounds to nearest even and saturates") {
    for (int c = 0; c < 0x7e; ++c) {
        CAPTURE(c);
        const double lo = R::e4m3_value(uint8_t(c)), hi = R::e4m3_value(uint8_t(c + 1)), mid = (lo + hi) / 2;
        const uint8_t even = (c % 2 == 0) ? uint8_t(c) : uint8_t(c + 1);
        CHECK(R::e4m3_encode(float(mid)) == even);  // a tie: the even mantissa
        CHECK(R::e4m3_encode(std::nextafter(float(mid), 0.f)) == c);
        CHECK(R::e4m3_encode(std::nextafter(float(mid), 1e9f)) == c + 1);
        CHECK(R::e4m3_encode(-float(mid)) == (0x80 | even));
    }
    CHECK(R::e4m3_encode(448.f) == 0x7e);
    CHECK(R::e4m3_encode(463.99f) == 0x7e);
    CHECK(R::e4m3_encode(500.f) == 0x7e);  // saturating, not NaN
    CHECK(R::e4m3_encode(INFINITY) == 0x7e);
    CHECK(R::e4m3_encode(-INFINITY) == 0xfe);
    CHECK(R::e4m3_encode(NAN) == 0x7f);
    CHECK(R::e4m3_encode(1e-30f) == 0x00);
    CHECK(R::e4m3_encode(-1e-30f) == 0x80);
    CHECK(R::e4m3_encode(std::ldexp(1.f, -10)) == 0x00);                      // half the smallest step: even
    CHECK(R::e4m3_encode(std::ldexp(3.f, -10)) == 0x02);                      // 1.5 steps: even (2)
}

TEST_CASE("fp8: the kernels' bit-level encoder equals the reference on every bf16 value and a float sweep") {
    int64_t checked = 0, bad = 0;
    auto check_one = [&](float x) {
        ++checked;
        if (kernel_encode(x) != R::e4m3_encode(x) && bad++ < 5) FAIL_CHECK("x = " << x << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(x) << ")");
    };
    for (uint32_t b = 0; b < 65536; ++b) check_one(R::bf16_to_float(uint16_t(b)));  // every input the writer sees / scale = 1
    for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 4099) check_one(std::bit_cast<float>(uint32_t(bits)));
    for (uint32_t bits = 0x3c000000u; bits < 0x44000000u; bits += 7) check_one(std::bit_cast<float>(bits));  // near 2^-7 .. 512, dense
    CHECK(bad == 0);
    MESSAGE("kernel encoder vs reference: " << checked << " floats, " << bad << " differ");
}

TEST_CASE("fp8: a quantized row holds codes, scales and k_pe where the layout says") {
    R::Rng rng;
    auto kv = rng.normal_bf16(512, 3.0);
    auto pe = rng.normal_bf16(64, 1.0);
    kv[5] = R::float_to_bf16(-40.f);        // group 0's amax
    for (int i = 128; i < 256; ++i) kv[size_t(i)] = 0;  // group 1 all zero: scale 1, codes 0
    std::vector<uint8_t> row(656);
    R::quantize_fp8_row(kv.data(), pe.data(), row.data());
    CHECK(R::fp8_row_scale(row.data(), 0) == 40.f / 448.f);
    CHECK(row[5] == 0xfe);                  // -448
    CHECK(R::fp8_row_scale(row.data(), 1) == 1.f);
    for (int i = 128; i < 256; ++i) CHECK(row[size_t(i)] == 0);
    CHECK(std::memcmp(row.data() + 528, pe.data(), 128) == 0);
    std::vector<uint16_t> back(576);
    R::dequantize_fp8_row(row.data(), back.data());
    double worst = 0;
    for (int i = 0; i < 512; ++i) {
        const double x = R::bf16_to_double(kv[size_t(i)]), d = R::bf16_to_double(back[size_t(i)]);
        const double s = R::fp8_row_scale(row.data(), i / 128);
        CHECK(std::fabs(x - d) <= R::fp8_error_bound(x, s));
        worst = std::max(worst, std::fabs(x - d) / std::max(std::fabs(x), 1e-30));
    }
    for (int i = 0; i < 64; ++i) CHECK(back[size_t(512 + i)] == pe[size_t(i)]);
    MESSAGE("FIGURE fp8 round trip of one N(0, 3) row: worst relative error " << worst);
}

namespace {
mlajit_quantize_latent_cache_args good_quant() {
    mlajit_quantize_latent_cache_args a = MLAJIT_ARGS_INIT(mlajit_quantize_latent_cache_args);
    a.kv_c = t(fake(1), MLAJIT_BF16, {300, 512});
    a.k_pe = t(fake(2), MLAJIT_BF16, {300, 64});
    a.slot_mapping = t(fake(3), MLAJIT_INT32, {300});
    a.kv_cache = t(fake(4), MLAJIT_UINT8, {10, 64, 656});
    return a;
}
const Arch kArch = Arch::parse("sm_90a");
}  // namespace

TEST_CASE("fp8: the writer's arguments are checked on the host") {
    auto plan = plan_quantize_cache(kArch, good_quant());
    CHECK(plan.spec == quantize_cache_spec(kArch));
    CHECK(plan.params.tokens == 300);
    CHECK(plan.params.block_size == 64);
    CHECK(plan.params.num_blocks == 10);
    CHECK(plan.params.tok_stride == 656);
    CHECK(plan.params.page_stride == 64 * 656);
    CHECK(plan.grid.x == (300 + 7) / 8);
    CHECK(plan.threads == 256);
    // Strided sources (kv_c / k_pe as views of one packed [T, 576] row) are fine.
    auto a = good_quant();
    a.kv_c = strided_tensor(fake(1), MLAJIT_BF16, {300, 512}, {576, 1});
    a.k_pe = strided_tensor(static_cast<char*>(fake(1)) + 1024, MLAJIT_BF16, {300, 64}, {576, 1});
    CHECK(plan_quantize_cache(kArch, a).params.kvc_stride == 576);

    struct Bad {
        const char* what;
        void (*edit)(mlajit_quantize_latent_cache_args&);
        const char* names;
    };
    const Bad bad[] = {
        {"last dim 576 (bf16 pages)", [](auto& x) { x.kv_cache = t(fake(4), MLAJIT_BF16, {10, 64, 576}); }, "fp8_ds_mla"},
        {"last dim 640", [](auto& x) { x.kv_cache = t(fake(4), MLAJIT_UINT8, {10, 64, 640}); }, "656"},
        {"cache dtype int32", [](auto& x) { x.kv_cache = t(fake(4), MLAJIT_INT32, {10, 64, 656}); }, "uint8"},
        {"cache 2-D", [](auto& x) { x.kv_cache = t(fake(4), MLAJIT_UINT8, {640, 656}); }, "kv_cache"},
        {"no pages", [](auto& x) { x.kv_cache = t(fake(4), MLAJIT_UINT8, {0, 64, 656}); }, "num_blocks"},
        {"row stride not 16-byte", [](auto& x) { x.kv_cache = strided_tensor(fake(4), MLAJIT_UINT8, {10, 64, 656}, {64 * 664, 660, 1}); }, "16 bytes"},
        {"cache pointer unaligned", [](auto& x) { x.kv_cache.data = static_cast<char*>(fake(4)) + 8; }, "aligned"},
        {"slots beyond int32", [](auto& x) { x.kv_cache = t(fake(4), MLAJIT_UINT8, {1 << 20, 4096, 656}); }, "int32"},
        {"kv_c 576 wide", [](auto& x) { x.kv_c = t(fake(1), MLAJIT_BF16, {300, 576}); }, "kv_c"},
        {"kv_c fp32", [](auto& x) { x.kv_c = t(fake(1), MLAJIT_FP32, {300, 512}); }, "kv_c"},
        {"k_pe tokens differ", [](auto& x) { x.k_pe = t(fake(2), MLAJIT_BF16, {299, 64}); }, "k_pe"},
        {"k_pe missing", [](auto& x) { x.k_pe = mlajit_tensor{}; }, "k_pe"},
        {"slot_mapping length", [](auto& x) { x.slot_mapping = t(fake(3), MLAJIT_INT32, {301}); }, "slot_mapping"},
        {"slot_mapping int64-ish", [](auto& x) { x.slot_mapping = t(fake(3), MLAJIT_UINT32, {300}); }, "slot_mapping"},
        {"no cache", [](auto& x) { x.kv_cache = mlajit_tensor{}; }, "kv_cache"},
    };
    for (const Bad& b : bad) {
        CAPTURE(b.what);
        auto x = good_quant();
        b.edit(x);
        const std::string m = invalid([&] { plan_quantize_cache(kArch, x); });
        CHECK_MESSAGE(has(m, b.names), m);
    }
    // Through the C ABI: the size rules and a NULL handle (nothing launches on this machine).
    auto x = good_quant();
    CHECK(mlajit_quantize_latent_cache(nullptr, &x, nullptr) == MLAJIT_ERROR_INVALID_ARGUMENT);
    x.struct_size = 8;
    CHECK(mlajit_quantize_latent_cache(nullptr, &x, nullptr) == MLAJIT_ERROR_INVALID_ARGUMENT);
    CHECK(has(mlajit_last_error(), "struct_size"));
    CHECK(mlajit_quantize_latent_cache(nullptr, nullptr, nullptr) == MLAJIT_ERROR_INVALID_ARGUMENT);
}

namespace {
const int32_t kCuQ[] = {0, 100, 300, 300, 1300};
const int32_t kCuK[] = {0, 150, 800, 900, 9900};
mlajit_mla_prefill_args fp8_args() {
    mlajit_mla_prefill_args a = MLAJIT_ARGS_INIT(mlajit_mla_prefill_args);
    a.q_nope = t(fake(1), MLAJIT_BF16, {1300, 16, 128});
    a.q_pe = t(fake(2), MLAJIT_BF16, {1300, 16, 64});
    a.kv_cache = t(fake(30), MLAJIT_UINT8, {600, 64, 656});
    a.block_table = t(fake(31), MLAJIT_INT32, {4, 141});
    a.w_kv_b = t(fake(5), MLAJIT_BF16, {16 * 256, 512});
    a.indices = t(fake(6), MLAJIT_INT32, {1300, 2048});
    a.cu_seqlens_q = t(fake(7), MLAJIT_INT32, {5});
    a.cu_seqlens_k = t(fake(8), MLAJIT_INT32, {5});
    a.cu_seqlens_q_host = kCuQ;
    a.cu_seqlens_k_host = kCuK;
    a.out = t(fake(9), MLAJIT_BF16, {1300, 16, 128});
    a.sm_scale = 0.07f;
    a.force_path = -1;
    return a;
}
}  // namespace

TEST_CASE("fp8: the one call takes the FP8 cache, checks it, and sizes the same workspace as bf16 pages") {
    auto a = fp8_args();
    const MlaShapes s = check_mla_args(a, true);
    CHECK(s.paged);
    CHECK(s.kv_fp8);
    CHECK(s.block_size == 64);
    CHECK(s.num_blocks == 600);
    // The MHA steps gather (and dequantize) their run's keys into the same bf16 buffer as from bf16 pages;
    // the sparse steps read bf16 pages in place but gather the FP8 ones: only a sparse step's layout grows.
    auto b = a;
    b.kv_cache = t(fake(30), MLAJIT_BF16, {600, 64, 576});
    const MlaShapes sb = check_mla_args(b, true);
    CHECK_FALSE(sb.kv_fp8);
    const std::vector<Path> paths = {Path::dense_mha, Path::masked_mha, Path::masked_mha, Path::dense_mha};
    CHECK(schedule_mla(s, kCuQ, kCuK, paths).workspace_bytes == schedule_mla(sb, kCuQ, kCuK, paths).workspace_bytes);
    const std::vector<Path> all_sparse(4, Path::sparse_mqa);
    for (const MlaStep& st : schedule_mla(s, kCuQ, kCuK, all_sparse).steps) CHECK(step_layout(s, st).kv_pack > 0);
    for (const MlaStep& st : schedule_mla(sb, kCuQ, kCuK, all_sparse).steps) CHECK((step_layout(sb, st).kv_pack > 0) == st.chunk);
    // A request too large for one sparse step runs in chunks whose latent rows are gathered (dequantized
    // from the FP8 pages) into kv_pack by the first chunk, as whole-request sparse steps gather theirs.
    MlaLimits small;
    small.mqa_chunk_bytes = size_t(1) << 20;
    const std::vector<Path> sparse(4, Path::sparse_mqa);
    int chunks = 0;
    for (const MlaStep& st : schedule_mla(s, kCuQ, kCuK, sparse, small).steps) {
        chunks += st.chunk;
        CHECK(step_layout(s, st).kv_pack > 0);
    }
    CHECK(chunks > 1);
    // The size query takes NULL pointers.
    a.kv_cache.data = nullptr;
    a.block_table.data = nullptr;
    CHECK(check_mla_args(a, false).kv_fp8);

    struct Bad {
        const char* what;
        void (*edit)(mlajit_mla_prefill_args&);
        const char* names;
    };
    const Bad bad[] = {
        {"uint8 rows of 576", [](auto& x) { x.kv_cache = t(fake(30), MLAJIT_UINT8, {600, 64, 576}); }, "656"},
        {"bf16 rows of 656", [](auto& x) { x.kv_cache = t(fake(30), MLAJIT_BF16, {600, 64, 656}); }, "MLAJIT_UINT8"},
        {"fp32 pages", [](auto& x) { x.kv_cache = t(fake(30), MLAJIT_FP32, {600, 64, 656}); }, "kv_cache"},
        {"row stride not 16-byte", [](auto& x) { x.kv_cache = strided_tensor(fake(30), MLAJIT_UINT8, {600, 64, 656}, {64 * 660, 660, 1}); }, "16 bytes"},
        {"too few table columns", [](auto& x) { x.block_table = t(fake(31), MLAJIT_INT32, {4, 140}); }, "141"},
        {"table rows", [](auto& x) { x.block_table = t(fake(31), MLAJIT_INT32, {3, 141}); }, "block_table"},
        {"and kv_c too", [](auto& x) { x.kv_c = t(fake(3), MLAJIT_BF16, {9900, 512}); }, "not both"},
    };
    for (const Bad& bd : bad) {
        CAPTURE(bd.what);
        auto x = fp8_args();
        bd.edit(x);
        const std::string m = invalid([&] { check_mla_args(x, true); });
        CHECK_MESSAGE(has(m, bd.names), m);
    }
}

TEST_CASE("fp8: the planner routes the FP8 cache as the bf16 one (both paths gather and dequantize the same keys)") {
    CHECK(kv_format_mqa_factor(KvFormat::bf16, 16) == 1.0);
    for (int heads : {16, 32, 64, 128}) CHECK(kv_format_mqa_factor(KvFormat::fp8, heads) == 1.0);
    PlannerOptions o;
    o.heads = 16;
    o.topk = 2048;
    Planner bf(o);
    o.kv_format = KvFormat::fp8;
    Planner fp(o);
    for (long sk = 2304; sk <= 65536; sk += 1280) {
        const Request q{1024, sk};
        CAPTURE(sk);
        const auto pb = bf.predict(q, true), pf = fp.predict(q, true);
        CHECK(pf.mha_ms == pb.mha_ms);
        CHECK(pf.mqa_ms == pb.mqa_ms);
        CHECK(bf.plan(std::span(&q, 1)).requests[0].path == fp.plan(std::span(&q, 1)).requests[0].path);
    }
}

TEST_CASE("fp8: the gather's FP8 variant compiles to its own code (the spec's KV_FP8 reaches the kernel)") {
    // The FP8 variant once compiled as the bf16 copy (an #if on a constexpr spec value is always 0): a spec
    // parameter that does not change the cubin is a bug this catches without a GPU.
    REQUIRE_MESSAGE(nvrtc_available(), "NVRTC is needed for this test (CUDA toolkit at /usr/local/cuda)");
    for (const char* arch : {"sm_80", "sm_90a"}) {
        CAPTURE(arch);
        auto compile = [&](bool fp8) {
            auto k = prepare_kernel(paged_gather_spec(Arch::parse(arch), fp8), kernel_files(), {}, nvrtc().major, nvrtc().minor);
            return compile_kernel(k).cubin;
        };
        const auto bf16 = compile(false), fp8 = compile(true);
        CHECK(bf16 != fp8);
        // The dequantization (16 decodes and multiplies per chunk) is code the copy does not have.
        CHECK_MESSAGE(fp8.size() > bf16.size() + 2048, "cubin bytes: bf16 " << bf16.size() << ", fp8 " << fp8.size());
    }
    CHECK(paged_gather_spec(Arch::parse("sm_90a"), true) != paged_gather_spec(Arch::parse("sm_90a"), false));
}
