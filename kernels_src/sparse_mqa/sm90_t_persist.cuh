// Sparse MQA prefill, Hopper tier, keys as M (sparse_mqa/sm90_t.cuh): the persistent grid (the spec's PERSIST = 1). Included
// by sm90_t.cuh inside namespace mj_mqa90t, after tile_step, gather_rows and stage_o.
//
// Why: with one block a token and one block a SM (the ring takes most of shared memory), every token pays its ramp alone:
// the block's launch and Q load, then the first tile's whole gather latency before any math, then the epilogue with the
// gather idle. At 8k and 16 heads that is 62 tokens a SM (H100 session 24: a block without tiles costs ~3.6 us; the first
// tile's gather ~2 us more). Here a block stays on its SM and takes tokens b, b + grid, b + 2 grid, ... (the launcher's
// order: later tokens, which have more keys, first); its producer runs on into the next token's tiles while the math
// warpgroups finish the current one, and the next token's Q loads during the current token's loop.
//
// How the block's tiles flow (the same sums, so every result bit, as the one-block form: warpgroup t % 2 takes tile t of each
// token): the producer fills a ring numbered across the block's tokens, tile g of the block in slot g % 2, so it never waits
// for one slot while the other is free; warpgroup 1 hands its unscaled O^T, maxima and row sums over at a token's end and
// goes on to its next tile, and warpgroup 0 merges and stores alone (math_merged). Measured (8k, 16 heads, kernel alone):
// 2.763-2.769 ms against 3.007-3.025 for the first persistent form (tile t of each token in slot t % 2, both warpgroups
// meeting in a 256-thread epilogue) and 3.07-3.09 a block a token (H100, session 32); through the library 3.272-3.281 against
// 3.353-3.359 with the first form (H200, session 33, with the pre-pass). Alone, neither the ring (3.039 against 3.027) nor
// the merge (3.05 against 3.02) gained: the ring needs warpgroup 1 free to run ahead. Two producer streams, one a slot, were
// 37 % slower (session 30). The first form and both halves stayed behind switches until session 33 (rebuild at a49bf08 for
// them: MJ_MQA90T_RING / MJ_MQA90T_MERGE = 0).
// Q has two buffers; the epilogue stages O outside the ring, in one [kH][kWRow] fp32 buffer: warpgroup 1 stores its unscaled
// part, warpgroup 0 adds its own and warpgroup 1's times their factors (the same operations as the one-block form's
// 256-thread epilogue) and stores. Only with the key-set pre-pass's list (the set is a count and a list, no hash table in the
// ring): the host launches this form only then, with min(tokens, SMs) blocks.
#pragma once

// The full barriers for a slot's odd uses (full[slot] takes the even ones), in the key-set area, which the persistent form
// does not use. Why two a slot: warpgroup 1 runs up to a token ahead of warpgroup 0 (math_merged), and
// in the ring a slot's previous use may be warpgroup 0's tile, not yet gathered when warpgroup 1 waits for its own. With one
// barrier a slot that wait would be two phases ahead and its parity would match the phase before: it passed at once, read a
// stale tile and released the slot early (session 31, H200: one hang in two 8k runs and in the checks' batched case; the
// model tools/dev/mqa/persist_protocol.py finds stale reads, early overwrites and deadlocks there in ~40 % of random schedules,
// none with two barriers a slot).
// Alternating barriers put the slot's use u - 2 between the waiter and its phase, and that tile is always gathered: a
// warpgroup's previous tile is u - 1's or later (within a token its own tile g - 2; at a token's start its last tile of the
// previous token, or, for warpgroup 1 one token ahead, every tile up to warpgroup 0's last finished token).
constexpr int kOffFullOdd = kOffSet + 32;  // after the hand-over barriers (math_merged)
static_assert(mj_idx::kSetBytes >= 32 + 8 * kS, "the ring's odd-use barriers live in the key-set area");

// The full barriers (one a slot) that a slot's use-th tile completes, and the phase it completes there (full: smem + kOffBar).
MJ_DEVICE unsigned long long* full_bars(unsigned long long* full, int use) {
    return (use & 1) ? (unsigned long long*)((unsigned char*)full - kOffBar + kOffFullOdd) : full;
}
MJ_DEVICE unsigned use_phase(int use) { return (unsigned)((use >> 1) & 1); }

// Warpgroup wg's part of a token of nvalid keys in ntiles tiles: its softmax cleared, then tiles wg, wg + 2, ..., tile t in
// slot (g0 + t) % 2, that slot's use (g0 + t) / 2 (g0: the block's tiles before this token; it: the tiles the warpgroup took
// before, its maxima exchange's parity); g0 and it advanced past the token.
MJ_DEVICE void token_tiles(unsigned char* smem, int nvalid, int ntiles, int& g0, int& it, unsigned long long* full,
                           unsigned long long* empty, unsigned sq, float* xmax, float (&ot)[8][kAcc], float (&m)[kCols],
                           float (&l)[kCols], int wg, int wl, int row0, int q4, int lane, float sl2) {
    clear_softmax(ot, m, l);
    for (int t = wg; t < ntiles; t += 2, ++it) {
        const int slot = (g0 + t) & 1, use = (g0 + t) >> 1;
        tile_step(smem, slot, use_phase(use), t, nvalid, it, full_bars(full, use), empty, sq, xmax, ot, m, l, wg, wl, row0, q4,
                  lane, sl2);
    }
    g0 += ntiles;
}

// The math warpgroups without a barrier between them. At a token's end warpgroup 0 waits for warpgroup 1's
// hand-over, never the other way round, so warpgroup 1 can run up to one token ahead and keep slot 1's tiles moving while
// warpgroup 0 finishes the last tile of an odd count and the epilogue. The same operations as the 256-thread epilogue (merge
// factors from both warpgroups' maxima and sums, warpgroup 1's part times its factor added to warpgroup 0's: stage_o), so the same
// bits. Hand-overs by mbarriers in the key-set area, which the persistent form does not use: qfull[2] (Q buffer b's cp.async
// loads, issued by warpgroup 0 alone, 128 arrivals), staged (warpgroup 1's O^T, m and sums written, 128 arrivals), freed
// (warpgroup 0 has read them, 128 arrivals).
constexpr int kOffQFull = kOffSet, kOffStaged = kOffSet + 16, kOffFreed = kOffSet + 24;
static_assert(mj_idx::kSetBytes >= 32, "the hand-over barriers live in the key-set area");

MJ_DEVICE void math_merged(const SparseMqaFwdParams& p, unsigned char* smem, int first, int ntok, int head0,
                           unsigned long long* full, unsigned long long* empty) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for ptxas (see sm90_t.cuh)
    const int wl = warp & 3, row0 = wl * 16 + (lane >> 2), q4 = lane & 3;
    const float sl2 = p.sm_scale_log2;
    float* xmax = (float*)(smem + kOffX) + wg * 8 * kH;
    float* wst = (float*)(smem + kOffW);  // warpgroup 1's unscaled O^T, then the merged O, [kH][kWRow] fp32
    float* e_l = (float*)(smem + kOffE);
    unsigned long long* qfull = (unsigned long long*)(smem + kOffQFull);
    unsigned long long* staged = (unsigned long long*)(smem + kOffStaged);
    unsigned long long* freed = (unsigned long long*)(smem + kOffFreed);
    auto token = [&](int i) { return first + ntok - 1 - i; };
    // The block's k-th token's Q into buffer k & 1, by warpgroup 0: when it issues token k + 1's load at token k's start, both
    // warpgroups are done with token k - 1, the buffer's last reader (warpgroup 1 handed over k - 1 after its last tile).
    auto load_q = [&](int k, int i) {
        mj_tile90::load_q<kH, 128>(p, token(i), head0, mj90::smem_u32(smem + kOffQ) + (k & 1) * 9 * kQBlk, tid);
        mj90::cp_async_mbar_arrive_noinc(&qfull[k & 1]);
    };
    if (wg == 0 && (int)blockIdx.x < ntok) load_q(0, blockIdx.x);
    int it = 0, k = 0, g0 = 0;  // g0: the block's tiles before this token (token_tiles)
    for (int i = blockIdx.x; i < ntok; i += gridDim.x, ++k) {
        const int tok = token(i);
        if (wg == 0 && i + (int)gridDim.x < ntok) load_q(k + 1, i + gridDim.x);
        mj90::mbar_wait(&qfull[k & 1], (unsigned)((k >> 1) & 1));
        mj90::fence_proxy_async();  // Q, written by cp.async, is read by wgmma
        const unsigned sq = mj90::smem_u32(smem + kOffQ) + (k & 1) * 9 * kQBlk;
        const int nvalid = __shfl_sync(0xffffffffu, p.kept_count[tok - first], 0);
        const int ntiles = (nvalid + kN - 1) / kN;

        float ot[8][kAcc], m[kCols], l[kCols];
        token_tiles(smem, nvalid, ntiles, g0, it, full, empty, sq, xmax, ot, m, l, wg, wl, row0, q4, lane, sl2);

        float sc[kCols], scw[kCols], Lt[kCols], mt[kCols];
        if (wg == 1) {
            // ---- hand-over: once warpgroup 0 has read the previous token's ----
            if (k > 0) mj90::mbar_wait(freed, (unsigned)((k - 1) & 1));
            mj_mqa90t_common::publish_softmax<kH>(l, m, e_l, 1, wl, lane);
            stage_o<kStageRaw>(wst, ot, sc, sc, q4, row0);
            mj90::mbar_arrive(staged);
            continue;
        }
        // ---- warpgroup 0: merge, add warpgroup 1's part scaled, store ----
        mj_mqa90t_common::publish_softmax<kH>(l, m, e_l, 0, wl, lane);
        mj90::named_bar_sync_unaligned(1, 128);  // its 4 warps' sums, read by every warp below
        mj90::mbar_wait(staged, (unsigned)(k & 1));
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
            float fa, fb, inv;
            mj_mqa90t_common::merge_column<kH>(e_l, col_of(j, q4), sl2, fa, fb, Lt[j], inv, mt[j]);
            sc[j] = fa * inv;
            scw[j] = fb * inv;
        }
        stage_o<kStageAddScaled>(wst, ot, sc, scw, q4, row0);
        mj_mqa90t_common::store_out<kH, kWRow, 1, 128>(p, wst, Lt, mt, tok, head0, tid, 0, wl, lane, sl2, 1);
        mj90::mbar_arrive(freed);  // each thread's reads of wst and e_l ordered before its arrival; the phase needs all 128
    }
}

MJ_DEVICE void run_persistent(const SparseMqaFwdParams& p, unsigned char* smem) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int first = p.cu_seqlens_q ? p.cu_seqlens_q[0] : 0;
    const int ntok = (p.cu_seqlens_q ? p.cu_seqlens_q[p.batch] : p.s_q) - first;
    const int head0 = blockIdx.y * kH;
    unsigned long long* full = (unsigned long long*)(smem + kOffBar);
    unsigned long long* empty = full + kS;
    if (tid == 0) {
        if ((mj90::smem_u32(smem) & 1023u) != 0u || p.kept_rows == nullptr) __trap();  // 1 KiB swizzle alignment; the list
        for (int s = 0; s < kS; ++s) {
            mj90::mbar_init(&full[s], 128);  // one cp.async-completion arrival per producer thread
            mj90::mbar_init(&empty[s], 128);  // the warpgroup that took the slot's tile, after its O^T
        }
        unsigned long long* hand = (unsigned long long*)(smem + kOffQFull);  // qfull[2], staged, freed
        for (int b = 0; b < 4; ++b) mj90::mbar_init(&hand[b], 128);
        for (int s = 0; s < kS; ++s) mj90::mbar_init((unsigned long long*)(smem + kOffFullOdd) + s, 128);
    }
    __syncthreads();
    // The token of the block's item i (the launcher's order); token - first is its row of the list.
    auto token = [&](int i) { return first + ntok - 1 - i; };

    if (warp >= 8) {
        // ---- producer: tile g of the block (across its tokens) into slot g % 2, that slot's use g / 2 ----
        mj90::setmaxnreg_dec<kProducerRegs>();
        const int pw = warp - 8;
        constexpr int kR = kN / 4;
        const unsigned tile0 = mj90::smem_u32(smem + kOffK);
        int g0 = 0;  // the block's tiles before this token
        for (int i = blockIdx.x; i < ntok; i += gridDim.x) {
            const int slot_row = token(i) - first;
            const unsigned* kept = p.kept_rows + (mj_i64)slot_row * p.kept_stride;
            const int nvalid = p.kept_count[slot_row];
            const int ntiles = (nvalid + kN - 1) / kN;
            for (int t = 0; t < ntiles; ++t) {
                const int slot = (g0 + t) & 1, uses = (g0 + t) >> 1;
                const int c = t * kN + pw * kR + lane % kR;  // the lanes past kR repeat the first ones' rows
                const unsigned char* mine = c < nvalid ? mj_idx::units_row(p, kept[c]) : nullptr;
                if (uses > 0) mj90::mbar_wait(&empty[slot], (unsigned)((uses - 1) & 1));
                gather_rows(p, tile0 + slot * kTileBytes, mine, pw, lane);
                mj90::cp_async_mbar_arrive_noinc(&full_bars(full, uses)[slot]);
            }
            g0 += ntiles;
        }
        mj90::cp_async_wait<0>();
        return;
    }

    // ---- math warpgroups ----
    mj90::setmaxnreg_inc<kMathRegs>();
    math_merged(p, smem, first, ntok, head0, full, empty);
}
