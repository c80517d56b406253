// Every op validates its arguments on the host before anything launches; these checks need no GPU
// (plans are built from the descriptors alone). Each bad argument must give INVALID_ARGUMENT with a
// message naming the argument, the expected and the got.
#include <doctest/doctest.h>

#include "common/error.h"
#include "mlajit/mlajit.hpp"
#include "ops/ops.h"
#include "support/expect_invalid.h"

using namespace mlajit;
using mlajit::test::has;
using mlajit::test::invalid;

namespace {
// Fake, suitably aligned device addresses: plans never dereference them.
void* fake(uintptr_t n) { return reinterpret_cast<void*>(0x100000 * n); }

mlajit_tensor t(void* data, mlajit_dtype dt, std::initializer_list<int64_t> shape) {
    return contiguous_tensor(data, dt, shape);
}

const Arch kArch = Arch::parse("sm_90a");
const int32_t kCuQ[] = {0, 100, 300};
const int32_t kCuK[] = {0, 150, 800};

mlajit_mha_args good_mha() {
    mlajit_mha_args a = MLAJIT_ARGS_INIT(mlajit_mha_args);
    a.q = t(fake(1), MLAJIT_BF16, {300, 16, 192});
    a.k_nope = t(fake(2), MLAJIT_BF16, {800, 16, 128});
    a.k_pe = t(fake(3), MLAJIT_BF16, {800, 64});
    a.v = t(fake(4), MLAJIT_BF16, {800, 16, 128});
    a.out = t(fake(5), MLAJIT_BF16, {300, 16, 128});
    a.lse = t(fake(6), MLAJIT_FP32, {300, 16});
    a.cu_seqlens_q = t(fake(7), MLAJIT_INT32, {3});
    a.cu_seqlens_k = t(fake(8), MLAJIT_INT32, {3});
    a.cu_seqlens_q_host = kCuQ;
    a.cu_seqlens_k_host = kCuK;
    a.sm_scale = 0.07f;
    return a;
}

mlajit_sparse_mqa_args good_mqa() {
    mlajit_sparse_mqa_args a = MLAJIT_ARGS_INIT(mlajit_sparse_mqa_args);
    a.q = t(fake(1), MLAJIT_BF16, {300, 16, 576});
    a.kv = t(fake(2), MLAJIT_BF16, {800, 576});
    a.indices = t(fake(3), MLAJIT_INT32, {300, 2048});
    a.out = t(fake(4), MLAJIT_BF16, {300, 16, 512});
    a.lse = t(fake(5), MLAJIT_FP32, {300, 16});
    a.max_logits = t(fake(6), MLAJIT_FP32, {300, 16});
    a.sm_scale = 0.07f;
    return a;
}


}  // namespace

TEST_CASE("validation: good MHA arguments plan a launch matching the spec") {
    auto plan = plan_mha(kArch, good_mha());
    CHECK(plan.spec.family == Family::mha_fwd);
    CHECK(plan.grid.y == 16);
    CHECK(plan.grid.z == 2);
    CHECK(plan.grid.x == (unsigned)((200 + plan.spec.p[0] - 1) / plan.spec.p[0]));  // longest request: 200 queries
    CHECK(plan.params.max_seqlen_k == 650);
    CHECK(plan.params.kp_stride_head == 0);  // shared k_pe
    CHECK(plan.params.mask == nullptr);
}

TEST_CASE("validation: bad MHA arguments are named") {
    {
        auto a = good_mha();
        a.q.shape[2] = 128;
        auto m = invalid([&] { plan_mha(kArch, a); });
        CHECK(has(m, "q:"));
        CHECK(has(m, "192"));
        CHECK(has(m, "128"));
    }
    {
        auto a = good_mha();
        a.v.dtype = MLAJIT_FP32;
        auto m = invalid([&] { plan_mha(kArch, a); });
        CHECK(has(m, "v:"));
        CHECK(has(m, "bf16"));
    }
    {
        auto a = good_mha();
        a.out.data = nullptr;
        CHECK(has(invalid([&] { plan_mha(kArch, a); }), "out:"));
    }
    {
        auto a = good_mha();
        a.q.stride[2] = 2;
        CHECK(has(invalid([&] { plan_mha(kArch, a); }), "contiguous"));
    }
    {
        auto a = good_mha();
        a.k_nope.stride[0] = 16 * 128 + 4;  // 8-byte row pitch breaks 16-byte vector loads
        CHECK(has(invalid([&] { plan_mha(kArch, a); }), "16 bytes"));
    }
    {
        auto a = good_mha();
        a.q.data = static_cast<char*>(a.q.data) + 2;
        CHECK(has(invalid([&] { plan_mha(kArch, a); }), "aligned"));
    }
    {
        static const int32_t bad[] = {0, 250, 200};
        auto a = good_mha();
        a.cu_seqlens_q_host = bad;
        CHECK(has(invalid([&] { plan_mha(kArch, a); }), "non-decreasing"));
    }
    {
        static const int32_t bad[] = {0, 100, 299};
        auto a = good_mha();
        a.cu_seqlens_q_host = bad;
        CHECK(has(invalid([&] { plan_mha(kArch, a); }), "300 tokens"));
    }
    {
        auto a = good_mha();
        a.cu_seqlens_k_host = nullptr;
        CHECK(has(invalid([&] { plan_mha(kArch, a); }), "cu_seqlens_k_host"));
    }
    {
        auto a = good_mha();
        a.k = t(fake(9), MLAJIT_BF16, {800, 16, 192});
        CHECK(has(invalid([&] { plan_mha(kArch, a); }), "not both"));
    }
    {
        auto a = good_mha();
        a.mask = t(fake(9), MLAJIT_UINT32, {300, 20});  // 650 keys need 21 words
        auto m = invalid([&] { plan_mha(kArch, a); });
        CHECK(has(m, "mask"));
        CHECK(has(m, "21"));
    }
    {
        auto a = good_mha();
        a.sm_scale = -1.f;
        CHECK(has(invalid([&] { plan_mha(kArch, a); }), "sm_scale"));
    }
}

TEST_CASE("validation: sparse MQA") {
    auto plan = plan_sparse_mqa(kArch, good_mqa());
    CHECK(plan.grid.x == 300);
    CHECK(plan.spec.p[0] == 16);  // 16 heads take the 16-head tile, not a padded 64
    CHECK(plan.grid.y == 1);
    {
        auto a = good_mqa();
        a.indices = t(fake(3), MLAJIT_INT32, {300, 100});
        auto m = invalid([&] { plan_sparse_mqa(kArch, a); });
        CHECK(has(m, "topk"));
        CHECK(has(m, "100"));
    }
    {
        auto a = good_mqa();
        a.q = t(fake(1), MLAJIT_BF16, {300, 129, 576});
        CHECK(has(invalid([&] { plan_sparse_mqa(kArch, a); }), "1..128"));
    }
    {
        auto a = good_mqa();
        a.kv = t(fake(2), MLAJIT_BF16, {800, 512});
        CHECK(has(invalid([&] { plan_sparse_mqa(kArch, a); }), "kv:"));
    }
    {
        auto a = good_mqa();
        a.lse = t(fake(5), MLAJIT_FP32, {299, 16});
        CHECK(has(invalid([&] { plan_sparse_mqa(kArch, a); }), "lse:"));
    }
    {
        auto a = good_mqa();
        a.cu_seqlens_q = t(fake(7), MLAJIT_INT32, {3});
        a.cu_seqlens_kv = t(fake(8), MLAJIT_INT32, {3});
        a.cu_seqlens_q_host = kCuQ;
        a.cu_seqlens_kv_host = nullptr;
        CHECK(has(invalid([&] { plan_sparse_mqa(kArch, a); }), "cu_seqlens_kv_host"));
    }
}

TEST_CASE("validation: top-k mask") {
    mlajit_topk_mask_args a = MLAJIT_ARGS_INIT(mlajit_topk_mask_args);
    a.indices = t(fake(1), MLAJIT_INT32, {300, 2048});
    a.cu_seqlens_q = t(fake(2), MLAJIT_INT32, {3});
    a.cu_seqlens_k = t(fake(3), MLAJIT_INT32, {3});
    a.cu_seqlens_q_host = kCuQ;
    a.cu_seqlens_k_host = kCuK;
    a.mask = t(fake(4), MLAJIT_UINT32, {300, 21});
    auto plan = plan_topk_mask(kArch, a);
    CHECK(plan.grid.y == 2);
    a.mask = t(fake(4), MLAJIT_UINT32, {300, 20});
    CHECK(has(invalid([&] { plan_topk_mask(kArch, a); }), "mlajit_topk_mask_words"));
    CHECK(mlajit_topk_mask_words(650) == 21);
    CHECK(mlajit_topk_mask_words(64) == 2);
    CHECK(mlajit_topk_mask_bytes(300, 650) == 300u * 21u * 4u);
}

TEST_CASE("validation: MHA and the mask accept a sub-batch (cu_seqlens[0] > 0), sparse MQA does not") {
    // The last request of kCuQ / kCuK on its own: tensors still indexed from token 0.
    const int32_t cu_q[] = {100, 300};
    const int32_t cu_k[] = {150, 800};
    auto a = good_mha();
    a.cu_seqlens_q.shape[0] = a.cu_seqlens_k.shape[0] = 2;
    a.cu_seqlens_q_host = cu_q;
    a.cu_seqlens_k_host = cu_k;
    auto plan = plan_mha(kArch, a);
    CHECK(plan.params.max_seqlen_q == 200);
    CHECK(plan.params.max_seqlen_k == 650);
    CHECK(plan.params.batch == 1);
    const int32_t negative[] = {-1, 300};
    a.cu_seqlens_q_host = negative;
    CHECK(has(invalid([&] { plan_mha(kArch, a); }), ">= 0"));

    auto m = good_mqa();
    m.cu_seqlens_q = t(fake(7), MLAJIT_INT32, {2});
    m.cu_seqlens_kv = t(fake(8), MLAJIT_INT32, {2});
    m.cu_seqlens_q_host = cu_q;
    m.cu_seqlens_kv_host = cu_k;
    CHECK(has(invalid([&] { plan_sparse_mqa(kArch, m); }), "must be 0"));
}
