#include "path_timer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "cuda/driver_api.h"
#include "device_timing.h"
#include "mlajit/mlajit.hpp"
#include "reference/bf16.h"

namespace mlajit::cli {

namespace {

struct DevMem {
    CUdeviceptr p = 0;
    size_t bytes = 0;
    void alloc(size_t n) {
        if (p) driver().cuMemFree(p);
        p = 0;
        bytes = 0;
        MLAJIT_CU(cuMemAlloc(&p, std::max<size_t>(n, 256)), "allocating calibration buffers (is the GPU busy?)");
        bytes = n;
    }
    ~DevMem() {
        if (p) driver().cuMemFree(p);
    }
    void* get() const { return reinterpret_cast<void*>(p); }
    template <typename T>
    void upload(const std::vector<T>& h) {
        if (h.size() * sizeof(T) > bytes) alloc(h.size() * sizeof(T));
        MLAJIT_CU(cuMemcpyHtoD(p, h.data(), h.size() * sizeof(T)), "uploading calibration inputs");
        // A pageable cuMemcpyHtoD may return before its DMA lands; the timer's non-blocking stream does not
        // wait for it.
        MLAJIT_CU(cuCtxSynchronize(), "waiting for the calibration inputs");
    }
};

void* at(void* p, size_t bytes) { return static_cast<char*>(p) + bytes; }

}  // namespace

struct PathTimer::Buffers {
    std::unique_ptr<Runtime> rt;
    CUstream stream = nullptr;
    CUevent start = nullptr, stop = nullptr;
    DevMem q, kv, w, idx, out, lse, cu_q, cu_k, ws;
};

std::vector<int32_t> spread_topk_indices(long s_q, long s_k, int topk, uint64_t seed) {
    ref::Rng rng(seed);
    std::vector<int32_t> idx(size_t(s_q) * size_t(topk), -1);
    for (long i = 0; i < s_q; ++i) {
        int32_t* row = idx.data() + size_t(i) * size_t(topk);
        const long n = s_k - s_q + i + 1;  // causal prefix of query i
        if (n <= topk) {
            for (long j = 0; j < n; ++j) row[j] = int32_t(j);
            continue;
        }
        for (long j = 0; j < topk; ++j) {
            const long lo = j * n / topk, hi = (j + 1) * n / topk;  // slices are non-empty since n > topk
            row[j] = int32_t(lo + long(rng.uniform_int(0, hi - lo - 1)));
        }
    }
    return idx;
}

PathTimer::PathTimer(int max_heads, long max_s_q, long max_s_k, int topk, uint64_t seed)
    : b_(std::make_unique<Buffers>()), max_heads_(max_heads), topk_(topk), max_s_q_(max_s_q), max_s_k_(max_s_k), seed_(seed) {
    driver();  // the clear no-GPU error first
    b_->rt = std::make_unique<Runtime>(0);
    gpu_name_ = tools::open_gpu0().name;
    MLAJIT_CU(cuStreamCreate(&b_->stream, CU_STREAM_NON_BLOCKING), "creating a stream");
    MLAJIT_CU(cuEventCreate(&b_->start, 0), "creating an event");
    MLAJIT_CU(cuEventCreate(&b_->stop, 0), "creating an event");
    // Random inputs (never zeros: the kernels' speed must not depend on easy data); W scaled so the
    // projected K/V and absorbed queries stay O(1) like a model's.
    ref::Rng rng(seed);
    b_->q.upload(rng.normal_bf16(size_t(max_s_q) * max_heads * 192, 1.0));
    b_->kv.upload(rng.normal_bf16(size_t(max_s_k) * 576, 1.0));
    b_->w.upload(rng.normal_bf16(size_t(max_heads) * 256 * 512, 1.0 / std::sqrt(512.0)));
    b_->out.alloc(size_t(max_s_q) * max_heads * 128 * 2);
    b_->lse.alloc(size_t(max_s_q) * max_heads * 4);
    b_->cu_q.alloc(8);
    b_->cu_k.alloc(8);
}

PathTimer::~PathTimer() {
    if (b_->start) driver().cuEventDestroy(b_->start);
    if (b_->stop) driver().cuEventDestroy(b_->stop);
    if (b_->stream) driver().cuStreamDestroy(b_->stream);
}

std::string PathTimer::driver_version() const {
    const int v = driver().driver_version;
    return fmt::format("CUDA {}.{}", v / 1000, (v % 1000) / 10);
}

void PathTimer::prepare_indices(long s_q, long s_k) {
    if (s_q == idx_s_q_ && s_k == idx_s_k_) return;
    b_->idx.upload(spread_topk_indices(s_q, s_k, topk_, seed_ ^ uint64_t(s_q * 1000003 + s_k)));
    b_->cu_q.upload(std::vector<int32_t>{0, int32_t(s_q)});
    b_->cu_k.upload(std::vector<int32_t>{0, int32_t(s_k)});
    idx_s_q_ = s_q;
    idx_s_k_ = s_k;
}

double PathTimer::time_path(int heads, long s_q, long s_k, mlajit_path path, int reps) {
    if (heads > max_heads_ || s_q > max_s_q_ || s_k > max_s_k_ || s_q > s_k)
        throw std::invalid_argument(fmt::format("calibration shape h {} s_q {} s_k {} is outside the buffers", heads, s_q, s_k));
    prepare_indices(s_q, s_k);
    const int32_t cu_q[2] = {0, int32_t(s_q)}, cu_k[2] = {0, int32_t(s_k)};
    const int64_t h = heads;
    mlajit_mla_prefill_args a = MLAJIT_ARGS_INIT(mlajit_mla_prefill_args);
    a.q_nope = strided_tensor(b_->q.get(), MLAJIT_BF16, {s_q, h, 128}, {h * 192, 192, 1});
    a.q_pe = strided_tensor(at(b_->q.get(), 256), MLAJIT_BF16, {s_q, h, 64}, {h * 192, 192, 1});
    a.kv_c = strided_tensor(b_->kv.get(), MLAJIT_BF16, {s_k, 512}, {576, 1});
    a.k_pe = strided_tensor(at(b_->kv.get(), 1024), MLAJIT_BF16, {s_k, 64}, {576, 1});
    a.w_kv_b = contiguous_tensor(b_->w.get(), MLAJIT_BF16, {h * 256, 512});
    a.indices = contiguous_tensor(b_->idx.get(), MLAJIT_INT32, {s_q, topk_});
    a.cu_seqlens_q = contiguous_tensor(b_->cu_q.get(), MLAJIT_INT32, {2});
    a.cu_seqlens_k = contiguous_tensor(b_->cu_k.get(), MLAJIT_INT32, {2});
    a.cu_seqlens_q_host = cu_q;
    a.cu_seqlens_k_host = cu_k;
    a.out = contiguous_tensor(b_->out.get(), MLAJIT_BF16, {s_q, h, 128});
    a.lse = contiguous_tensor(b_->lse.get(), MLAJIT_FP32, {s_q, h});
    a.sm_scale = float(1.0 / std::sqrt(192.0));
    a.force_path = path;
    size_t need = 0;
    check(mlajit_mla_prefill_workspace_size(b_->rt->get(), &a, &need));
    if (need > b_->ws.bytes) b_->ws.alloc(need);
    a.workspace = b_->ws.get();
    a.workspace_bytes = b_->ws.bytes;
    check(mlajit_mla_prefill(b_->rt->get(), &a, b_->stream));  // untimed: loads (or compiles) the kernels
    MLAJIT_CU(cuStreamSynchronize(b_->stream), "waiting for the untimed call");
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
        MLAJIT_CU(cuEventRecord(b_->start, b_->stream), "recording an event");
        check(mlajit_mla_prefill(b_->rt->get(), &a, b_->stream));
        MLAJIT_CU(cuEventRecord(b_->stop, b_->stream), "recording an event");
        MLAJIT_CU(cuEventSynchronize(b_->stop), "waiting for a timed call");
        float t = 0;
        MLAJIT_CU(cuEventElapsedTime(&t, b_->start, b_->stop), "reading an event");
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

PathTimes PathTimer::measure(const AttnShape& s, int reps) {
    PathTimes t;
    t.mha_ms = time_path(s.heads, s.s_q, s.s_k, s.s_k <= topk_ ? MLAJIT_PATH_DENSE_MHA : MLAJIT_PATH_MASKED_MHA, reps);
    t.mqa_ms = time_path(s.heads, s.s_q, s.s_k, MLAJIT_PATH_SPARSE_MQA, reps);
    return t;
}

}  // namespace mlajit::cli
