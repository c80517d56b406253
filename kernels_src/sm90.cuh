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

// The same from a shared-window address (cheaper in loops: add byte offsets to the address, not the pointer).
MJ_DEVICE unsigned long long smem_desc_addr(unsigned addr, int swizzle_bytes, int sbo_bytes, int lbo_bytes) {
    const unsigned long long layout = swizzle_bytes == 128 ? 1ull : swizzle_bytes == 64 ? 2ull : swizzle_bytes == 32 ? 3ull : 0ull;
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo_bytes >> 4) & 0x3FFF) << 16) |
           ((unsigned long long)((sbo_bytes >> 4) & 0x3FFF) << 32) | (layout << 62);
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
// bar.sync is barrier.sync.aligned: every thread of a warp must reach it together. Where a warp can reach a
// barrier straight out of lane-divergent code, use the unaligned form (compute-sanitizer synccheck reported
// "divergent thread(s)" at the aligned form in the sparse MQA kernel's P hand-over on the H200, 2026-12-03).
MJ_DEVICE void named_bar_sync(int id, int threads) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory"); }
MJ_DEVICE void named_bar_sync_unaligned(int id, int threads) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
MJ_DEVICE void named_bar_arrive(int id, int threads) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory"); }
// The non-.aligned form: correct even where the compiler has not reconverged the warp (see named_bar_sync_unaligned).
MJ_DEVICE void named_bar_arrive_unaligned(int id, int threads) {
    asm volatile("barrier.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// 16-byte global -> shared copy (L2 only); zero-fills the destination without reading when !valid.
MJ_DEVICE void cp_async_16(void* smem, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(smem)), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
MJ_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
MJ_DEVICE void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ---- gathers, clusters and the other wgmma shapes of the sparse MQA kernel ---------------------------
// 16 / 4 bytes of read-only global data, kept out of L1.
MJ_DEVICE void ld_global_nc_v4(mj_u32 (&r)[4], const void* g) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(g));
}
MJ_DEVICE float ld_global_nc_f32(const void* g) {
    float v;
    asm volatile("ld.global.nc.L1::no_allocate.f32 %0, [%1];" : "=f"(v) : "l"(g));
    return v;
}
// Extra (not in the shared vocabulary), for the 2-CTA pair (MJ_MQA90_PAIR): cluster rank, the address of the
// same shared-memory location in CTA `rank` of the cluster, arrivals on a peer's mbarrier, a wait that
// acquires at cluster scope, bulk copies into a peer's shared memory, the cluster barrier.
MJ_DEVICE unsigned cluster_ctarank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
MJ_DEVICE unsigned mapa_shared(unsigned addr, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
MJ_DEVICE void mbar_arrive_cluster(unsigned cluster_addr) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_addr) : "memory");
}
MJ_DEVICE void mbar_wait_cluster(unsigned long long* bar, unsigned phase) {
    asm volatile(
        "{\n .reg .pred p;\n MJ90_WAITC:\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n @!p bra MJ90_WAITC;\n}" ::"r"(
            smem_u32(bar)),
        "r"(phase)
        : "memory");
}
MJ_DEVICE void bulk_copy_to_peer(unsigned dst_cluster, unsigned src_cta, unsigned bytes, unsigned bar_cluster) {
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst_cluster),
                 "r"(src_cta), "r"(bytes), "r"(bar_cluster)
                 : "memory");
}
MJ_DEVICE void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// cp.async to a shared-window address (zero-fill when !valid), and a
// non-blocking test of an mbarrier phase.
MJ_DEVICE void cp_async_16_addr(unsigned saddr, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(saddr), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
// The same copy to `base + off`, base a pointer or a 32-bit shared address. Through NVRTC they are not the same code: it
// keeps shared pointers 64 bits wide, so the pointer form costs a 64-bit add and a conversion a copy (the 16-head persistent
// kernel's gather loop: 134 SASS instructions for 4 rows against 110; docs/perf_mqa_notes.md, session 34).
MJ_DEVICE void cp_async_16_at(unsigned char* base, unsigned off, const void* gmem, bool valid) { cp_async_16(base + off, gmem, valid); }
MJ_DEVICE void cp_async_16_at(unsigned base, unsigned off, const void* gmem, bool valid) { cp_async_16_addr(base + off, gmem, valid); }
// Global -> shared bulk copy (TMA engine, no tensor map) of `bytes` (a multiple of 16, both addresses 16-byte aligned),
// completing as transaction bytes on `bar`.
MJ_DEVICE void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}
MJ_DEVICE bool mbar_test(unsigned long long* bar, unsigned phase) {
    unsigned ok;
    asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(ok) : "r"(smem_u32(bar)), "r"(phase) : "memory");
    return ok != 0u;
}
// the completion of this thread's earlier cp.async arrives on `bar`
// (noinc: the barrier's expected count includes these arrivals).
MJ_DEVICE void cp_async_mbar_arrive_noinc(unsigned long long* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// D[64 x 32] (fp32, 16 registers a thread) += A[64 x 16] . B[16 x 32], A and B from shared memory
// (descriptors); trans_b = 1 reads B as MN-major (V stored [key][column]), 0 as K-major.
template <int TRANS_B>
MJ_DEVICE void wgmma_m64n32k16_ss(float (&d)[16], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %19, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, %18;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "n"(TRANS_B), "r"(1));
}

// D[64 x 256] (fp32, 128 registers a thread) += A[64 x 16] . B[16 x 256], A and B from shared memory
// (descriptors); trans_b = 1 reads B as MN-major (V stored [key][column]), 0 as K-major.
template <int TRANS_B>
MJ_DEVICE void wgmma_m64n256k16_ss(float (&d)[128], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %131, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, %130;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "n"(TRANS_B), "r"(1));
}

// D[64 x 64] (fp32, 32 registers a thread) += A[64 x 16] . B[16 x 64], both from shared memory, B K-major.
MJ_DEVICE void wgmma_m64n64k16_ss(float (&d)[32], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

// D[64 x 256] (fp32, 128 registers a thread) += A[64 x 16] . B[16 x 256], A from registers (four bf16x2 a
// thread, the m16n8k16 A-fragment layout per warp: the layout of a bf16-packed m64nN accumulator), B from
// shared memory; trans_b = 1 reads B as MN-major.
template <int TRANS_B>
MJ_DEVICE void wgmma_m64n256k16_rs(float (&d)[128], const mj_u32 (&a)[4], unsigned long long desc_b) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %134, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, %133;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TRANS_B), "r"(1));
}

// D[64 x N] (fp32, N / 2 registers a thread) += A[64 x 16] . B[16 x N], N = 16 or 32, both from shared memory;
// TA = 1 reads A as MN-major (stored [k][m], e.g. V^T from a [key][column] tile), TB = 1 reads B as MN-major.
template <int TA, int TB>
MJ_DEVICE void wgmma_m64n16k16_ss_t(float (&d)[8], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, %11, %12;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TA), "n"(TB));
}
template <int TA, int TB>
MJ_DEVICE void wgmma_m64n32k16_ss_t(float (&d)[16], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),
          "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TA), "n"(TB));
}

}  // namespace mj90
