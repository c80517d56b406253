#!/usr/bin/env python3
"""Fits the planner's cost-model rates (src/planner/cost_model.cpp, h200_mlajit_rates) to a calibration
table written by `mlajit-warmup calibrate` (whole-path times of mlajit_mla_prefill).

Model (cost_model.h): MHA path = up-projection + mask build + masked attention; sparse MQA path =
absorption/output bmm's + sparse attention at the head tile mlajit's kernel uses (16, 32 or 64 heads).
Within one head count the absorption and the sparse attention both scale with s_q * heads, so they cannot
be told apart from whole-path times: the absorption keeps the cuBLAS rate fitted on the anchors, and one
(rate, overhead) is fitted per sparse tile. The MHA side fits up-projection rate, attention rate and one
overhead jointly on the masked cells (s_k > topk; below, the path is dense MHA whatever is predicted).
Every fit is least squares on the relative error (weights 1/t^2). Pure Python (no numpy on the dev box).

It then prints the rates as C++ for h200_mlajit_rates(), each path's fixed cost per step (what batch-level
routing counts once per step of the one call: the overhead terms, planner.h), and the two paths of issue 13's
batch (64 requests of 64 new tokens over 3000 cached, 16 heads) as one batched step each. With --evaluate,
it scores the refit model on the off-grid shapes of a `mlajit-warmup calibrate --evaluate` log (the rows
under "evaluation on shapes the table was not measured at"): how often it picks the faster measured path,
and the time lost against always picking it.

--upproj T pins the up-projection's rate at T TFLOP/s instead of fitting it (see main()).

usage: fit_rates.py NVIDIA_H200.json [--upproj TFLOPS] [--evaluate calibrate.log]
"""
import json
import math
import sys

ABSORB = (379.3, 0.0494)          # TFLOP/s, ms: the anchors' cuBLAS bmm fit (cost_model.cpp)
MASK = (0.0060, 1.12e-9, 1.0e-9)  # ms, ms per index, ms per word: mlajit's topk_mask kernel (cost_model.cpp)


def solve(a, b):
    """Gaussian elimination for a small dense system."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def wls(rows, ys):
    """min sum ((x.beta - y) / y)^2 over beta."""
    k = len(rows[0])
    ata = [[sum(r[i] * r[j] / y ** 2 for r, y in zip(rows, ys)) for j in range(k)] for i in range(k)]
    aty = [sum(r[i] * y / y ** 2 for r, y in zip(rows, ys)) for i in range(k)]
    return solve(ata, aty)


def pairs(sq, sk):
    return sq * (sk - sq) + sq * sq / 2


def valid(sq, sk, topk):
    """Sum over the queries of min(topk, causal prefix): the indices that are not -1 padding."""
    first = sk - sq + 1  # prefix of the first query
    full_from = max(0, topk - first + 1)  # queries i >= this have >= topk keys
    part = min(sq, full_from)
    return part * first + part * (part - 1) / 2 + (sq - part) * topk


def tile(h):
    return 16 if h <= 16 else 32 if h <= 32 else 64


# The model's terms for a cell c (heads, s_q, s_k): ms for the mask build and the absorption, FLOPs for the rest.
def mask_ms(c, topk):
    return MASK[0] + c["s_q"] * topk * MASK[1] + c["s_q"] * ((c["s_k"] + 31) // 32) * MASK[2]


def up(c):
    return 2.0 * c["s_k"] * 512 * c["heads"] * 256


def att(c):
    return 2.0 * c["heads"] * pairs(c["s_q"], c["s_k"]) * 320


def absorb(c):
    return ABSORB[1] + 4.0 * c["s_q"] * c["heads"] * 128 * 512 / (ABSORB[0] * 1e9)


def sparse_flops(c, topk):
    """mlajit's sparse kernel skips 64-index tiles that are all padding: its work follows the valid indices."""
    return 2.0 * valid(c["s_q"], c["s_k"], topk) * math.ceil(c["heads"] / tile(c["heads"])) * tile(c["heads"]) * 1088


def main(path, upproj_tflops=None):
    t = json.load(open(path))
    topk = t["topk"]
    cells = t["cells"]
    mask = lambda c: mask_ms(c, topk)
    sparse = lambda c: sparse_flops(c, topk)

    masked = [c for c in cells if c["s_k"] > topk]
    if upproj_tflops:
        # The up-projection pinned (its rate is weakly determined by cells with s_k <= 4 s_q, where the
        # attention dominates; a chunked-prefill batch, s_k >> s_q, is mostly up-projection).
        a = 1 / (upproj_tflops * 1e9)
        o, b = wls([[1.0, att(c)] for c in masked], [c["mha_ms"] - mask(c) - up(c) * a for c in masked])
    else:
        o, a, b = wls([[1.0, up(c), att(c)] for c in masked], [c["mha_ms"] - mask(c) for c in masked])
    print(f"MHA (masked cells, {len(masked)}): overhead {o*1e3:.1f} us, upproj {1/a/1e9:.1f} TFLOP/s"
          f"{' (pinned)' if upproj_tflops else ''}, attention {1/b/1e9:.1f} TFLOP/s")
    mha_pred = lambda c: o + up(c) * a + att(c) * b + (mask(c) if c["s_k"] > topk else 0.0)
    tiles = {}
    for tl in (16, 32, 64):
        cs = [c for c in cells if tile(c["heads"]) == tl]
        if not cs:
            continue
        ov, inv = wls([[1.0, sparse(c)] for c in cs], [c["mqa_ms"] - absorb(c) for c in cs])
        if ov < 0:  # a negative constant would make tiny requests cost less than nothing: fit through 0
            ov, inv = 0.0, wls([[sparse(c)] for c in cs], [c["mqa_ms"] - absorb(c) for c in cs])[0]
        tiles[tl] = (1 / inv / 1e9, ov)
        print(f"sparse tile {tl} ({len(cs)} cells): {1/inv/1e9:.1f} TFLOP/s + {ov*1e3:.1f} us")
    mqa_pred = lambda c: absorb(c) + tiles[tile(c["heads"])][1] + sparse(c) / (tiles[tile(c["heads"])][0] * 1e9)

    def report(name, pred, key, cs):
        errs = [pred(c) / c[key] - 1 for c in cs]
        rms = math.sqrt(sum(e * e for e in errs) / len(errs))
        worst = max(cs, key=lambda c: abs(pred(c) / c[key] - 1))
        print(f"{name}: rms {rms*100:.1f} %, max {abs(pred(worst)/worst[key]-1)*100:.1f} % "
              f"(h {worst['heads']} s_q {worst['s_q']} s_k {worst['s_k']})")

    report("MHA path (masked cells)", mha_pred, "mha_ms", masked)
    report("MQA path (all cells)", mqa_pred, "mqa_ms", cells)
    agree = sum((mha_pred(c) < mqa_pred(c)) == (c["mha_ms"] < c["mqa_ms"]) for c in masked)
    print(f"predicted winner matches the measured one on {agree} of {len(masked)} masked cells")

    # The rates as h200_mlajit_rates() writes them (the up-projection's overhead is the joint one's 0: the
    # one MHA overhead goes on the attention term; the mask build keeps its own).
    print("\nC++ (src/planner/cost_model.cpp, h200_mlajit_rates):")
    print(f"    r.upproj = {{{1/a/1e9:.1f}, 0.0}};")
    print(f"    r.mha_attn = {{{1/b/1e9:.1f}, {o:.4f}}};")
    tl = ", ".join(f"{{{mh}, {t}, {{{tiles[t][0]:.1f}, {tiles[t][1]:.4f}}}}}"
                   for mh, t in ((16, 16), (32, 32), (128, 64)) if t in tiles)
    print(f"    r.mqa_tiles = {{{tl}}};")
    fixed_mha = o + MASK[0]
    for tl_ in sorted(tiles):
        print(f"fixed cost per step: masked MHA {fixed_mha*1e3:.1f} us, sparse MQA tile {tl_} "
              f"{(ABSORB[1] + tiles[tl_][1])*1e3:.1f} us")
    # Issue 13's batch as one step per path: fixed once + 64 x the variable part of one request.
    one = {"heads": 16, "s_q": 64, "s_k": 3064}
    if 16 in tiles:
        fs = ABSORB[1] + tiles[16][1]
        print(f"64 x (64 over 3000), 16 heads, one step: masked MHA {fixed_mha + 64*(mha_pred(one) - fixed_mha):.3f} ms, "
              f"sparse MQA {fs + 64*(mqa_pred(one) - fs):.3f} ms (H200 12-03: 1.931 / 3.057 measured)")
    return mha_pred, mqa_pred


def evaluation_rows(log_path):
    """The off-grid shapes of a calibrate --evaluate log, both paths measured, and the table's pick as logged."""
    rows, on = [], False
    for line in open(log_path):
        if line.startswith("evaluation on shapes"):
            on = True
            continue
        f = line.split()
        if on and len(f) >= 6 and f[0].isdigit():
            rows.append({"heads": int(f[0]), "s_q": int(f[1]), "s_k": int(f[2]), "mha_ms": float(f[3]),
                         "mqa_ms": float(f[4]), "table": f[6] if len(f) > 6 else None})
    if not rows:
        sys.exit(f"{log_path}: no evaluation rows (run calibrate with --evaluate)")
    return rows


def evaluate(log_path, mha_pred, mqa_pred, topk):
    """Scores the model on the evaluation rows of a calibrate --evaluate log."""
    rows = evaluation_rows(log_path)
    hits = hits_table = 0
    lost = lost_table = best = 0.0
    for r in rows:
        assert r["s_k"] > topk
        mha_wins = r["mha_ms"] < r["mqa_ms"]
        pick_mha = mha_pred(r) < mqa_pred(r)
        cost = lambda m: r["mha_ms"] if m else r["mqa_ms"]
        best += cost(mha_wins)
        hits += pick_mha == mha_wins
        lost += cost(pick_mha) - cost(mha_wins)
        if r["table"]:
            t_mha = r["table"] == "masked_mha"
            hits_table += t_mha == mha_wins
            lost_table += cost(t_mha) - cost(mha_wins)
    print(f"\nevaluation ({log_path}, {len(rows)} off-grid shapes): refit cost model picks the faster path on "
          f"{hits}/{len(rows)}, {lost:.3f} ms lost of {best:.3f} ms (oracle); the table (as logged) "
          f"{hits_table}/{len(rows)}, {lost_table:.3f} ms lost")


if __name__ == "__main__":
    args = sys.argv[1:]
    opts = {}
    while len(args) >= 3 and args[-2] in ("--evaluate", "--upproj"):
        opts[args[-2]] = args[-1]
        args = args[:-2]
    if len(args) != 1 or args[0].startswith("-"):
        sys.exit(__doc__)
    preds = main(args[0], float(opts["--upproj"]) if "--upproj" in opts else None)
    if "--evaluate" in opts:
        evaluate(opts["--evaluate"], *preds, json.load(open(args[0]))["topk"])
