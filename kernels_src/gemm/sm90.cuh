// mlajit bf16 GEMM, Hopper tier (sm_90a: TMA, mbarriers, wgmma, setmaxnreg): the one-call prefill's three
// projections without cuBLASLt (issue 15: cuBLASLt's per-call queueing and its first-call set-up).
// C_b[M, N] = A_b[M, K] . B_b[K, N], bf16 in, fp32 accumulate, bf16 out; layouts and tensor maps in
// gemm/gemm_abi.h (A K-major; B K-major or N-major: wgmma's transpose bit; C row-major).
//
// Schedule: persistent (grid = min(tiles, SMs), one block per SM), tiles of MJ_BLOCK_M x MJ_BLOCK_N, K in
// 64-wide k-steps (MJ_K_TILES of them: K is a JIT constant, rounded up; TMA zero-fills the tail).
//   warpgroup 0, one thread: TMA producer. Walks the block's tiles and their k-steps, MJ_STAGES deep; it runs
//     ahead into the next tile while the consumers store the current one.
//   warpgroups 1 and 2: MJ_BLOCK_M = 128: rows 0-63 / 64-127 of the tile (m64nBLOCK_Nk16); MJ_BLOCK_M = 64
//     (short M: half the padded tensor-core work of a 128-row tile): columns 0..BLOCK_N/2-1 / the rest of the
//     tile's 64 rows (m64n(BLOCK_N/2)k16). Both operands from shared memory, one k-step's wgmma group in
//     flight while the next is issued. Epilogue: fp32 -> bf16 into the
//     warpgroup's own staging tile (128-byte swizzled like the TMA's), then TMA stores (rows and columns
//     past C are clipped by the store, so M tails need no code). The store drains while the next tile's
//     k-steps run; the staging tile is reused only after the store has read it.
//
// MJ_A_PAGED = 1 (the paged latent cache's K/V up-projection, issue 15): A's rows are gathered out of the
//   pages (GemmSm90Params, a_* fields) by the whole producer warpgroup with cp.async, 16-byte chunks written
//   in the 128-byte-swizzled layout TMA would produce (B still comes by TMA). Each producer warp owns BLOCK_M / 4
//   rows of the tile and finds their page rows once per tile (lane = row: a binary search over cu_seqlens,
//   one block-table read), then spreads them over its lanes once per tile (a copy instruction moves 4 rows x
//   128 bytes, 8 lanes a row); the next tile's rows are looked up while the current tile's last copies land.
//   Completion: each producer thread waits for its own copies one k-step behind (cp.async.wait_group 1),
//   fences them into the async proxy (fence.proxy.async: wgmma reads shared memory through it) and arrives on
//   the stage's full barrier: no fence on the consumers' path. Measured on the H200 (2026-12-04, 8192 keys):
//   1.09-1.11x the dense kernel (1.17-1.18x at 16 heads with cp.async.mbarrier.arrive and the consumers
//   fencing); the rest is the rate of the cp.async gather itself (about one 16 KiB k-step of A per 0.7 us
//   per SM under this load against TMA's, docs/PERF.md). The blocks of column tile 0 also copy the rows'
//   k_pe (elements 512..575) to kpe_out. MJ_A_PAGED = 0 compiles the code above unchanged (every paged
//   branch is `if constexpr`).
//
// SUPPORTED CONFIGS (MJ_BLOCK_M, MJ_BLOCK_N, MJ_STAGES): (128, 256, 3), (128, 128, 5), (64, 256, 4),
//   (64, 128, 8); shared memory mj_gemm90_smem_bytes (at most 214272 bytes); MJ_B_NMAJOR in {0, 1};
//   MJ_K_TILES in 1..64; MJ_A_PAGED in {0, 1} (1: MJ_K_TILES == 8, B K-major); MJ_ARCH == 90.
// Input requirements (the host checks them, else cuBLASLt runs the product): base addresses 16-byte
// aligned, leading dimensions and batch strides multiples of 8 elements (TMA strides are multiples of
// 16 bytes).
#pragma once
// The shared Hopper wrappers (kernels_src/sm90.cuh), by header name as the runtime passes it.
#include "sm90.cuh"
#include "gemm/gemm_abi.h"

static_assert(MJ_ARCH == 90, "gemm_sm90: the Hopper tier needs sm_90a (wgmma, setmaxnreg)");
static_assert((MJ_BLOCK_M == 128 && MJ_BLOCK_N == 256 && MJ_STAGES == 3) || (MJ_BLOCK_M == 128 && MJ_BLOCK_N == 128 && MJ_STAGES == 5) ||
                  (MJ_BLOCK_M == 64 && MJ_BLOCK_N == 256 && MJ_STAGES == 4) || (MJ_BLOCK_M == 64 && MJ_BLOCK_N == 128 && MJ_STAGES == 8),
              "gemm_sm90: supported (MJ_BLOCK_M, MJ_BLOCK_N, MJ_STAGES): (128, 256, 3), (128, 128, 5), (64, 256, 4), (64, 128, 8)");
static_assert(MJ_B_NMAJOR == 0 || MJ_B_NMAJOR == 1, "gemm_sm90: MJ_B_NMAJOR must be 0 or 1");
static_assert(MJ_K_TILES >= 1 && MJ_K_TILES <= 64, "gemm_sm90: MJ_K_TILES must be in 1..64");
static_assert(MJ_A_PAGED == 0 || (MJ_A_PAGED == 1 && MJ_K_TILES == 8 && MJ_B_NMAJOR == 0),
              "gemm_sm90: MJ_A_PAGED = 1 is the up-projection of 512-wide latent rows (MJ_K_TILES 8, B K-major)");

namespace mj_gemm90 {

constexpr int BM = MJ_BLOCK_M, BN = MJ_BLOCK_N, BK = 64, ST = MJ_STAGES, KT = MJ_K_TILES;
// One consumer warpgroup's part of the tile: 64 rows x WN columns, at row offset 64 c (BM = 128) or column
// offset WN c (BM = 64).
constexpr int WN = BM == 128 ? BN : BN / 2;
constexpr int NT = mj_gemm90_threads();
constexpr int A_BYTES = BM * BK * 2;             // one k-step of A: BM rows of 128 bytes
constexpr int B_BYTES = BN * BK * 2;             // one k-step of B
constexpr int STAGE_BYTES = mj_gemm90_stage_bytes(BM, BN);
constexpr int NBOX = BN / 64;                    // 64-column boxes of N-major B
constexpr int NBOX_WG = WN / 64;                 // 64-column boxes of a warpgroup's part of C
constexpr int C_WG_BYTES = 64 * WN * 2;          // one consumer warpgroup's staging tile: NBOX_WG boxes of 64 x 128 B
constexpr int OFF_C = ST * STAGE_BYTES;
constexpr int OFF_BAR = OFF_C + 2 * C_WG_BYTES;
static_assert(1024 + OFF_BAR + 256 == mj_gemm90_smem_bytes(BM, BN, ST), "gemm_sm90: layout disagrees with mj_gemm90_smem_bytes");
static_assert(A_BYTES % 1024 == 0 && STAGE_BYTES % 1024 == 0, "tiles start on the 1024-byte swizzle period");
// Register split after setmaxnreg: a consumer holds WN / 2 fp32 accumulators; the producer few.
// 40 * 128 + 232 * 256 = 64512 <= 65536 (the launch's 168 a thread for 384 threads). The paged-A producer
// keeps more (a tile's 8 source pointers, half its k_pe rows in flight, the next tile's lookup): at 72 it
// spilled 28 bytes (ptxas, 128 x 256 tile); 88 * 128 + 208 * 256 = 64512, no spills at any tile.
constexpr int PRODUCER_REGS = MJ_A_PAGED ? 88 : 40, CONSUMER_REGS = MJ_A_PAGED ? 208 : 232;
static_assert(128 * (168 - PRODUCER_REGS) >= 256 * (CONSUMER_REGS - 168), "the producer must release what the consumers take");
constexpr int BAR_EPI = 1;  // named barriers 1, 2: each consumer warpgroup's epilogue

// TMA store of one box from shared memory (bulk-group completion), and the waits on those groups.
MJ_DEVICE void tma_store_3d(const mj90::TensorMap* map, const void* smem, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(map),
                 "r"(mj90::smem_u32(smem)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}
MJ_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// The committed stores have finished reading shared memory (the staging tile may be written again).
MJ_DEVICE void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
MJ_DEVICE void st_shared_b32(unsigned addr, unsigned v) { asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory"); }

// One m64nBLOCK_Nk16 wgmma, accumulating (the accumulators are zeroed per tile), picked by the accumulator
// array's size.
MJ_DEVICE void mma(float (&d)[128], unsigned long long da, unsigned long long db) { mj90::wgmma_m64n256k16_ss<MJ_B_NMAJOR>(d, da, db); }
MJ_DEVICE void mma(float (&d)[64], unsigned long long da, unsigned long long db) { mj90::wgmma_m64n128k16_ss<MJ_B_NMAJOR>(d, da, db, 1); }
// m64n64k16 with B K-major or N-major (the shared vocabulary's n64 wrapper is K-major only).
MJ_DEVICE void mma(float (&d)[32], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "%32, %33, p, 1, 1, 0, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),
          "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(1), "n"(MJ_B_NMAJOR));
}

// One box of a map whose outer dimensions are {rows, batch}, or {batch, rows} when batch_inner.
MJ_DEVICE void load(void* smem, const mj90::TensorMap* map, unsigned long long* bar, int x, int row, int b, int batch_inner) {
    if (batch_inner) mj90::tma_load_3d(smem, map, bar, x, b, row);
    else mj90::tma_load_3d(smem, map, bar, x, row, b);
}

// Tile t -> (batch, row tile, column tile). Within a batch entry, group_m row tiles walk all column tiles
// together (row fastest), so the blocks running at once share their B columns and a group's A rows in L2.
struct TileCoord {
    int b, m, n;
};
MJ_DEVICE TileCoord tile_coord(const GemmSm90Params& P, int t) {
    const int per_batch = P.tiles_m * P.tiles_n;
    TileCoord c;
    // Batch entries outermost: measured on the H200 (2026-12-03), walking the heads fastest instead made the
    // per-head projections 15-25 % slower (tools/dev/gemm/harness).
    c.b = t / per_batch;
    const int r = t - c.b * per_batch;
    const int group = r / (P.group_m * P.tiles_n);
    const int first_m = group * P.group_m;
    const int gm = min(P.group_m, P.tiles_m - first_m);
    const int in = r - group * P.group_m * P.tiles_n;
    c.m = first_m + in % gm;
    c.n = in / gm;
    return c;
}

// The page row of A's row grow (lane = row; see GemmSm90Params).
struct RowSrc {
    const unsigned char* p;
    int state;  // 0: past M (zeros), 1: a page row, 2: a bad page entry (zeros; k_pe NaN)
};
MJ_DEVICE RowSrc find_row(const GemmSm90Params& P, int grow, int cu0) {
    RowSrc r{static_cast<const unsigned char*>(P.a_pages), 0};
    if (grow < P.m) {
        const int key = cu0 + grow;
        int lo = 0, hi = P.a_nreq;  // cu[lo] <= key < cu[hi]
        while (hi - lo > 1) {
            const int mid = (lo + hi) >> 1;
            if (__ldg(P.a_cu_seqlens + mid) <= key) lo = mid;
            else hi = mid;
        }
        const int pos = key - __ldg(P.a_cu_seqlens + lo);
        const int blk = pos / P.a_block_size;
        const int page = blk < P.a_max_blocks ? __ldg(P.a_block_table + (mj_i64)lo * P.a_bt_stride + blk) : -1;
        if (page >= 0 && page < P.a_num_blocks) {
            r.p += ((mj_i64)page * P.a_page_stride + (mj_i64)(pos - blk * P.a_block_size) * P.a_tok_stride) * 2;
            r.state = 1;
        } else {
            r.state = 2;
        }
    }
    return r;
}

// The paged-A producer (MJ_A_PAGED = 1): all 128 threads of warpgroup 0. Warp pw owns rows RPW pw ..
// RPW pw + RPW - 1 of each tile (lane l < RPW: row RPW pw + l); copy instruction i of a k-step moves rows
// 4i .. 4i + 3 of the warp's (lane / 8), chunk lane % 8 of the k-step's 128 bytes, into the swizzled slot
// (chunk c of row r at r * 128 + ((c ^ (r % 8)) * 16), as TMA's 128-byte swizzle puts it). The full
// barrier counts thread 0's arrive.expect_tx (B's bytes) and one plain arrival per producer thread, made
// once the thread's copies of that stage have landed and been fenced into the async proxy.
MJ_DEVICE void produce_paged(const GemmSm90Params& P, unsigned char* smem, unsigned long long* full, unsigned long long* empty) {
    using namespace mj90;
    constexpr int RPW = BM / 4, NI = RPW / 4, NH = NI / 2;
    const int tid = threadIdx.x, pw = tid >> 5, lane = tid & 31, ch = lane & 7;
    const TensorMap* tm_b = reinterpret_cast<const TensorMap*>(&P.tm_b);
    const unsigned char* base = static_cast<const unsigned char*>(P.a_pages);
    const unsigned smem32 = smem_u32(smem);
    const int cu0 = __ldg(P.a_cu_seqlens);
    int t = blockIdx.x;  // the grid has at most one block per tile: every block has one
    TileCoord tc = tile_coord(P, t);
    RowSrc cur = find_row(P, tc.m * BM + pw * RPW + (lane % RPW), cu0);
    int it = 0;     // k-steps issued by this block so far: stage it % ST, use it / ST of that stage
    int prev = -1;  // the stage whose copies are still to be waited for, fenced and arrived
    for (;;) {
        const int m0 = tc.m * BM, n0 = tc.n * BN;
        // The tile's rows spread over the lanes once (not per k-step): src[i] is chunk ch of row 4i + lane / 8.
        const unsigned char* src[NI];
        unsigned ok = 0, live = 0;  // bit i: row 4i + lane / 8 is a page row / is inside M
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            const int r = 4 * i + (lane >> 3);
            src[i] = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)cur.p, r) + ch * 16;
            const int st = __shfl_sync(0xffffffffu, cur.state, r);
            ok |= (st == 1 ? 1u : 0u) << i;
            live |= (st != 0 ? 1u : 0u) << i;
        }
        for (int kt = 0; kt < KT; ++kt, ++it) {
            const int s = it % ST;
            if (it >= ST) mbar_wait(&empty[s], ((it / ST) & 1) ^ 1);
            if (tid == 0) {
                mbar_arrive_expect_tx(&full[s], B_BYTES);
                load(smem + s * STAGE_BYTES + A_BYTES, tm_b, &full[s], kt * BK, n0, tc.b, P.b_batch_inner);
            }
            const unsigned sa32 = smem32 + s * STAGE_BYTES;
#pragma unroll
            for (int i = 0; i < NI; ++i) {
                const int row = pw * RPW + 4 * i + (lane >> 3);
                const bool page_row = (ok >> i) & 1u;  // else zero-filled, nothing read
                cp_async_16_addr(sa32 + row * 128 + ((ch ^ (row & 7)) << 4), page_row ? src[i] + kt * 128 : base, page_row);
            }
            cp_async_commit();
            // The previous k-step's copies (issued a k-step ago: landed by now, mostly) into the async proxy.
            if (prev >= 0) {
                cp_async_wait<1>();
                fence_proxy_async();
                mbar_arrive(&full[prev]);
            }
            prev = s;
        }
        // Tile end: this tile's k_pe (two halves of 16 registers) and the next tile's rows, the first half's
        // loads in flight with the lookup's; then the last k-step's copies, which landed meanwhile.
        const int tn = t + gridDim.x;
        const bool kpe = tc.n == 0 && P.kpe_out != nullptr;
        uint4 v[NH];
        auto kpe_load = [&](int h) {
#pragma unroll
            for (int j = 0; j < NH; ++j) {
                const int i = h * NH + j;
                v[j] = make_uint4(0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u);  // bf16 quiet NaNs
                if ((ok >> i) & 1u) v[j] = __ldg(reinterpret_cast<const uint4*>(src[i] + 1024));
            }
        };
        auto kpe_store = [&](int h) {
#pragma unroll
            for (int j = 0; j < NH; ++j) {
                const int i = h * NH + j, gr = m0 + pw * RPW + 4 * i + (lane >> 3);
                if ((live >> i) & 1u) reinterpret_cast<uint4*>(static_cast<unsigned char*>(P.kpe_out) + (mj_i64)gr * 128)[ch] = v[j];
            }
        };
        if (kpe) kpe_load(0);
        TileCoord ntc = tc;
        RowSrc nxt = cur;
        if (tn < P.num_tiles) {
            ntc = tile_coord(P, tn);
            nxt = find_row(P, ntc.m * BM + pw * RPW + (lane % RPW), cu0);
        }
        if (kpe) {
            kpe_store(0);
            kpe_load(1);
            kpe_store(1);
        }
        cp_async_wait<0>();
        fence_proxy_async();
        mbar_arrive(&full[prev]);
        prev = -1;
        if (tn >= P.num_tiles) break;
        t = tn;
        tc = ntc;
        cur = nxt;
    }
}

MJ_DEVICE void gemm(const GemmSm90Params& P) {
    using namespace mj90;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    const int tid = threadIdx.x, wg = tid >> 7;
    unsigned long long* full = (unsigned long long*)(smem + OFF_BAR);  // [ST]: a stage's A and B landed
    unsigned long long* empty = full + ST;                             // [ST]: both consumers are done with it
    const TensorMap* tm_a = reinterpret_cast<const TensorMap*>(&P.tm_a);
    const TensorMap* tm_b = reinterpret_cast<const TensorMap*>(&P.tm_b);
    const TensorMap* tm_c = reinterpret_cast<const TensorMap*>(&P.tm_c);
    if (tid == 0) {
        for (int s = 0; s < ST; ++s) {
            // Paged A: thread 0's arrive.expect_tx (B's bytes) and one arrival per producer thread (produce_paged).
            mbar_init(&full[s], MJ_A_PAGED ? 1 + 128 : 1);
            mbar_init(&empty[s], 2 * 128);
        }
        fence_barrier_init();
        if constexpr (!MJ_A_PAGED) tma_prefetch_map(tm_a);
        tma_prefetch_map(tm_b);
    }
    if (tid == 128 || tid == 256) tma_prefetch_map(tm_c);
    __syncthreads();

    if (wg == 0) {
        // ================================ producer ================================
        setmaxnreg_dec<PRODUCER_REGS>();
        if constexpr (MJ_A_PAGED) {
            produce_paged(P, smem, full, empty);
            return;
        }
        if (tid == 0) {
            int it = 0;  // k-steps issued by this block so far: stage it % ST, use it / ST of that stage
            for (int t = blockIdx.x; t < P.num_tiles; t += gridDim.x) {
                const TileCoord tc = tile_coord(P, t);
                const int m0 = tc.m * BM, n0 = tc.n * BN;
                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int s = it % ST;
                    if (it >= ST) mbar_wait(&empty[s], ((it / ST) & 1) ^ 1);
                    unsigned char* sa = smem + s * STAGE_BYTES;
                    unsigned char* sb = sa + A_BYTES;
                    mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
                    load(sa, tm_a, &full[s], kt * BK, m0, tc.b, P.a_batch_inner);
                    if constexpr (MJ_B_NMAJOR) {
#pragma unroll
                        for (int j = 0; j < NBOX; ++j) load(sb + j * (BK * 128), tm_b, &full[s], n0 + 64 * j, kt * BK, tc.b, P.b_batch_inner);
                    } else {
                        load(sb, tm_b, &full[s], kt * BK, n0, tc.b, P.b_batch_inner);
                    }
                }
            }
        }
        return;
    }

    // ================================ consumers ================================
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;             // rows 64c..64c+63 of the tile
    const int ctid = tid - 128 * wg;  // thread inside the warpgroup
    const int lane = tid & 31, cw = ctid >> 5, g = lane >> 2, qd = lane & 3;
    const unsigned sC = smem_u32(smem + OFF_C + c * C_WG_BYTES);
    float acc[WN / 2];
    const int rc = BM == 128 ? 64 * c : 0, cn = BM == 128 ? 0 : WN * c;  // this warpgroup's row / column offset
    int it = 0;
    for (int t = blockIdx.x; t < P.num_tiles; t += gridDim.x) {
        const TileCoord tc = tile_coord(P, t);
#pragma unroll
        for (int j = 0; j < WN / 2; ++j) acc[j] = 0.f;
        int prev = -1;  // the stage of the previous k-step, released once its wgmma group has completed
        for (int kt = 0; kt < KT; ++kt, ++it) {
            const int s = it % ST;
            mbar_wait(&full[s], (it / ST) & 1);
            unsigned char* sa = smem + s * STAGE_BYTES;
            unsigned char* sb = sa + A_BYTES;
            // A: K-major, 128-byte swizzle, 8-row groups 1024 B apart; a k16 step moves 32 B along the row
            // (+2 in the descriptor's 16-byte units). B K-major: the same. B N-major: rows are k, 64-column
            // boxes BK * 128 B apart (leading offset), a k16 step is 16 rows further.
            const unsigned long long da = smem_desc(sa + rc * 128, 128, 1024, 0);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < BK / 16; ++ks) {
                const unsigned long long db = MJ_B_NMAJOR ? smem_desc(sb + (cn / 64) * (BK * 128) + ks * 16 * 128, 128, 1024, BK * 128)
                                                          : smem_desc(sb + cn * 128, 128, 1024, 0) + 2 * ks;
                mma(acc, da + 2 * ks, db);
            }
            wgmma_commit();
            wgmma_wait<1>();  // the previous k-step's group is done: its stage can be refilled
            if (prev >= 0) mbar_arrive(&empty[prev]);
            prev = s;
        }
        wgmma_wait<0>();
#pragma unroll
        for (int j = 0; j < WN / 2; ++j) reg_fence(acc[j]);
        mbar_arrive(&empty[prev]);

        // ---- epilogue: the previous tile's store has read the staging tile; fill it; store it ----
        if (ctid == 0) bulk_wait_read_all();
        named_bar_sync(BAR_EPI + c, 128);
        const int rl0 = 16 * cw + g, rl1 = rl0 + 8;
#pragma unroll
        for (int j = 0; j < WN / 8; ++j) {
            const unsigned box = sC + (j >> 3) * (64 * 128);
            st_shared_b32(box + rl0 * 128 + (((j & 7) ^ (rl0 & 7)) << 4) + qd * 4, mj_pack_bf16x2(acc[4 * j], acc[4 * j + 1]));
            st_shared_b32(box + rl1 * 128 + (((j & 7) ^ (rl1 & 7)) << 4) + qd * 4, mj_pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]));
        }
        fence_proxy_async();  // the generic-proxy writes, before the TMA (async proxy) reads them
        named_bar_sync(BAR_EPI + c, 128);
        if (ctid == 0) {
#pragma unroll
            for (int j = 0; j < NBOX_WG; ++j) {
                const int row = tc.m * BM + rc;
                tma_store_3d(tm_c, smem + OFF_C + c * C_WG_BYTES + j * (64 * 128), tc.n * BN + cn + 64 * j,
                             P.c_batch_inner ? tc.b : row, P.c_batch_inner ? row : tc.b);
            }
            bulk_commit();
        }
    }
    if (ctid == 0) bulk_wait_read_all();  // shared memory must outlive the last store's reads
}

}  // namespace mj_gemm90

extern "C" __global__ void __launch_bounds__(mj_gemm90::NT, 1) mlajit_gemm_sm90(const __grid_constant__ GemmSm90Params P) {
    mj_gemm90::gemm(P);
}
