// Sparse MQA, both tiers: the index row of one query token as a set of keys, compacted.
//
// A top-k selection is a set: every valid key of the row is attended exactly once, wherever it sits in the
// row and however often it is listed. Before its main loop a block turns its index row into
//   * keep: a bitmap over the row's positions, bit set where the position holds a valid key that no other
//     kept position holds (invalid = -1, outside [0, s_kv of the request), or, paged, on a page id outside
//     [0, num_pages));
//   * pref: the exclusive prefix count of keep per 32-position word (uint16), and nvalid, the total.
// The c-th kept key (c < nvalid) is then found by a binary search over pref and a find-n-th-set-bit in one
// word, so the main loop runs over ceil(nvalid / BLOCK_N) full tiles: -1 padding and duplicates cost nothing
// wherever they sit in the row.
// Duplicates are found with an open-addressing hash table in scratch shared memory (the gather ring, which is
// free before the pipeline starts): entries are (key, lowest position holding it), 64 bits each; the copy at
// the lowest position survives, so the compacted order (and with it every result bit) is the same on every
// run, whatever order the threads insert in.
//
// The key-set pre-pass (sparse_mqa/compact.cuh, SparseMqaFwdParams::kept_rows not NULL): a separate kernel builds each
// token's set once with the same build_keep and writes the set's c-th key as its latent row (write_kept_rows: 16-byte
// units from p.kv, in the same compacted order) and the set's size. The main kernels' entry points below then read the
// list: build_set only fetches the size (no hash table, no scan), set_row / set_key + key_row load row c's offset with
// one load. Same keys in the same order, so every result bit is the same as with the in-kernel build.
//
// Measured (H100, 8k paged, topk 2048; docs/PERF.md "Sparse MQA key-set pre-pass"): 16 heads 4.23 -> 3.32 ms with the
// pre-pass (3.09 the kernel alone, 0.21-0.23 the pre-pass), 128 heads 9.38 -> 8.64. The runtime runs it when the caller
// gives the op a workspace (mlajit_sparse_mqa_args.workspace; the one call's own). MJ_MQA_KEPT_LIST = 0 (development
// switch) compiles the kernels without the list form, as before session 26.
#pragma once
#include "mlajit_device.cuh"

#ifndef MJ_MQA_KEPT_LIST
#define MJ_MQA_KEPT_LIST 1
#endif

namespace mj_idx {

constexpr int kMaxWidth = mj_mqa_max_width;          // index row width bound (host refuses wider rows)
constexpr int kWords = kMaxWidth / 32;               // keep / pref entries
constexpr int kSetBytes = mj_mqa_index_set_bytes;    // keep [kWords] u32, pref [kWords] u16, nvalid
static_assert(kSetBytes >= kWords * 6 + 4, "index set layout");
constexpr int kHashSlotsMax = kMaxWidth;             // 8 bytes a slot
constexpr int kHashBytes = kHashSlotsMax * 8;         // scratch the widest row's table needs
static_assert(mj_mqa_hash_slots(kMaxWidth) == kHashSlotsMax, "hash table bound");
constexpr unsigned long long kEmpty = ~0ull;

// The key set in shared memory (kSetBytes at `base`): keep [kWords] u32, pref [kWords] u16, nvalid.
struct SetView {
    unsigned* keep;
    unsigned short* pref;
    int* nvalid;
};
MJ_DEVICE SetView set_view(unsigned char* base) {
    return {(unsigned*)base, (unsigned short*)(base + kWords * 4), (int*)(base + kWords * 6)};
}

// The request a token belongs to and where its keys live.
struct Request {
    int r;           // request number (0 in the single-sequence form)
    int kv_len;      // keys of the request: an index is valid iff 0 <= index < kv_len
    mj_i64 kv_base;  // contiguous form: kv row of the request's key 0
    int last;        // and index <= last (causal: the query's own key position; else kv_len - 1)
    int slot;        // the token's number within the call (tok - cu_seqlens_q[0]): its row of the pre-pass's list
    const unsigned* kept;  // that row (p.kept_rows + slot * p.kept_stride), or nullptr without the pre-pass
};

// The token of grid block `b` of `nblocks` (later tokens, which have more keys, go first) and its request.
// Batched form: the call covers tokens cu_q[0] .. cu_q[batch] - 1 (cu_q[0] may be > 0: a sub-batch of a
// larger batch, tensors still indexed from token 0).
MJ_DEVICE int token_of_block(const SparseMqaFwdParams& p, int b, int nblocks) {
    const int first = p.cu_seqlens_q ? p.cu_seqlens_q[0] : 0;
    return first + nblocks - 1 - b;
}
MJ_DEVICE Request request_of_token(const SparseMqaFwdParams& p, int tok) {
    Request q{0, p.s_kv, 0, p.s_kv - 1, tok, nullptr};
    int local = tok, s_q = p.s_q;  // the query's position within its request, the request's queries
    if (p.cu_seqlens_q != nullptr) {  // largest r with cu_q[r] <= tok
        q.slot = tok - p.cu_seqlens_q[0];
        int lo = 0, hi = p.batch;
        while (hi - lo > 1) {
            const int mid = (lo + hi) >> 1;
            if (p.cu_seqlens_q[mid] <= tok) lo = mid; else hi = mid;
        }
        q.r = lo;
        q.kv_base = p.cu_seqlens_kv[lo];
        q.kv_len = p.cu_seqlens_kv[lo + 1] - (int)q.kv_base;
        local = tok - p.cu_seqlens_q[lo];
        s_q = p.cu_seqlens_q[lo + 1] - p.cu_seqlens_q[lo];
    }
    q.last = p.causal ? q.kv_len - s_q + local : q.kv_len - 1;  // bottom-right causal alignment
    if (MJ_MQA_KEPT_LIST && p.kept_rows != nullptr) q.kept = p.kept_rows + (mj_i64)q.slot * p.kept_stride;
    return q;
}

// Block-table entry of key `key` of request `rq` (paged form), as stored: a page id only if page_ok.
MJ_DEVICE int page_entry(const SparseMqaFwdParams& p, const Request& rq, int key) {
    return p.block_table[(mj_i64)rq.r * p.bt_stride_req + key / p.block_size];
}
MJ_DEVICE bool page_ok(const SparseMqaFwdParams& p, int entry) { return entry >= 0 && entry < p.num_pages; }

// Bytes per kv stride unit: bf16 elements, or bytes for the FP8 cache (MJ_KV_FP8: uint8 rows of 656).
constexpr int kKvElemBytes = MJ_KV_FP8 ? 1 : 2;

// The latent row of a valid key (already checked by the set build).
MJ_DEVICE const unsigned char* kv_row(const SparseMqaFwdParams& p, const Request& rq, int key) {
    const unsigned char* kv = (const unsigned char*)p.kv;
    if (p.block_table != nullptr) {
        const int pg = page_entry(p, rq, key);
        return kv + ((mj_i64)pg * p.kv_stride_page + (mj_i64)(key % p.block_size) * p.kv_stride_tok) * kKvElemBytes;
    }
    return kv + (rq.kv_base + key) * p.kv_stride_tok * kKvElemBytes;
}
// A latent row as the pre-pass's list stores it: 16-byte units from p.kv (the host takes the list form only where every
// row is 16-byte aligned and the cache spans less than 2^32 units), and back.
MJ_DEVICE unsigned row_units(const SparseMqaFwdParams& p, const unsigned char* row) {
    return (unsigned)((unsigned long long)(row - (const unsigned char*)p.kv) >> 4);
}
MJ_DEVICE const unsigned char* units_row(const SparseMqaFwdParams& p, unsigned units) {
    return (const unsigned char*)p.kv + ((unsigned long long)units << 4);
}

// A key is valid iff it is in its request's range (key_in_range) and, paged, its block-table entry is a page (page_ok).
MJ_DEVICE bool key_in_range(const Request& rq, int key) { return key >= 0 && key < rq.kv_len && key <= rq.last; }

MJ_DEVICE unsigned hash_slot(unsigned key, unsigned mask) { return (key * 2654435761u >> 7) & mask; }

// Hash-table slots for a row of `width` positions (mlajit_abi.h's rule, which the pre-pass's host side sizes its shared
// memory with): a power of two >= 2 * width (load factor <= 1/2), at most kHashSlotsMax (then >= width: the load factor
// stays <= 1 and every insert finds a slot).
MJ_DEVICE int hash_slots(int width) { return mj_mqa_hash_slots(width); }

// Inserts (key, pos) keeping the lowest position per key; returns the slot.
MJ_DEVICE unsigned hash_insert(unsigned long long* tab, unsigned mask, unsigned key, unsigned pos) {
    const unsigned long long mine = ((unsigned long long)key << 32) | pos;
    unsigned s = hash_slot(key, mask);
    unsigned long long cur = tab[s];
    for (;;) {
        if (cur == kEmpty || (unsigned)(cur >> 32) == key) {
            if (cur != kEmpty && (unsigned)cur <= pos) return s;  // a lower copy is already there
            const unsigned long long seen = atomicCAS(&tab[s], cur, mine);
            if (seen == cur) return s;
            cur = seen;  // lost a race: look at what is there now (same slot)
        } else {
            s = (s + 1) & mask;
            cur = tab[s];
        }
    }
}

// Builds keep / pref / nvalid for the token's row (width <= MAXW). All THREADS threads of the block call it; `hash`
// is scratch of >= hash_slots(width) * 8 bytes. Ends with a block barrier; the scratch is free again afterwards. Reads
// every index of the row once (plus one block-table entry per valid index in the paged form). The kernels call it
// through build_set; the pre-pass (sparse_mqa/compact.cuh) directly, with a MAXW its launch guarantees.
template <int THREADS, int MAXW = kMaxWidth>
MJ_DEVICE void build_keep(const SparseMqaFwdParams& p, const Request& rq, const int* irow, int width, unsigned* keep,
                          unsigned short* pref, int* nvalid, unsigned long long* hash) {
    static_assert(THREADS % 32 == 0, "whole warps");
    static_assert(MAXW % 32 == 0 && MAXW <= kMaxWidth, "row width bound");
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int slots = hash_slots(width);
    const unsigned mask = (unsigned)slots - 1;
    // Pass 1: every valid position inserts itself; the table ends with the lowest position of each key.
    // Each thread remembers the slots of its positions (rows up to kMaxWidth: kMaxWidth / THREADS + 1 each).
    // The loads go out kBatch positions at a time, every index-row load of a batch, then every block-table load,
    // before the first insert: one position at a time (load, dependent load, insert) cost ~11-13 us a block at width
    // 2048, 14-18 % of the Hopper kernels (session 24, docs/PERF.md). The first batch's index loads are issued before
    // the table is cleared, so their latency hides behind the clearing and its barrier.
    constexpr int kPer = (MAXW + THREADS - 1) / THREADS;
    constexpr int kBatch = 8;
    const bool paged = p.block_table != nullptr;
    auto pos_of = [&](int i) { return w * 32 + i * THREADS + lane; };
    int key[kBatch];
    auto load_keys = [&](int i0) {
#pragma unroll
        for (int j = 0; j < kBatch; ++j) key[j] = i0 + j < kPer && pos_of(i0 + j) < width ? irow[pos_of(i0 + j)] : -1;
    };
    load_keys(0);
    for (int i = tid; i < slots; i += THREADS) hash[i] = kEmpty;
    __syncthreads();
    int slot_of[kPer];
#pragma unroll
    for (int i0 = 0; i0 < kPer; i0 += kBatch) {
        if (i0 > 0) {
            if (w * 32 + i0 * THREADS >= width) break;  // uniform across the warp
            load_keys(i0);
        }
        bool ok[kBatch];
        int entry[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            ok[j] = key_in_range(rq, key[j]);
            entry[j] = paged && ok[j] ? page_entry(p, rq, key[j]) : 0;
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            if (i0 + j >= kPer) break;
            const bool valid = ok[j] && (!paged || page_ok(p, entry[j]));
            slot_of[i0 + j] = valid ? (int)hash_insert(hash, mask, (unsigned)key[j], (unsigned)pos_of(i0 + j)) : -1;
        }
    }
    __syncthreads();
    // Pass 2: a position is kept iff it is its key's lowest. Each warp's 32 consecutive positions: one word.
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int base = w * 32 + i * THREADS;
        if (base >= width) break;  // uniform across the warp
        const int pos = base + lane;
        const bool keepit = slot_of[i] >= 0 && (unsigned)hash[slot_of[i]] == (unsigned)pos;
        const unsigned bal = __ballot_sync(0xffffffffu, keepit);
        if (lane == 0) keep[base >> 5] = bal;
    }
    __syncthreads();
    // Exclusive prefix over the row's words (<= 256): warp 0, 8 words a lane.
    if (w == 0) {
        const int nw = (width + 31) >> 5;
        constexpr int kWordsPerLane = kWords / 32;
        int c[kWordsPerLane], sum = 0;
#pragma unroll
        for (int i = 0; i < kWordsPerLane; ++i) {
            const int wd = lane * kWordsPerLane + i;
            c[i] = wd < nw ? __popc(keep[wd]) : 0;
            sum += c[i];
        }
        int incl = sum;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += v;
        }
        int run = incl - sum;
#pragma unroll
        for (int i = 0; i < kWordsPerLane; ++i) {
            const int wd = lane * kWordsPerLane + i;
            if (wd < nw) pref[wd] = (unsigned short)run;
            run += c[i];
        }
        if (lane == 31) *nvalid = incl;
    }
    __syncthreads();
}

// The kernels' entry: builds the token's set (build_keep), or, with the pre-pass's list (rq.kept), only fetches its
// size; the scratch is then not touched. Ends with a block barrier either way.
template <int THREADS>
MJ_DEVICE void build_set(const SparseMqaFwdParams& p, const Request& rq, const int* irow, int width, unsigned* keep,
                         unsigned short* pref, int* nvalid, unsigned long long* hash) {
    if (rq.kept != nullptr) {
        if (threadIdx.x == 0) *nvalid = p.kept_count[rq.slot];
        __syncthreads();
        return;
    }
    build_keep<THREADS>(p, rq, irow, width, keep, pref, nvalid, hash);
}

// The pre-pass's output for a built set (after build_keep, all THREADS threads): out[c] = the c-th kept key's latent row
// (row_units), c < nvalid, in the compacted order. A kept position's c is its word's prefix plus the kept positions below
// it in the word. The index-row and block-table loads (cache hits: build_keep just read them) go out before the stores.
template <int THREADS, int MAXW = kMaxWidth>
MJ_DEVICE void write_kept_rows(const SparseMqaFwdParams& p, const Request& rq, const int* irow, int width, const unsigned* keep,
                               const unsigned short* pref, unsigned* out) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    constexpr int kPer = (MAXW + THREADS - 1) / THREADS;
    int key[kPer];
    unsigned word[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int base = w * 32 + i * THREADS;
        word[i] = base < width ? keep[base >> 5] : 0u;
        key[i] = (word[i] >> lane) & 1u ? irow[base + lane] : -1;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        if (key[i] < 0) continue;
        const int base = w * 32 + i * THREADS;
        const int c = (int)pref[base >> 5] + __popc(word[i] & ((1u << lane) - 1u));
        out[c] = row_units(p, kv_row(p, rq, key[i]));
    }
}

// Position in the row of the c-th kept key (0 <= c < nvalid).
MJ_DEVICE int kept_position(const unsigned* keep, const unsigned short* pref, int nwords, int c) {
    int lo = 0, hi = nwords;  // largest word with pref <= c
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if ((int)pref[mid] <= c) lo = mid; else hi = mid;
    }
    unsigned bit;
    asm("fns.b32 %0, %1, 0, %2;" : "=r"(bit) : "r"(keep[lo]), "r"(c - (int)pref[lo] + 1));
    return lo * 32 + (int)bit;
}

// The latent row of the set's c-th key (index row irow, nwords words of the set), or nullptr past the set (c >= nvalid):
// what a Hopper producer lane copies (or zero-fills) for tile row c. With the pre-pass's list: its entry c.
MJ_DEVICE const unsigned char* set_row(const SparseMqaFwdParams& p, const Request& rq, const int* irow, const SetView& ks, int nwords,
                                       int nvalid, int c) {
    if (c >= nvalid) return nullptr;
    if (rq.kept != nullptr) return units_row(p, rq.kept[c]);
    return kv_row(p, rq, irow[kept_position(ks.keep, ks.pref, nwords, c)]);
}

// The key of the set's c-th position, or -1 past the set; then that key's row (nullptr for -1): set_row in two steps, so
// the FP8 producers issue a row's two dependent loads (index row, block table) a tile apart. (The bf16 producers did the
// same under a development switch in session 23; no faster on an H100, docs/PERF.md, removed.) With the pre-pass's list
// (rq.kept) the "key" is c itself and key_row makes the one load (the list's entry c).
MJ_DEVICE int set_key(const Request& rq, const int* irow, const SetView& ks, int nwords, int nvalid, int c) {
    if (c >= nvalid) return -1;
    if (rq.kept != nullptr) return c;
    return irow[kept_position(ks.keep, ks.pref, nwords, c)];
}
MJ_DEVICE const unsigned char* key_row(const SparseMqaFwdParams& p, const Request& rq, int key) {
    if (key < 0) return nullptr;
    return rq.kept != nullptr ? units_row(p, rq.kept[key]) : kv_row(p, rq, key);
}

}  // namespace mj_idx
