/* mlajit from C, against the installed package (find_package(mlajit) or pkg-config mlajit):
 * 1. everywhere: ask the planner which path each request of a DeepSeek-V3.2 prefill batch takes;
 * 2. where a GPU exists: one sparse MQA prefill on fresh random data, checked against a float64
 *    reference computed here (the GPU part is skipped, saying why, elsewhere).
 * Exit status 0 when everything that ran was right. */
#include <mlajit/mlajit.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../cuda_driver.h"

static int report(const char* call, mlajit_status s) {
    fprintf(stderr, "%s failed: %s: %s\n", call, mlajit_status_name(s), mlajit_last_error());
    return 1;
}

/* The planner needs no GPU: heads per rank, the model's top-k, and (s_q, s_k) per request. */
static int plan(void) {
    enum { N = 4 };
    const int64_t s_q[N] = {512, 4096, 1024, 8192};
    const int64_t s_k[N] = {512, 4096, 32768, 65536};
    mlajit_path paths[N];
    double mha_ms[N], mqa_ms[N];
    mlajit_status s = mlajit_plan_prefill(NULL, 128, 2048, N, s_q, s_k, paths, mha_ms, mqa_ms);
    if (s != MLAJIT_OK) return report("mlajit_plan_prefill", s);
    printf("planner (128 heads, top-k 2048):\n");
    for (int i = 0; i < N; ++i)
        printf("  s_q %6lld  s_k %6lld  -> %-10s (predicted MHA %.3f ms, MQA %.3f ms)\n", (long long)s_q[i],
               (long long)s_k[i], mlajit_path_name(paths[i]), mha_ms[i], mqa_ms[i]);
    return 0;
}

static uint64_t rng_state;
static float uniform(void) { /* xorshift64*, in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

static mlajit_tensor tensor(example_devptr p, mlajit_dtype dt, int ndim, const int64_t* shape) {
    mlajit_tensor t;
    int64_t stride = 1;
    memset(&t, 0, sizeof t);
    t.data = (void*)(uintptr_t)p;
    t.dtype = dt;
    t.ndim = ndim;
    for (int k = ndim - 1; k >= 0; --k) {
        t.shape[k] = shape[k];
        t.stride[k] = stride;
        stride *= shape[k];
    }
    return t;
}

/* Sparse MQA (FlashMLA sparse-prefill semantics): q [S_Q, H, 576], kv [S_KV, 576], indices [S_Q, TOPK]
 * -> out [S_Q, H, 512] (attention over the indexed rows' first 512 columns), lse [S_Q, H]. */
enum { S_Q = 8, H = 16, S_KV = 256, TOPK = 64, D = 576, DV = 512 };

static int checked_prefill(example_cuda* cu) {
    const float sm_scale = 1.0f / sqrtf(192.0f);
    const size_t nq = (size_t)S_Q * H * D, nkv = (size_t)S_KV * D, nidx = (size_t)S_Q * TOPK;
    const size_t nout = (size_t)S_Q * H * DV, nlse = (size_t)S_Q * H;
    unsigned short* q = malloc(nq * 2);
    unsigned short* kv = malloc(nkv * 2);
    int32_t* idx = malloc(nidx * 4);
    unsigned short* out = malloc(nout * 2);
    float* lse = malloc(nlse * 4);
    example_devptr dq = 0, dkv = 0, didx = 0, dout = 0, dlse = 0, dws = 0;
    mlajit_handle h = NULL;
    mlajit_status s;
    int bad = 0;
    double worst = 0, worst_lse = 0;

    rng_state = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull | 1;
    printf("checked sparse MQA prefill: s_q %d, heads %d, s_kv %d, top-k %d (seed %llu)\n", S_Q, H, S_KV, TOPK,
           (unsigned long long)rng_state);
    for (size_t i = 0; i < nq; ++i) q[i] = example_to_bf16(uniform());
    for (size_t i = 0; i < nkv; ++i) kv[i] = example_to_bf16(uniform());
    for (int t = 0; t < S_Q; ++t) /* distinct rows per query (a random permutation's prefix), some -1 */
    {
        int perm[S_KV];
        for (int i = 0; i < S_KV; ++i) perm[i] = i;
        for (int i = 0; i < TOPK; ++i) {
            int j = i + (int)((uniform() + 1.0f) * 0.5f * (float)(S_KV - i));
            if (j >= S_KV) j = S_KV - 1;
            int tmp = perm[i];
            perm[i] = perm[j];
            perm[j] = tmp;
            idx[t * TOPK + i] = (i % 7 == 3) ? -1 : perm[i];
        }
    }

    if (cu->cuMemAlloc(&dq, nq * 2) || cu->cuMemAlloc(&dkv, nkv * 2) || cu->cuMemAlloc(&didx, nidx * 4) ||
        cu->cuMemAlloc(&dout, nout * 2) || cu->cuMemAlloc(&dlse, nlse * 4)) {
        fprintf(stderr, "cuMemAlloc failed\n");
        return 1;
    }
    cu->cuMemcpyHtoD(dq, q, nq * 2);
    cu->cuMemcpyHtoD(dkv, kv, nkv * 2);
    cu->cuMemcpyHtoD(didx, idx, nidx * 4);
    cu->cuMemsetD8(dout, 0xFF, nout * 2); /* poison: NaN wherever the kernel fails to write */
    cu->cuMemsetD8(dlse, 0xFF, nlse * 4);

    if ((s = mlajit_create(-1, &h)) != MLAJIT_OK) return report("mlajit_create", s);
    {
        const int64_t shq[3] = {S_Q, H, D}, shkv[2] = {S_KV, D}, shidx[2] = {S_Q, TOPK};
        const int64_t shout[3] = {S_Q, H, DV}, shlse[2] = {S_Q, H};
        mlajit_sparse_mqa_args a = MLAJIT_ARGS_INIT(mlajit_sparse_mqa_args); /* struct_size; the rest zero = absent */
        a.q = tensor(dq, MLAJIT_BF16, 3, shq);
        a.kv = tensor(dkv, MLAJIT_BF16, 2, shkv);
        a.indices = tensor(didx, MLAJIT_INT32, 2, shidx);
        a.out = tensor(dout, MLAJIT_BF16, 3, shout);
        a.lse = tensor(dlse, MLAJIT_FP32, 2, shlse);
        a.sm_scale = sm_scale;
        /* Optional: a workspace for the key-set pre-pass (each query's index row compacted once; the same result bits,
         * faster at engine sizes). Its size depends on the arguments; 0 means the op does not use one. */
        size_t ws_bytes = 0;
        if ((s = mlajit_sparse_mqa_workspace_size(h, &a, &ws_bytes)) != MLAJIT_OK) return report("mlajit_sparse_mqa_workspace_size", s);
        if (ws_bytes > 0) {
            if (cu->cuMemAlloc(&dws, ws_bytes)) {
                fprintf(stderr, "cuMemAlloc of the %zu-byte workspace failed\n", ws_bytes);
                return 1;
            }
            a.workspace = (void*)(uintptr_t)dws;
            a.workspace_bytes = ws_bytes;
        }
        if ((s = mlajit_sparse_mqa_prefill(h, &a, NULL)) != MLAJIT_OK) return report("mlajit_sparse_mqa_prefill", s);
    }
    cu->cuCtxSynchronize();
    cu->cuMemcpyDtoH(out, dout, nout * 2);
    cu->cuMemcpyDtoH(lse, dlse, nlse * 4);

    /* float64 reference on the same bf16 inputs; tolerance: bf16 output rounding plus fp32 accumulation. */
    for (int t = 0; t < S_Q; ++t)
        for (int hh = 0; hh < H; ++hh) {
            double logit[TOPK], m = -INFINITY, sum = 0, acc[DV];
            const unsigned short* qr = q + ((size_t)t * H + hh) * D;
            for (int i = 0; i < TOPK; ++i) {
                int r = idx[t * TOPK + i];
                logit[i] = -INFINITY;
                if (r < 0) continue;
                double dot = 0;
                for (int c = 0; c < D; ++c) dot += (double)example_from_bf16(qr[c]) * example_from_bf16(kv[r * D + c]);
                logit[i] = dot * sm_scale;
                if (logit[i] > m) m = logit[i];
            }
            memset(acc, 0, sizeof acc);
            for (int i = 0; i < TOPK; ++i) {
                int r = idx[t * TOPK + i];
                if (r < 0) continue;
                double p = exp(logit[i] - m);
                sum += p;
                for (int c = 0; c < DV; ++c) acc[c] += p * example_from_bf16(kv[r * D + c]);
            }
            for (int c = 0; c < DV; ++c) {
                double ref = acc[c] / sum, got = example_from_bf16(out[((size_t)t * H + hh) * DV + c]);
                double err = fabs(got - ref);
                if (!(err <= 2e-2 * fabs(ref) + 1e-2)) bad = 1; /* NaN fails too */
                if (!(err <= worst)) worst = err;
            }
            {
                double err = fabs(lse[t * H + hh] - (m + log(sum)));
                if (!(err <= 1e-3)) bad = 1;
                if (!(err <= worst_lse)) worst_lse = err;
            }
        }
    printf("  on %s: max |out - ref| %.2e (bound 1e-2 + 2e-2 |ref|), max |lse - ref| %.2e (bound 1e-3): %s\n",
           mlajit_handle_arch(h), worst, worst_lse, bad ? "WRONG" : "ok");

    mlajit_destroy(h);
    cu->cuMemFree(dq);
    cu->cuMemFree(dkv);
    cu->cuMemFree(didx);
    cu->cuMemFree(dout);
    cu->cuMemFree(dlse);
    if (dws) cu->cuMemFree(dws);
    free(q);
    free(kv);
    free(idx);
    free(out);
    free(lse);
    return bad;
}

int main(void) {
    example_cuda cu;
    char why[256];
    printf("mlajit %s (header %d.%d)\n", mlajit_version(), MLAJIT_VERSION_MAJOR, MLAJIT_VERSION_MINOR);
    if (plan()) return 1;
    if (!example_cuda_open(&cu, why, sizeof why)) {
        printf("skipped the checked prefill: %s\n", why);
        return 0;
    }
    return checked_prefill(&cu);
}
