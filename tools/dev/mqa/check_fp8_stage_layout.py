#!/usr/bin/env python3
"""CPU check of the staged FP8 producer's shared-memory plan (kernels_src/sparse_mqa/sm90.cuh, MJ_MQA90_F8STAGE=1),
mirroring its raw_off / tile_off arithmetic:
  * every raw 16-byte chunk of a warp has its own place, inside that warp's rows of blocks 4-7 (no other warp
    reads or writes there);
  * pass b (output column block b) never overwrites raw codes a later pass still reads; pass 7 overwrites
    only its own (the kernel reads them all before a __syncwarp, then stores);
  * the copies (a warp instruction: 8 rows x 4 chunks), the pass loads (lane: row lane / 2, chunks 2h, 2h + 1)
    and the pass stores hit 8 distinct 16-byte bank groups in every quarter-warp.
Run: python3 tools/dev/mqa/check_fp8_stage_layout.py (prints OK or the first violation)."""
BLK = 64 * 128


def raw_off(pw, b, i, q):
    return (4 + (b >> 1)) * BLK + pw * 2048 + (b & 1) * 1024 + i * 64 + ((q ^ ((i >> 1) & 1)) << 4)


def out_off(r, chunk):  # tile_off for column chunk (0..63) of row r
    return (chunk >> 3) * BLK + r * 128 + (((chunk & 7) ^ (r & 7)) << 4)


def quarter_conflict_free(addrs):
    return all(len({(a >> 4) & 7 for a in addrs[k:k + 8]}) == 8 for k in range(0, 32, 8))


def main():
    for pw in range(4):
        rows = range(16 * pw, 16 * pw + 16)
        raw = {}
        for b in range(8):
            for i in range(16):
                for q in range(4):
                    a = raw_off(pw, b, i, q)
                    assert a not in raw, f"raw chunk collision at {a}"
                    assert 4 * BLK <= a < 8 * BLK and ((a % BLK) // 128) in rows, f"raw chunk outside warp {pw}'s rows"
                    raw[a] = b
        for b in range(8):
            writes = {out_off(16 * pw + i, 8 * b + c) for i in range(16) for c in range(8)}
            for a in writes:
                assert ((a % BLK) // 128) in rows
                if a in raw:
                    assert raw[a] < b or raw[a] == b == 7, f"pass {b} overwrites raw codes of pass {raw[a]}"
        for hf in range(2):  # copies: lane -> row 8 hf + lane / 4, chunk lane % 4
            for b in range(8):
                assert quarter_conflict_free([raw_off(pw, b, 8 * hf + l // 4, l % 4) for l in range(32)]), "copy conflict"
        for b in range(8):
            for k in range(2):  # pass loads: lane -> row lane / 2, chunk 2 (lane % 2) + k
                assert quarter_conflict_free([raw_off(pw, b, l // 2, 2 * (l % 2) + k) for l in range(32)]), "load conflict"
                for e in range(2):  # stores: output chunk 2q + e of the block, q = 2 (lane % 2) + k
                    st = [out_off(16 * pw + l // 2, 8 * b + 2 * (2 * (l % 2) + k) + e) for l in range(32)]
                    assert quarter_conflict_free(st), "store conflict"
    print("OK")


if __name__ == "__main__":
    main()
