// mlajit from C++, against the installed package (find_package(mlajit) or pkg-config mlajit):
// 1. everywhere: the planner's path per request of a DeepSeek-V3.2 prefill batch (no GPU needed);
// 2. where a GPU exists: the one-call MLA prefill (mlajit_mla_prefill) of a batch of two requests, one of
//    them over cached context, on fresh random data, once as the planner routes it and once forced onto
//    each path, every result checked against a float64 reference computed here (skipped, saying why,
//    elsewhere). Exit status 0 when everything that ran was right.
#include <mlajit/mlajit.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

#include "../cuda_driver.h"

namespace {

void plan() {
    const std::vector<int64_t> s_q = {512, 4096, 1024, 8192}, s_k = {512, 4096, 32768, 65536};
    const int n = int(s_q.size());
    std::vector<mlajit_path> paths(n);
    std::vector<double> mha_ms(n), mqa_ms(n);
    // 16 heads per rank: DeepSeek-V3.2's 128 heads at tensor parallelism 8.
    mlajit::check(mlajit_plan_prefill(nullptr, 16, 2048, n, s_q.data(), s_k.data(), paths.data(), mha_ms.data(),
                                      mqa_ms.data()));
    std::printf("planner (16 heads, top-k 2048):\n");
    for (int i = 0; i < n; ++i)
        std::printf("  s_q %6lld  s_k %6lld  -> %-10s (predicted MHA %.3f ms, MQA %.3f ms)\n", (long long)s_q[i],
                    (long long)s_k[i], mlajit_path_name(paths[i]), mha_ms[i], mqa_ms[i]);
}

// Device memory owned for the example's lifetime.
struct DeviceBuffer {
    example_cuda* cu;
    example_devptr ptr = 0;
    DeviceBuffer(example_cuda* c, size_t bytes) : cu(c) {
        if (cu->cuMemAlloc(&ptr, bytes) != 0) throw std::runtime_error("cuMemAlloc failed");
    }
    ~DeviceBuffer() { cu->cuMemFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void* get() const { return reinterpret_cast<void*>(uintptr_t(ptr)); }
    template <typename T>
    void upload(const std::vector<T>& v) { cu->cuMemcpyHtoD(ptr, v.data(), v.size() * sizeof(T)); }
};

constexpr int kHeads = 16, kNope = 128, kRope = 64, kLatent = 512, kV = 128, kTopk = 64;

struct Batch {  // the engine's names: cu_seqlens over query tokens and over each request's keys
    std::vector<int32_t> cu_q = {0, 24, 40};  // request 0: a fresh 24-token prompt
    std::vector<int32_t> cu_k = {0, 24, 64};  // request 1: 16 new tokens after 24 cached ones
    int batch() const { return int(cu_q.size()) - 1; }
    int total_q() const { return cu_q.back(); }
    int total_k() const { return cu_k.back(); }
};

std::vector<uint16_t> random_bf16(std::mt19937& g, size_t n, float scale) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = example_to_bf16(u(g));
    return v;
}
double f(uint16_t h) { return example_from_bf16(h); }

// float64 MLA prefill in the plain (non-absorbed) form: k_nope, v = kv_c . W_kv_b^T per head, causal
// attention with the queries of a request as the last s_q of its s_k keys. With top-k >= every s_k (and the
// indices listing the whole causal prefix), all three paths compute exactly this.
std::vector<double> reference(const Batch& b, const std::vector<uint16_t>& q, const std::vector<uint16_t>& kv,
                              const std::vector<uint16_t>& w, float sm_scale) {
    const int T = b.total_q(), Tk = b.total_k();
    std::vector<double> k_nope(size_t(Tk) * kHeads * kNope), v(size_t(Tk) * kHeads * kV);
    for (int j = 0; j < Tk; ++j)
        for (int h = 0; h < kHeads; ++h)
            for (int d = 0; d < kNope + kV; ++d) {
                double acc = 0;
                const uint16_t* wr = &w[(size_t(h) * 256 + d) * kLatent];
                for (int c = 0; c < kLatent; ++c) acc += f(kv[size_t(j) * 576 + c]) * f(wr[c]);
                if (d < kNope) k_nope[(size_t(j) * kHeads + h) * kNope + d] = acc;
                else v[(size_t(j) * kHeads + h) * kV + d - kNope] = acc;
            }
    std::vector<double> out(size_t(T) * kHeads * kV, 0.0);
    for (int r = 0; r < b.batch(); ++r) {
        const int s_q = b.cu_q[r + 1] - b.cu_q[r], s_k = b.cu_k[r + 1] - b.cu_k[r];
        for (int i = 0; i < s_q; ++i)
            for (int h = 0; h < kHeads; ++h) {
                const int t = b.cu_q[r] + i, keys = s_k - s_q + i + 1;
                const uint16_t* qr = &q[(size_t(t) * kHeads + h) * 192];
                std::vector<double> logit(keys);
                double m = -INFINITY, sum = 0;
                for (int j = 0; j < keys; ++j) {
                    const int jj = b.cu_k[r] + j;
                    double dot = 0;
                    for (int d = 0; d < kNope; ++d) dot += f(qr[d]) * k_nope[(size_t(jj) * kHeads + h) * kNope + d];
                    for (int d = 0; d < kRope; ++d) dot += f(qr[kNope + d]) * f(kv[size_t(jj) * 576 + kLatent + d]);
                    logit[j] = dot * sm_scale;
                    m = std::max(m, logit[j]);
                }
                double* o = &out[(size_t(t) * kHeads + h) * kV];
                for (int j = 0; j < keys; ++j) {
                    const double p = std::exp(logit[j] - m);
                    sum += p;
                    for (int d = 0; d < kV; ++d) o[d] += p * v[(size_t(b.cu_k[r] + j) * kHeads + h) * kV + d];
                }
                for (int d = 0; d < kV; ++d) o[d] /= sum;
            }
    }
    return out;
}

int checked_prefill(example_cuda* cu) {
    const Batch b;
    const int T = b.total_q(), Tk = b.total_k();
    const float sm_scale = 1.0f / std::sqrt(192.0f);
    std::random_device rd;
    const unsigned seed = rd();
    std::mt19937 g(seed);
    std::printf("checked mla_prefill: %d requests, %d query tokens, %d keys, %d heads, top-k %d (seed %u)\n",
                b.batch(), T, Tk, kHeads, kTopk, seed);

    // Packed layouts, as an engine holds them: q [T, h, 192] = [q_nope ; q_pe], latent cache [T_k, 576] =
    // [kv_c ; k_pe]; the descriptors below are strided views into them (no copy).
    const auto q = random_bf16(g, size_t(T) * kHeads * 192, 2.0f);
    const auto kv = random_bf16(g, size_t(Tk) * 576, 1.0f);
    const auto w = random_bf16(g, size_t(kHeads) * 256 * kLatent, 0.125f);
    // Indices: every key of each query's causal prefix, shuffled, padded with -1 to top-k.
    std::vector<int32_t> idx(size_t(T) * kTopk, -1);
    for (int r = 0; r < b.batch(); ++r) {
        const int s_q = b.cu_q[r + 1] - b.cu_q[r], s_k = b.cu_k[r + 1] - b.cu_k[r];
        for (int i = 0; i < s_q; ++i) {
            int32_t* row = &idx[size_t(b.cu_q[r] + i) * kTopk];
            for (int j = 0; j < s_k - s_q + i + 1; ++j) row[j] = j;
            std::shuffle(row, row + kTopk, g);
        }
    }
    const auto ref = reference(b, q, kv, w, sm_scale);

    DeviceBuffer dq(cu, q.size() * 2), dkv(cu, kv.size() * 2), dw(cu, w.size() * 2), didx(cu, idx.size() * 4),
        dcu_q(cu, b.cu_q.size() * 4), dcu_k(cu, b.cu_k.size() * 4), dout(cu, size_t(T) * kHeads * kV * 2);
    dq.upload(q);
    dkv.upload(kv);
    dw.upload(w);
    didx.upload(idx);
    dcu_q.upload(b.cu_q);
    dcu_k.upload(b.cu_k);

    using mlajit::strided_tensor;
    // Value-initialized (every tensor absent, every new field 0), then the size this header declares.
    // (MLAJIT_ARGS_INIT does the same but trips g++'s -Wmissing-field-initializers under -Wextra.)
    mlajit_mla_prefill_args a{};
    a.struct_size = sizeof a;
    a.q_nope = strided_tensor(dq.get(), MLAJIT_BF16, {T, kHeads, kNope}, {kHeads * 192, 192, 1});
    a.q_pe = strided_tensor(static_cast<uint16_t*>(dq.get()) + kNope, MLAJIT_BF16, {T, kHeads, kRope},
                            {kHeads * 192, 192, 1});
    a.kv_c = strided_tensor(dkv.get(), MLAJIT_BF16, {Tk, kLatent}, {576, 1});
    a.k_pe = strided_tensor(static_cast<uint16_t*>(dkv.get()) + kLatent, MLAJIT_BF16, {Tk, kRope}, {576, 1});
    a.w_kv_b = mlajit::contiguous_tensor(dw.get(), MLAJIT_BF16, {kHeads * 256, kLatent});
    a.indices = mlajit::contiguous_tensor(didx.get(), MLAJIT_INT32, {T, kTopk});
    a.topk = kTopk;  // the model's top-k (here the indices' width)
    a.cu_seqlens_q = mlajit::contiguous_tensor(dcu_q.get(), MLAJIT_INT32, {b.batch() + 1});
    a.cu_seqlens_k = mlajit::contiguous_tensor(dcu_k.get(), MLAJIT_INT32, {b.batch() + 1});
    a.cu_seqlens_q_host = b.cu_q.data();
    a.cu_seqlens_k_host = b.cu_k.data();
    a.out = mlajit::contiguous_tensor(dout.get(), MLAJIT_BF16, {T, kHeads, kV});
    a.sm_scale = sm_scale;
    std::vector<mlajit_path> taken(b.batch());
    a.paths_out = taken.data();

    mlajit::Runtime rt;  // the current context (made current by example_cuda_open)
    int bad = 0;
    for (int force : {-1, int(MLAJIT_PATH_DENSE_MHA), int(MLAJIT_PATH_MASKED_MHA), int(MLAJIT_PATH_SPARSE_MQA)}) {
        a.force_path = force;
        a.workspace = nullptr;
        a.workspace_bytes = 0;
        const size_t ws_bytes = rt.mla_prefill_workspace_size(a);
        DeviceBuffer ws(cu, ws_bytes ? ws_bytes : 256);
        a.workspace = ws.get();
        a.workspace_bytes = ws_bytes;
        cu->cuMemsetD8(dout.ptr, 0xFF, size_t(T) * kHeads * kV * 2);  // poison: NaN where nothing is written
        rt.mla_prefill(a, nullptr);
        cu->cuCtxSynchronize();
        std::vector<uint16_t> out(size_t(T) * kHeads * kV);
        cu->cuMemcpyDtoH(out.data(), dout.ptr, out.size() * 2);
        double worst = 0;
        bool ok = true;
        for (size_t i = 0; i < out.size(); ++i) {
            const double err = std::fabs(f(out[i]) - ref[i]);
            ok = ok && err <= 2e-2 + 2e-2 * std::fabs(ref[i]);  // bf16 out and bf16 k_nope/v; NaN fails
            if (!(err <= worst)) worst = err;
        }
        std::printf("  %-10s paths taken: %s, %s  workspace %zu B  max |out - ref| %.2e  %s\n",
                    force < 0 ? "planner" : mlajit_path_name(mlajit_path(force)), mlajit_path_name(taken[0]),
                    mlajit_path_name(taken[1]), ws_bytes, worst, ok ? "ok" : "WRONG");
        bad |= !ok;
    }
    std::printf("  on %s: %s\n", rt.arch().c_str(), bad ? "WRONG" : "all paths agree with the reference");
    return bad;
}

}  // namespace

int main() try {
    std::printf("mlajit %s (header %d.%d)\n", mlajit_version(), MLAJIT_VERSION_MAJOR, MLAJIT_VERSION_MINOR);
    plan();
    example_cuda cu{};
    char why[256];
    if (!example_cuda_open(&cu, why, sizeof why)) {
        std::printf("skipped the checked prefill: %s\n", why);
        return 0;
    }
    return checked_prefill(&cu);
} catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
}
