#!/usr/bin/env python3
"""CPU check of the staged FP8 producer's shared-memory plan (kernels_src/sparse_mqa/sm90.cuh, MJ_MQA90_F8STAGE=1),
mirroring its raw_off / tile_off arithmetic:
  * every raw 16-byte chunk of a warp has its own place, inside that warp's rows of blocks 4-7 (no other warp
    reads or writes there);
  * pass b (output column block b) never overwrites raw codes a later pass still reads; pass 7 overwrites
    only its own (the kernel reads them all before a __syncwarp, then stores);
  * the copies (a warp instruction: 8 rows x 4 chunks), the pass loads (lane: row lane / 2, chunks 2h, 2h + 1)
    and the pass stores hit 8 distinct 16-byte bank groups in every quarter-warp;
  * with MJ_MQA90_F8HELP (passes 0, 1, 4, 6 in the producer warp, 2, 3, 5, 7 in warpgroup 1's warp of the same
    row group, ordered across the two by the barrier edges "5 before 6" and "6 before 7"): every pass that
    overwrites raw codes is ordered after the pass that reads them, and no two passes write the same chunk.
Run: python3 tools/dev/mqa/check_fp8_stage_layout.py (prints OK or the first violation)."""
BLK = 64 * 128


def raw_off(pw, b, i, q):
    return (4 + (b >> 1)) * BLK + pw * 2048 + (b & 1) * 1024 + i * 64 + ((q ^ ((i >> 1) & 1)) << 4)


def out_off(r, chunk):  # tile_off for column chunk (0..63) of row r
    return (chunk >> 3) * BLK + r * 128 + (((chunk & 7) ^ (r & 7)) << 4)


def quarter_conflict_free(addrs):
    return all(len({(a >> 4) & 7 for a in addrs[k:k + 8]}) == 8 for k in range(0, 32, 8))


# Passes of a row group per warp in program order, and the cross-warp edges (pass x before pass y) the kernel's named
# barriers make: the staged producer alone, and the helped split (kBarHelpH: after the helper's pass 5 the producer
# runs 6; kBarHelpP: after the producer's pass 6 the helper runs 7).
SCHEDULES = {
    "staged": ([[0, 1, 2, 3, 4, 5, 6, 7]], []),
    "helped": ([[0, 1, 4, 6], [2, 3, 5, 7]], [(5, 6), (6, 7)]),
}


def happens_before(warps, edges):
    hb = set()
    for seq in warps:
        hb |= {(seq[i], seq[j]) for i in range(len(seq)) for j in range(i + 1, len(seq))}
    hb |= set(edges)
    changed = True
    while changed:  # transitive closure
        new = {(a, d) for (a, b) in hb for (c, d) in hb if b == c} - hb
        hb |= new
        changed = bool(new)
    return hb


def check_schedule(name, warps, edges, pw):
    hb = happens_before(warps, edges)
    rows = range(16 * pw, 16 * pw + 16)
    readers = {raw_off(pw, b, i, q): b for b in range(8) for i in range(16) for q in range(4)}
    writer = {}
    for b in range(8):
        for a in {out_off(r, 8 * b + c) for r in rows for c in range(8)}:
            assert a not in writer, f"{name}: passes {writer[a]} and {b} write the same chunk"
            writer[a] = b
            rd = readers.get(a)
            # a pass may overwrite its own codes (it reads them all before a __syncwarp, then stores)
            assert rd is None or rd == b or (rd, b) in hb, f"{name}: pass {b} may overwrite codes pass {rd} has not read"


def main():
    for name, (warps, edges) in SCHEDULES.items():
        assert sorted(sum(warps, [])) == list(range(8)), f"{name}: every pass exactly once"
        for pw in range(4):
            check_schedule(name, warps, edges, pw)
    # The check can fail: the helped split without the "6 before 7" edge lets pass 7 overwrite pass 6's codes.
    try:
        check_schedule("helped without 6 -> 7", [[0, 1, 4, 6], [2, 3, 5, 7]], [(5, 6)], 0)
        raise SystemExit("the schedule check accepted a racy schedule")
    except AssertionError:
        pass
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
