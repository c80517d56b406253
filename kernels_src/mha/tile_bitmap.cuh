// Masked MHA, both tiers: the bitmap of key tiles a block visits (bit t: some row of the block attends a key of tile t,
// tiles of WPT mask words), built once per block from the block's mask rows, and the walk over it. Tiles at or past
// BITMAP_TILES have no bit and are always visited.
#pragma once
#include "mlajit_device.cuh"

namespace mj_tile_bitmap {

// ORs mask words [0, words) of rows [0, rows) (row r at gmask + r * stride_row) into the bitmap, by threads 0..NT-1 (the
// caller's `tid`); the caller zeroes or presets the bitmap and synchronizes before and after. Each thread ORs one word
// column over a strided set of rows, so a block reads each mask row coalesced and issues one shared atomic per (thread,
// pass) instead of one per word. A column stops at its first nonzero batch: with top-k masks spread over the prefix that
// is the first batch, so the pass costs about one memory round trip; only sparse columns read every row.
template <int NT, int WPT>
MJ_DEVICE void or_mask_columns(unsigned* bitmap, const unsigned* gmask, mj_i64 stride_row, int rows, int words, int tid) {
    int lg = 0;
    while ((1 << lg) < words && (1 << lg) < NT) ++lg;
    const int wl = 1 << lg, rstep = NT >> lg;
    for (int wb = 0; wb < words; wb += wl) {
        const int wi = wb + (tid & (wl - 1));
        unsigned acc = 0;
        if (wi < words) {
            for (int r = tid >> lg; r < rows && acc == 0u; r += 8 * rstep) {
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    const int rr = r + u * rstep;
                    if (rr < rows) acc |= gmask[(mj_i64)rr * stride_row + wi];
                }
            }
        }
        if (acc) atomicOr(&bitmap[(wi / WPT) >> 5], 1u << ((wi / WPT) & 31));
    }
}

// The first tile after t whose bit is set (or that is at or past BITMAP_TILES), or -1 past n_tiles.
template <int BITMAP_TILES>
MJ_DEVICE int next_visited_tile(const unsigned* bitmap, int t, int n_tiles) {
    int c = t + 1;
    while (c < n_tiles) {
        if (c >= BITMAP_TILES) return c;
        const unsigned bits = bitmap[c >> 5] >> (c & 31);
        if (bits) return c + __ffs(bits) - 1;
        c = (c | 31) + 1;
    }
    return -1;
}

}  // namespace mj_tile_bitmap
