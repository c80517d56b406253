// Hopper (sm_90a) PTX wrappers shared by the Hopper-tier kernels: mbarriers, TMA tensor loads, wgmma with
// shared-memory descriptors, setmaxnreg, named barriers, proxy fences. No toolkit headers (NVRTC on a
// deployed machine has none): everything is inline PTX on NVRTC built-ins. Namespace mj90.
//
// wgmma operand conventions used here (PTX ISA, "asynchronous warpgroup level matrix"):
//   - A (m64 x k16) from shared memory through a descriptor, or from registers: per warp w of the
//     warpgroup, rows 16w..16w+15 in the m16n8k16 mma.sync A layout (4 x bf16x2 registers).
//   - B (k16 x nN) always from shared memory through a descriptor; tnsp_b = 0: K-major (rows are n, k
//     contiguous), tnsp_b = 1: N-major (rows are k, n contiguous).
//   - D (m64 x nN fp32): N/2 floats per thread; float 4j+e is row 16w + lane/4 + 8*(e/2), column
//     8j + 2*(lane%4) + (e%2): per 8-column block the mma.sync C layout.
#pragma once
#include "mlajit_device.cuh"

namespace mj90 {

MJ_DEVICE unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// An opaque CUtensorMap (128 bytes, 64-byte aligned), encoded on the host by cuTensorMapEncodeTiled and
// passed in the kernel's __grid_constant__ parameters. Same layout as MjTensorMap in mlajit_abi.h.
struct alignas(64) TensorMap {
    unsigned long long raw[16];
};

// ---- mbarrier ---------------------------------------------------------------------------------------
MJ_DEVICE void mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the async proxy (TMA) and the other threads of the cluster.
MJ_DEVICE void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
MJ_DEVICE void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
MJ_DEVICE void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
// Waits until the phase with parity `phase` has completed (try_wait suspends for a while in hardware
// before returning false, so the loop does not hammer shared memory).
MJ_DEVICE void mbar_wait(unsigned long long* bar, unsigned phase) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "MJ_MBAR_WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra MJ_MBAR_WAIT_%=;\n"
        "}\n" ::"r"(smem_u32(bar)),
        "r"(phase)
        : "memory");
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA, wgmma) accesses.
MJ_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---- TMA (cp.async.bulk.tensor), completion counted in bytes on an mbarrier --------------------------
MJ_DEVICE void tma_load_2d(void* smem, const TensorMap* map, unsigned long long* bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
            smem_u32(smem)),
        "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
        : "memory");
}
MJ_DEVICE void tma_load_3d(void* smem, const TensorMap* map, unsigned long long* bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(
            smem_u32(smem)),
        "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}
MJ_DEVICE void tma_load_4d(void* smem, const TensorMap* map, unsigned long long* bar, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(
            smem_u32(smem)),
        "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
// Hint: fetch the tensor map into the constant cache ahead of the first load.
MJ_DEVICE void tma_prefetch_map(const TensorMap* map) { asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory"); }

// ---- wgmma ------------------------------------------------------------------------------------------
MJ_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
MJ_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
MJ_DEVICE void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator across a wgmma wait (the asm statements that
// issue and wait do not name the registers the hardware is still writing).
MJ_DEVICE void reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }
MJ_DEVICE void reg_fence(unsigned& r) { asm volatile("" : "+r"(r)::"memory"); }

// Shared-memory matrix descriptor: start address, leading / stride byte offsets (16-byte units), swizzle
// mode (bits 62-63: 1 = 128 B, 2 = 64 B, 3 = 32 B, 0 = none). Swizzled tiles must start on the swizzle
// pattern's period (1024 B for 128 B swizzle) for the base offset field to stay 0; moving the start by
// a multiple of 16 B inside a row (the k16 steps of a K-major tile) is what the hardware expects.
MJ_DEVICE unsigned long long smem_desc(const void* smem, int swizzle_bytes, int sbo_bytes, int lbo_bytes) {
    const unsigned long long mode = swizzle_bytes == 128 ? 1ull : swizzle_bytes == 64 ? 2ull : swizzle_bytes == 32 ? 3ull : 0ull;
    return (unsigned long long)((smem_u32(smem) & 0x3FFFF) >> 4) | ((unsigned long long)((lbo_bytes & 0x3FFFF) >> 4) << 16) |
           ((unsigned long long)((sbo_bytes & 0x3FFFF) >> 4) << 32) | (mode << 62);
}

#define MJ90_ACC64_OPS                                                                                                 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),         \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),          \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),         \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),         \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),         \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),         \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),         \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define MJ90_ACC64_LIST                                                                                                \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "   \
    "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// D (64 x 128 fp32) = A (64 x 16, shared, K-major) * B (16 x 128, shared, K-major unless TnspB) + (accumulate ? D : 0)
template <int TnspB>
MJ_DEVICE void wgmma_m64n128k16_ss(float (&d)[64], unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " MJ90_ACC64_LIST ", %64, %65, acc, 1, 1, 0, %67;\n}\n"
        : MJ90_ACC64_OPS
        : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TnspB));
}
// D (64 x 128 fp32) += A (64 x 16 bf16, registers) * B (16 x 128, shared, K-major unless TnspB)
template <int TnspB>
MJ_DEVICE void wgmma_m64n128k16_rs(float (&d)[64], const unsigned (&a)[4], unsigned long long desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " MJ90_ACC64_LIST ", {%64, %65, %66, %67}, %68, acc, 1, 1, %70;\n}\n"
        : MJ90_ACC64_OPS
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TnspB));
}

// ---- registers, barriers, async copies --------------------------------------------------------------
// Warpgroup-wide register re-allocation (all 128 threads of the warpgroup execute it).
template <int R>
MJ_DEVICE void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
MJ_DEVICE void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
MJ_DEVICE void named_bar_sync(int id, int threads) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory"); }
MJ_DEVICE void named_bar_arrive(int id, int threads) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory"); }

// 16-byte global -> shared copy (L2 only); zero-fills the destination without reading when !valid.
MJ_DEVICE void cp_async_16(void* smem, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(smem)), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
MJ_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
MJ_DEVICE void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace mj90
