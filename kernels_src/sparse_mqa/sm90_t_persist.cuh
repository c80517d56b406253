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
// What changes against the one-block-a-token form: each slot's barrier phases count the slot's uses across tokens (tile t of
// every token still goes to slot t % 2 and warpgroup t % 2, so the sums, and every result bit, are those of that form; a ring
// numbered across tokens, tried first, gave the warpgroups other tiles of a token after an odd count, and other rounding: H100,
// 8k, 16 heads, 2.763 ms against 3.100 for that form, rel. L2 1.5e-3 between them). This form measured 2.998 against 3.091
// (H100, session 29; same bits): after a token with an odd tile count the in-order producer's next tile 0 waits for slot 0,
// held by warpgroup 0's last tile, with slot 1 free. Session 30 (H100, 8k, 16 heads, against 3.02 ms for this form): two
// producer streams, one a slot, 4.15 ms (each tile gathered by two warps on the critical path; removed); warpgroup 0 merging
// alone (MJ_MQA90T_MERGE) 3.05. Session 31 (H200, 8k, 16 heads, against 3.027 ms for this form): the ring across tokens
// (MJ_MQA90T_RING) alone 3.039; ring and merge together 2.789 with the same bits, but it hung (see full_bars). Session 32
// (H100, the fix: 8k 16 heads 2.763-2.769 against 3.007-3.025 for this form; 92 / 92 checks with 1, 2, 3 and 5 blocks,
// the same bits; memcheck, racecheck, synccheck clean; the library's suites, sanitizers and soak with both) made both the
// default; without either switch the form is the one described above. Q has two buffers; the epilogue stages O
// outside the ring, in one [kH][kWRow] fp32 buffer: warpgroup 1 stores its part (scaled; unscaled in math_merged), warpgroup 0
// adds its own in place (the same sum, a + b = b + a, as the two-buffer form), then all 256 threads store (warpgroup 0 alone in
// math_merged). Only with the key-set pre-pass's list (the set
// is a count and a list, no hash table in the ring): the host launches this form only then, with min(tokens, SMs) blocks.
#pragma once

#ifndef MJ_MQA90T_MERGE  // 1 (default): warpgroup 1 hands its unscaled O^T, maxima and row sums over at a token's end and goes on
                         // to its next tile; warpgroup 0 merges and stores alone (math_merged). 0: both meet in a 256-thread
                         // epilogue (kept for comparison). Same bits either way; 1 % slower alone (session 30), 8 % faster
                         // with MJ_MQA90T_RING (sessions 31, 32)
#define MJ_MQA90T_MERGE 1
#endif
constexpr bool kMerge = MJ_MQA90T_MERGE != 0;
#ifndef MJ_MQA90T_RING  // 1 (default): the block's tiles numbered across its tokens, tile g in slot g % 2 (the producer never
                        // waits for one slot while the other is free), warpgroup t % 2 still taking tile t of each token (the
                        // one-block form's sums, so its bits); 0: tile t of each token in slot t % 2 (kept for comparison; alone
                        // the ring is no faster, with MJ_MQA90T_MERGE 8 %). The protocol's model: tools/dev/mqa/persist_protocol.py
#define MJ_MQA90T_RING 1
#endif
constexpr bool kRing = MJ_MQA90T_RING != 0;

// The ring form's full barriers for a slot's odd uses (full[slot] takes the even ones), in the key-set area, which the
// persistent form does not use. Why two a slot: with MJ_MQA90T_MERGE warpgroup 1 runs up to a token ahead of warpgroup 0, and
// in the ring a slot's previous use may be warpgroup 0's tile, not yet gathered when warpgroup 1 waits for its own. With one
// barrier a slot that wait would be two phases ahead and its parity would match the phase before: it passed at once, read a
// stale tile and released the slot early (session 31, H200: one hang in two 8k runs and in the checks' batched case; the
// model tools/dev/mqa/persist_protocol.py finds stale reads, early overwrites and deadlocks there in ~40 % of random schedules,
// none with two barriers a slot).
// Alternating barriers put the slot's use u - 2 between the waiter and its phase, and that tile is always gathered: a
// warpgroup's previous tile is u - 1's or later (within a token its own tile g - 2; at a token's start its last tile of the
// previous token, or, for warpgroup 1 one token ahead, every tile up to warpgroup 0's last finished token).
constexpr int kOffFullOdd = kOffSet + 32;  // after the hand-over barriers (math_merged)
static_assert(!kRing || mj_idx::kSetBytes >= 32 + 8 * kS, "the ring's odd-use barriers live in the key-set area");

// The full barriers (one a slot) that a slot's use-th tile completes, and the phase it completes there (full: smem + kOffBar).
MJ_DEVICE unsigned long long* full_bars(unsigned long long* full, int use) {
    return kRing && (use & 1) ? (unsigned long long*)((unsigned char*)full - kOffBar + kOffFullOdd) : full;
}
MJ_DEVICE unsigned use_phase(int use) { return (unsigned)((kRing ? use >> 1 : use) & 1); }

// Tile t of the block's current token (g0: the tiles of its earlier tokens; it: the tiles the warpgroup took before): its slot
// and that slot's use count.
MJ_DEVICE void tile_place(int g0, int t, int wg, int it, int& slot, int& use) {
    if constexpr (kRing) {
        slot = (g0 + t) & 1;
        use = (g0 + t) >> 1;
    } else {
        slot = wg;
        use = it;
    }
}

// Warpgroup wg's part of a token of nvalid keys in ntiles tiles: its softmax cleared, then tiles wg, wg + 2, ... from where
// tile_place finds them; g0 and it advanced past the token.
MJ_DEVICE void token_tiles(unsigned char* smem, int nvalid, int ntiles, int& g0, int& it, unsigned long long* full,
                           unsigned long long* empty, unsigned sq, float* xmax, float (&ot)[8][kAcc], float (&m)[kCols],
                           float (&l)[kCols], int wg, int wl, int row0, int q4, int lane, float sl2) {
    clear_softmax(ot, m, l);
    for (int t = wg; t < ntiles; t += 2, ++it) {
        int slot, use;
        tile_place(g0, t, wg, it, slot, use);
        tile_step(smem, slot, use_phase(use), t, nvalid, it, full_bars(full, use), empty, sq, xmax, ot, m, l, wg, wl, row0, q4,
                  lane, sl2);
    }
    g0 += ntiles;
}

// MJ_MQA90T_MERGE = 1: the math warpgroups without a barrier between them. At a token's end warpgroup 0 waits for warpgroup 1's
// hand-over, never the other way round, so warpgroup 1 can run up to one token ahead and keep slot 1's tiles moving while
// warpgroup 0 finishes the last tile of an odd count and the epilogue. The same operations as the 256-thread epilogue (merge
// factors from both warpgroups' maxima and sums, warpgroup 1's part times its factor added to warpgroup 0's: stage_o), so the same
// bits. Hand-overs by mbarriers in the key-set area, which the persistent form does not use: qfull[2] (Q buffer b's cp.async
// loads, issued by warpgroup 0 alone, 128 arrivals), staged (warpgroup 1's O^T, m and sums written, 128 arrivals), freed
// (warpgroup 0 has read them, 128 arrivals).
constexpr int kOffQFull = kOffSet, kOffStaged = kOffSet + 16, kOffFreed = kOffSet + 24;
static_assert(!kMerge || mj_idx::kSetBytes >= 32, "the hand-over barriers live in the key-set area");

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
        mj_tile90::load_q<kH, 128>(p, token(i), head0, smem + kOffQ + (k & 1) * 9 * kQBlk, tid);
        mj90::cp_async_mbar_arrive_noinc(&qfull[k & 1]);
    };
    if (wg == 0 && (int)blockIdx.x < ntok) load_q(0, blockIdx.x);
    int it = 0, k = 0, g0 = 0;  // g0: the block's tiles before this token (tile_place)
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
        if (kMerge) {
            unsigned long long* hand = (unsigned long long*)(smem + kOffQFull);  // qfull[2], staged, freed
            for (int b = 0; b < 4; ++b) mj90::mbar_init(&hand[b], 128);
        }
        if (kRing)
            for (int s = 0; s < kS; ++s) mj90::mbar_init((unsigned long long*)(smem + kOffFullOdd) + s, 128);
    }
    __syncthreads();
    // The token of the block's item i (the launcher's order); token - first is its row of the list.
    auto token = [&](int i) { return first + ntok - 1 - i; };

    if (warp >= 8) {
        // ---- producer: tile t of each of the block's tokens into slot t % 2 (MJ_MQA90T_RING: tile g of the block into g % 2) ----
        mj90::setmaxnreg_dec<kProducerRegs>();
        const int pw = warp - 8;
        constexpr int kR = kN / 4;
        int uses0 = 0, uses1 = 0;  // tiles that went through slot 0 / 1 so far
        int g0 = 0;                // the ring's tiles before this token (MJ_MQA90T_RING)
        for (int i = blockIdx.x; i < ntok; i += gridDim.x) {
            const int slot_row = token(i) - first;
            const unsigned* kept = p.kept_rows + (mj_i64)slot_row * p.kept_stride;
            const int nvalid = p.kept_count[slot_row];
            const int ntiles = (nvalid + kN - 1) / kN;
            for (int t = 0; t < ntiles; ++t) {
                const int slot = kRing ? (g0 + t) & 1 : t & 1, uses = slot ? uses1 : uses0;
                const int c = t * kN + pw * kR + lane % kR;  // the lanes past kR repeat the first ones' rows
                const unsigned char* mine = c < nvalid ? mj_idx::units_row(p, kept[c]) : nullptr;
                if (uses > 0) mj90::mbar_wait(&empty[slot], (unsigned)((uses - 1) & 1));
                gather_rows(p, smem + kOffK + slot * kTileBytes, mine, pw, lane);
                mj90::cp_async_mbar_arrive_noinc(&full_bars(full, uses)[slot]);
                if (slot) ++uses1; else ++uses0;
            }
            g0 += ntiles;
        }
        mj90::cp_async_wait<0>();
        return;
    }

    // ---- math warpgroups ----
    if constexpr (kMerge) {
        mj90::setmaxnreg_inc<kMathRegs>();
        math_merged(p, smem, first, ntok, head0, full, empty);
        return;
    }
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for ptxas (see sm90_t.cuh)
    mj90::setmaxnreg_inc<kMathRegs>();
    const int wl = warp & 3;
    const int row0 = wl * 16 + (lane >> 2);
    const int q4 = lane & 3;
    const float sl2 = p.sm_scale_log2;
    float* xmax = (float*)(smem + kOffX) + wg * 8 * kH;
    float* wst = (float*)(smem + kOffW);  // the epilogue's O, [kH][kWRow] fp32
    if ((int)blockIdx.x < ntok) mj_tile90::load_q<kH, 256>(p, token(blockIdx.x), head0, smem + kOffQ, tid);
    int it = 0, k = 0, g0 = 0;  // it: the tiles this warpgroup has taken (its maxima exchange's parity); g0: tile_place
    for (int i = blockIdx.x; i < ntok; i += gridDim.x, ++k) {
        const int tok = token(i);
        // The next token's Q into the other buffer: the previous token's S, its last reader, finished before that token's
        // epilogue barriers, which every math thread has passed.
        if (i + (int)gridDim.x < ntok) {
            mj_tile90::load_q<kH, 256>(p, token(i + gridDim.x), head0, smem + kOffQ + ((k + 1) & 1) * 9 * kQBlk, tid);
            mj90::cp_async_wait<1>();
        } else {
            mj90::cp_async_wait<0>();
        }
        mj90::fence_proxy_async();  // Q, written by cp.async, is read by wgmma
        mj90::named_bar_sync_unaligned(kBarEnd, 256);
        const unsigned sq = mj90::smem_u32(smem + kOffQ) + (k & 1) * 9 * kQBlk;
        // The set's size, the same in every lane (a loop bound ptxas must see as warp-uniform: see sm90_t.cuh).
        const int nvalid = __shfl_sync(0xffffffffu, p.kept_count[tok - first], 0);
        const int ntiles = (nvalid + kN - 1) / kN;

        float ot[8][kAcc], m[kCols], l[kCols];
        token_tiles(smem, nvalid, ntiles, g0, it, full, empty, sq, xmax, ot, m, l, wg, wl, row0, q4, lane, sl2);
        even_barrier_counts(wg, ntiles);

        // ---- epilogue: the two softmaxes merged; warpgroup 1's scaled O staged, warpgroup 0's added to it; stored ----
        float sc[kCols], Lt[kCols], mt[kCols];
        mj_mqa90t_common::merge_softmax<kH>(l, m, (float*)(smem + kOffE), wg, wl, lane, sl2, kBarEnd, sc, Lt, mt);
        if (wg == 1) stage_o<kStageScaled>(wst, ot, sc, sc, q4, row0);
        mj90::named_bar_sync_unaligned(kBarEnd, 256);
        if (wg == 0) stage_o<kStageAdd>(wst, ot, sc, sc, q4, row0);
        mj_mqa90t_common::store_out<kH, kWRow, 1>(p, wst, Lt, mt, tok, head0, tid, wg, wl, lane, sl2, kBarEnd);
    }
}
