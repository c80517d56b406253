#!/usr/bin/env python3
"""Scores how the planner reads a calibration table, offline, on the off-grid shapes of the same run's
`mlajit-warmup calibrate --evaluate` log: the table alone (log ms, bilinear in log s_q, log s_k) against the table
read through the cost model (the guide, src/planner/table_predict.h: measured / modelled interpolated, times the
model), and the model alone. Per reading: how often it picks the faster measured path, the ms lost, and the
time error of both paths. The model here is the shipped rates (cost_model.cpp, h200_mlajit_rates): keep BASE_RATES
equal to them. Pure Python.

usage: score_table.py TABLE.json calibrate.log [TABLE2.json calibrate2.log ...]
"""
import json, math, sys
sys.path.insert(0, __import__('os').path.dirname(__file__))
import fit_rates as F
TOPK = 2048
BASE_RATES = dict(upproj=505.8, attn=(707.7, 0.0256), tiles={16: (151.4, .005), 32: (234.3, .0404), 64: (440.2, .052)})


def base(c):
    """Both paths' ms at cell c by the shipped rates: MHA masked above topk, dense at or below it."""
    mask = F.mask_ms(c, TOPK) if c["s_k"] > TOPK else 0
    mha = F.up(c) / (BASE_RATES['upproj'] * 1e9) + BASE_RATES['attn'][1] + F.att(c) / (BASE_RATES['attn'][0] * 1e9) + mask
    rate, ov = BASE_RATES['tiles'][F.tile(c["heads"])]
    return mha, F.absorb(c) + ov + F.sparse_flops(c, TOPK) / (rate * 1e9)


def predictor(cells, guided):
    grid = {}
    for c in cells:
        b = base(c) if guided else (1, 1)
        grid[(c["heads"], math.log(c["s_q"]), math.log(c["s_k"]))] = (math.log(c["mha_ms"]/b[0]), math.log(c["mqa_ms"]/b[1]))
    def pred(r):
        h = r["heads"]; x, y = math.log(r["s_q"]), math.log(r["s_k"])
        xs = sorted({k[1] for k in grid if k[0] == h}); ys = sorted({k[2] for k in grid if k[0] == h})
        i = max(k for k in range(len(xs)) if xs[k] <= x + 1e-9); j = max(k for k in range(len(ys)) if ys[k] <= y + 1e-9)
        i1 = min(i+1, len(xs)-1); j1 = min(j+1, len(ys)-1)
        tx = 0 if i1 == i else (x-xs[i])/(xs[i1]-xs[i]); ty = 0 if j1 == j else (y-ys[j])/(ys[j1]-ys[j])
        c = [grid.get((h, xs[a], ys[b])) for a, b in ((i, j), (i1, j), (i, j1), (i1, j1))]
        if all(c):
            w = [(1-tx)*(1-ty), tx*(1-ty), (1-tx)*ty, tx*ty]
        else:  # triangle (barycentric), as table_predict.cpp
            ks = [k for k in range(4) if c[k]]
            assert len(ks) == 3, (r, ks)
            ux = lambda k: float(k & 1); uy = lambda k: float(k >> 1)
            ax, ay = ux(ks[0]), uy(ks[0]); e1x, e1y = ux(ks[1])-ax, uy(ks[1])-ay; e2x, e2y = ux(ks[2])-ax, uy(ks[2])-ay
            det = e1x*e2y - e2x*e1y; l1 = ((tx-ax)*e2y - e2x*(ty-ay))/det; l2 = (e1x*(ty-ay) - (tx-ax)*e1y)/det
            w = [0]*4; w[ks[0]] = 1-l1-l2; w[ks[1]] = l1; w[ks[2]] = l2
            if min(w) < -1e-9: return None
        lm = sum(wk*ck[0] for wk, ck in zip(w, c) if ck); lq = sum(wk*ck[1] for wk, ck in zip(w, c) if ck)
        b = base(r) if guided else (1, 1)
        return b[0]*math.exp(lm), b[1]*math.exp(lq)
    return pred
def score(name, rows, pred):
    hits = 0; lost = 0; best = 0; errs = []
    for r in rows:
        p = pred(r); mw = r["mha_ms"] < r["mqa_ms"]; pick = p[0] < p[1]
        cost = lambda m: r["mha_ms"] if m else r["mqa_ms"]
        best += cost(mw); hits += pick == mw; lost += cost(pick) - cost(mw)
        errs += [p[0]/r["mha_ms"]-1, p[1]/r["mqa_ms"]-1]
    rms = math.sqrt(sum(e*e for e in errs)/len(errs))
    print(f"  {name:28s} {hits}/{len(rows)} faster path, {lost:.3f} ms lost of {best:.1f}; time error rms {rms*100:.1f} %, max {max(map(abs,errs))*100:.1f} %")
if __name__ == "__main__":
    for table, log in zip(sys.argv[1::2], sys.argv[2::2]):
        cells = json.load(open(table))["cells"]; rows = F.evaluation_rows(log)
        print(table)
        score("table alone", rows, predictor(cells, False))
        score("table through the model", rows, predictor(cells, True))
        score("model alone", rows, lambda r: base(r))
