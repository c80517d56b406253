// Device helpers shared by every mlajit kernel: bf16 conversion, tensor-core and async-copy PTX wrappers.
// NVRTC compiles these with no CUDA toolkit headers (the deployed machine may have only the driver and
// libnvrtc), so everything below is defined here from NVRTC built-ins and inline PTX.
#pragma once
#include "mlajit_abi.h"

#define MJ_DEVICE __device__ __forceinline__

typedef unsigned short mj_bf16;   // raw bf16 bits
typedef unsigned int mj_u32;

static constexpr float MJ_LOG2E = 1.4426950408889634f;
static constexpr float MJ_LN2 = 0.6931471805599453f;
#define MJ_NEG_INF (__int_as_float(0xff800000))

MJ_DEVICE float mj_bf16_to_float(mj_bf16 x) { return __uint_as_float(((mj_u32)x) << 16); }

// Two floats -> packed bf16x2 (lo in the low half), round-to-nearest-even.
MJ_DEVICE mj_u32 mj_pack_bf16x2(float lo, float hi) {
    mj_u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
MJ_DEVICE mj_bf16 mj_float_to_bf16(float x) { return (mj_bf16)(mj_pack_bf16x2(x, 0.f) & 0xffffu); }

MJ_DEVICE float mj_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
MJ_DEVICE float mj_log2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

MJ_DEVICE mj_u32 mj_smem_addr(const void* p) { return (mj_u32)__cvta_generic_to_shared(p); }

// D = A * B + D, bf16 inputs, fp32 accumulate. A: 16x16 row-major fragment (4 regs), B: 16x8 col-major
// fragment (2 regs), D: 16x8 (4 floats). Lane layout is the PTX ISA's m16n8k16 layout.
MJ_DEVICE void mj_mma_bf16_16816(float d[4], const mj_u32 a[4], const mj_u32 b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

MJ_DEVICE void mj_ldmatrix_x4(mj_u32 r[4], mj_u32 smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem));
}
MJ_DEVICE void mj_ldmatrix_x2(mj_u32 r[2], mj_u32 smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(smem));
}
MJ_DEVICE void mj_ldmatrix_x4_trans(mj_u32 r[4], mj_u32 smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem));
}
MJ_DEVICE void mj_ldmatrix_x2_trans(mj_u32 r[2], mj_u32 smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(smem));
}

// 16-byte global -> shared copy that bypasses L1. When !valid the destination is zero-filled and the
// source is not read (src-size 0), so out-of-range rows need no branch around the copy.
MJ_DEVICE void mj_cp_async_16(mj_u32 smem, const void* gmem, bool valid) {
    int src_size = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem), "r"(src_size));
}
MJ_DEVICE void mj_cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
MJ_DEVICE void mj_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

MJ_DEVICE float mj_warp_max4(float x) {  // max over the 4 lanes of a quad (lanes sharing an mma row)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return x;
}
MJ_DEVICE float mj_warp_sum4(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

// ---- added for sparse_mqa_fwd (usable by any kernel) ----------------------------------------------------
// Named barrier over the first `nthreads` threads that reach barrier `id` (id 0 is __syncthreads's): lets a
// group of warps exchange through shared memory without stalling the whole block.
MJ_DEVICE void mj_bar_sync(int id, int nthreads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}
MJ_DEVICE void mj_st_shared_v4f(mj_u32 smem, float a, float b, float c, float d) {
    asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};" ::"r"(smem), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
MJ_DEVICE void mj_ld_shared_v4f(float r[4], mj_u32 smem) {
    asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3]) : "r"(smem) : "memory");
}
MJ_DEVICE void mj_ld_shared_v4(mj_u32 r[4], mj_u32 smem) {
    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem) : "memory");
}
MJ_DEVICE void mj_st_global_v4(void* gmem, const mj_u32 r[4]) {
    asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(gmem), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}
// Named-barrier arrive without waiting (producer side of a bar.sync by other warps with the same count).
MJ_DEVICE void mj_bar_arrive(int id, int nthreads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}
// mbarrier (sm_80+): 64-bit shared-memory barrier with a phase bit; arrive has release, the wait acquire
// semantics, and cp.async completion can arrive on it (noinc: the init count must include those arrivals).
MJ_DEVICE void mj_mbar_init(mj_u32 bar, unsigned count) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
MJ_DEVICE void mj_mbar_arrive(mj_u32 bar) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared.b64 st, [%0];\n}" ::"r"(bar) : "memory");
}
MJ_DEVICE void mj_cp_async_mbar_arrive_noinc(mj_u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(bar) : "memory");
}
// Wait until the phase with the given parity has completed.
MJ_DEVICE void mj_mbar_wait(mj_u32 bar, unsigned parity) {
#if __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n .reg .pred p;\n MJ_WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra MJ_WAIT;\n}" ::"r"(bar),
        "r"(parity)
        : "memory");
#else
    asm volatile(
        "{\n .reg .pred p;\n MJ_WAIT:\n mbarrier.test_wait.parity.shared.b64 p, [%0], %1;\n @!p bra MJ_WAIT;\n}" ::"r"(bar),
        "r"(parity)
        : "memory");
#endif
}
