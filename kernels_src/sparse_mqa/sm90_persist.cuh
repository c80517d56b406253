// Sparse MQA prefill, Hopper tier, 64 heads a block (sparse_mqa/sm90.cuh): the persistent grid (the spec's PERSIST = 1;
// schedule 1, bf16 cache, with the key-set pre-pass's list; the runtime launches it with MLAJIT_MQA_PERSIST64=1). Included
// by sm90.cuh inside namespace mj_mqa90, after the wgmma helpers.
//
// Why: one block a (token, head block) and one block a SM (the ring and Q take 216 KB) make every block pay its ramp with
// the tensor pipe idle: the launch, Q's load, the first tile's whole gather latency, then the epilogue (O staged and
// stored) with the gather idle. At 8k and 128 heads that is 16,384 blocks, 124 a SM; session 24 timed the blocks without
// tiles at 0.76 ms (H100), the first tile's latency comes on top.
// How: min(items, SMs) blocks; block b takes items b, b + grid, ..., item i being token(i / nhb) (the launcher's order: later
// tokens first) and head block i % nhb (a token's head blocks run side by side, sharing its rows in L2). The producer fills
// a ring numbered across the block's items (tile g in slot g % 2, that slot's use g / 2), so the next item's first tiles
// land while the current item ends. Q has one buffer (72 KB): warpgroup 0 issues the next item's Q once the current item's
// last S is complete, and both warpgroups store O straight from registers (Q's region, where the one-block form stages O,
// holds the next Q by then). Schedule 1's operations in the same order on the same tiles, so the same bits as that form.
#pragma once

static_assert(!kPersist || (kSched1 && !kFp8 && !kPair && !kSplitRel && MJ_MQA90_LATEHO == 0 && MJ_MQA90_PSYNC == 1 &&
                                        MJ_MQA90_DEV_SKIP == 0 && MJ_MQA_KEPT_LIST),
              "sparse MQA sm90, persistent grid: schedule 1, bf16 cache, the list, no development switch");

MJ_DEVICE void run_persistent(const SparseMqaFwdParams& p, unsigned char* smem) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int first = p.cu_seqlens_q ? p.cu_seqlens_q[0] : 0;
    const int ntok = (p.cu_seqlens_q ? p.cu_seqlens_q[p.batch] : p.s_q) - first;
    const int nh = p.num_heads, nhb = (nh + kH - 1) / kH;
    const int nitems = ntok * nhb;
    unsigned long long* full = (unsigned long long*)(smem + kOffBar);
    unsigned long long* empty = full + kS;
    // Q's load barrier (the 128 cp.async-completion arrivals of warpgroup 0), in the key-set area the list form does not use.
    unsigned long long* qfull = (unsigned long long*)(smem + kOffSet);
    if (tid == 0) {
        if ((mj90::smem_u32(smem) & 1023u) != 0u || p.kept_rows == nullptr) __trap();  // 1 KiB swizzle alignment; the list
        for (int s = 0; s < kS; ++s) {
            mj90::mbar_init(&full[s], 128);        // one cp.async-completion arrival per producer thread
            mj90::mbar_init(&empty[s], kConsumers);  // every math thread after its P V of the slot's tile
        }
        mj90::mbar_init(qfull, 128);
    }
    __syncthreads();
    // Item i's token (its row of the list: token - first) and first head.
    auto token = [&](int i) { return first + ntok - 1 - i / nhb; };
    auto head0_of = [&](int i) { return (i % nhb) * kH; };

    if (warp >= 8) {
        // ---- producer: the one-block form's copies (warp pw: rows 16 pw .. 16 pw + 15, one row an instruction) ----
        mj90::setmaxnreg_dec<kProducerRegs>();
        const int pw = warp - 8;
        int g = 0;  // the block's tiles so far
        for (int i = blockIdx.x; i < nitems; i += gridDim.x) {
            const int row = token(i) - first;
            const unsigned* kept = p.kept_rows + (mj_i64)row * p.kept_stride;
            const int nvalid = p.kept_count[row];
            const int ntiles = (nvalid + kN - 1) / kN;
            for (int t = 0; t < ntiles; ++t, ++g) {
                const int slot = g % kS, use = g / kS;
                const int c = t * kN + pw * 16 + (lane & 15);  // lanes 16..31 repeat lanes 0..15's rows
                const unsigned char* mine = c < nvalid ? mj_idx::units_row(p, kept[c]) : nullptr;
                if (use > 0) mj90::mbar_wait(&empty[slot], (unsigned)((use - 1) & 1));
                unsigned char* tile = smem + kOffK + slot * kTileBytes;
#pragma unroll 4
                for (int r = 0; r < 16; ++r) {
                    const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, r);
                    const bool ok = rowp != nullptr;
                    const unsigned char* src = ok ? rowp : (const unsigned char*)p.kv;
                    mj90::cp_async_16(tile + tile_off(pw * 16 + r, lane), src + lane * 16, ok);
                    mj90::cp_async_16(tile + tile_off(pw * 16 + r, lane + 32), src + (lane + 32) * 16, ok);
                    if (lane < 8) mj90::cp_async_16(tile + tile_off(pw * 16 + r, lane + 64), src + (lane + 64) * 16, ok);
                }
                mj90::cp_async_mbar_arrive_noinc(&full[slot]);
            }
        }
        mj90::cp_async_wait<0>();
        return;
    }

    // ---- math warpgroups: schedule 1 (see sm90.cuh), per item ----
    const int wg = warp >> 2;
    mj90::setmaxnreg_inc<kMathRegs>();
    const int wt = tid & 127;
    const int row0 = (wt >> 5) * 16 + (lane >> 2);  // accumulator rows row0, row0 + 8
    const int q4 = lane & 3;
    const float sl2 = p.sm_scale_log2;
    const unsigned sq = mj90::smem_u32(smem + kOffQ);
    const unsigned sk = mj90::smem_u32(smem + kOffK);
    float* s_alpha = (float*)(smem + kOffP);  // [2][64]: O rescale factors of the block's tile g at (g & 1)
    float* s_lsum = s_alpha + 128;            // [2][64]: the k-th item's row sums at (k & 1)
    // Item i's Q by warpgroup 0 (cp.async, completing qfull's next phase).
    auto load_q = [&](int i) {
        mj_tile90::load_q<kH, 128>(p, token(i), head0_of(i), smem + kOffQ, wt);
        mj90::cp_async_mbar_arrive_noinc(qfull);
    };
    if (wg == 0 && (int)blockIdx.x < nitems) load_q(blockIdx.x);

    int g = 0, k = 0;  // the block's tiles and items so far
    for (int i = blockIdx.x; i < nitems; i += gridDim.x, ++k) {
        const int tok = token(i), head0 = head0_of(i);
        const int nvalid = p.kept_count[tok - first];
        const int ntiles = (nvalid + kN - 1) / kN;
        const bool more = i + (int)gridDim.x < nitems;
        float o[128];
#pragma unroll
        for (int j = 0; j < 128; ++j) o[j] = 0.f;
        float m0 = MJ_NEG_INF, m1 = MJ_NEG_INF, l0 = 0.f, l1 = 0.f;
        if (wg == 0) {
            float s[32];
            mj_u32 pa[16];  // P as A fragments: k-step j (keys 16j..16j+15) is pa[4j..4j+3]
            auto issue_s = [&](unsigned tile) {
#pragma unroll
                for (int j = 0; j < 32; ++j) s[j] = 0.f;
                issue_qk<0, 36>(s, sq, tile);
            };
            mj90::mbar_wait(qfull, (unsigned)(k & 1));
            mj90::fence_proxy_async();  // Q, written by cp.async, is read by wgmma
            if (ntiles == 0 && more) load_q(i + gridDim.x);  // no S reads this Q
            if (ntiles > 0) {
                mj90::mbar_wait(&full[g % kS], (unsigned)((g / kS) & 1));
                mj90::fence_proxy_async();
                issue_s(sk + (g % kS) * kTileBytes);
                mj90::wgmma_wait<0>();
            }
            for (int t = 0; t < ntiles; ++t) {
                const int gt = g + t, slot = gt % kS;
                if (t + 1 == ntiles && more) load_q(i + gridDim.x);  // the item's last S is complete: Q is free
                s1_softmax(s, pa, o, m0, m1, l0, l1, nvalid - t * kN - 2 * q4, sl2, smem + kOffK + slot * kTileBytes,
                           s_alpha + (gt & 1) * 64, row0, q4);
                mj90::named_bar_sync_unaligned(kBarP0 + (gt & 1), kConsumers);  // P and the factors of gt handed over
                issue_pv_regs(o, pa, sk + slot * kTileBytes);
                if (t + 1 < ntiles) {
                    const int ns = (gt + 1) % kS;
                    mj90::mbar_wait(&full[ns], (unsigned)(((gt + 1) / kS) & 1));
                    mj90::fence_proxy_async();
                    issue_s(sk + ns * kTileBytes);
                    mj90::wgmma_wait<1>();  // P V of gt done (groups complete in order)
                    mj90::mbar_arrive(&empty[slot]);
                    mj90::wgmma_wait<0>();
                } else {
                    mj90::wgmma_wait<0>();
                    mj90::mbar_arrive(&empty[slot]);
                }
            }
            l0 = mj_warp_sum4(l0);
            l1 = mj_warp_sum4(l1);
            if (q4 == 0) {
                s_lsum[(k & 1) * 64 + row0] = l0;
                s_lsum[(k & 1) * 64 + row0 + 8] = l1;
            }
        } else {
            for (int t = 0; t < ntiles; ++t) {
                const int gt = g + t, slot = gt % kS;
                const unsigned tile = sk + slot * kTileBytes;
                mj90::named_bar_sync_unaligned(kBarP0 + (gt & 1), kConsumers);  // P of gt and its rescale factors are in place
                const float al0 = s_alpha[(gt & 1) * 64 + row0], al1 = s_alpha[(gt & 1) * 64 + row0 + 8];
                rescale_o(o, al0, al1);
                issue_pv_smem(o, tile + 8 * kBlk, tile + 4 * kBlk);
                mj90::wgmma_wait<0>();
                mj90::mbar_arrive(&empty[slot]);
            }
        }
        g += ntiles;
        // ---- epilogue: the row sums (warpgroup 0's) to both, lse / max_logits, O normalized and stored from registers.
        // s_lsum's buffer k & 1 is written again two items on, after warpgroup 1 has passed the next item's barrier.
        mj90::named_bar_sync_unaligned(kBarEnd, kConsumers);
        const float L0 = s_lsum[(k & 1) * 64 + row0], L1 = s_lsum[(k & 1) * 64 + row0 + 8];
        if (wg == 0 && q4 == 0) store_lse(p, tok, head0, row0, L0, L1, m0, m1);
        const float inv0 = L0 > 0.f ? 1.f / L0 : 0.f, inv1 = L1 > 0.f ? 1.f / L1 : 0.f;
        mj_u32* orow0 = (mj_u32*)((unsigned char*)p.out + ((mj_i64)tok * p.o_stride_tok + (mj_i64)(head0 + row0) * p.o_stride_head) * 2);
        mj_u32* orow1 = (mj_u32*)((unsigned char*)orow0 + (mj_i64)8 * p.o_stride_head * 2);
        const bool ok0 = head0 + row0 < nh, ok1 = head0 + row0 + 8 < nh;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            const int w = (wg * 256 + j * 8 + 2 * q4) >> 1;  // the 32-bit word of columns col, col + 1
            if (ok0) orow0[w] = mj_pack_bf16x2(o[4 * j] * inv0, o[4 * j + 1] * inv0);
            if (ok1) orow1[w] = mj_pack_bf16x2(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
        }
    }
}
