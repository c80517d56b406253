#!/usr/bin/env python3
"""mlajit against its anchors, in one run, on the same inputs (issue 6).

Sections (each cell: fresh random inputs, a float64 check of sampled rows before timing, warm-up, then
the median of >= 10 CUDA-event timings; input sets rotated when one set is smaller than the L2):
  ceilings  bf16 matmul 8192^3 (torch.matmul) and device copy bandwidth, measured here
  dense     our dense causal MHA vs cuDNN SDPA, S x heads
  masked    our top-k mask build + masked MHA vs FlexAttention (compiled, mask_mod over our bitmask)
  mqa       our sparse MQA vs FlashMLA's published figure (ANCHORS.md; heads < 64 pad to 64)
  grid      masked MHA over sparse MQA speedup per (s_q, s_k) per TP degree (heatmaps)
  mla       mlajit_mla_prefill: the planner's choice vs the faster forced path, per (s_q, s_k)
  mixed     a mixed batch: per-request routing vs by-maxima routing
FLOPs: dense/masked MHA `2*h*S^2*(192+128)/2` (masked counted the same, as dense causal), bottom-right
causal with s_q < s_k: `2*h*(192+128)*s_q*(s_k - s_q/2)`; sparse MQA `2*s_q*h*topk*(576+512)`.

Outputs under --out (default $OUT, else docs/bench/<date>_<gpu>/): bench.csv, summary.md,
heatmap_masked_over_mqa.{png,svg}, mha_tflops.png (or .svg without matplotlib). A cell that would not fit
the time budget is skipped and written to the CSV with a note saying so.
"""
import argparse
import csv
import datetime
import math
import os
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import plots  # noqa: E402

TOPK = 2048
L2_BYTES = 50 << 20
ROTATE_TARGET = 3 * L2_BYTES

# Published / measured elsewhere (ANCHORS.md): FlashMLA sm90 sparse prefill, ms, (s_q = s_kv, heads).
FLASHMLA_MS = {(4096, 128): 3.586, (8192, 128): 7.721, (16384, 128): 15.546,
               (4096, 64): 1.808, (8192, 64): 3.905, (16384, 64): 7.822}

FIELDS = ["section", "op", "impl", "heads", "tp", "s_q", "s_k", "topk", "batch", "ms", "tflops", "formula",
          "anchor", "anchor_ms", "anchor_tflops", "speedup_vs_anchor", "check", "note"]


def mha_flops(h, s_q, s_k):
    return 2.0 * h * (192 + 128) * s_q * (s_k - s_q / 2.0)


MHA_FORMULA = "2*h*(192+128)*s_q*(s_k-s_q/2) (= 2*h*S^2*(192+128)/2 at s_q=s_k)"
MQA_FORMULA = "2*s_q*h*topk*(576+512)"


def mqa_flops(h, s_q, topk=TOPK):
    return 2.0 * s_q * h * topk * (576 + 512)


class Budget:
    def __init__(self, total_s):
        self.t0 = time.time()
        self.total = total_s

    def left(self):
        return self.total - (time.time() - self.t0)


class Runner:
    def __init__(self, args):
        import torch
        import mlajit
        from mlajit import reference as R
        self.torch, self.mlajit, self.R = torch, mlajit, R
        self.args = args
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.gpu = torch.cuda.get_device_name(self.dev)
        self.gen = torch.Generator(device=self.dev)
        self.seed = int.from_bytes(os.urandom(6), "little")
        self.gen.manual_seed(self.seed)
        self.rows = []
        self.budget = Budget(args.budget_s)
        self.cache = {}  # (op, heads, s_q, s_k) -> ms of ours, for reuse across sections
        self.log = open(Path(args.out) / "run.log", "a")
        self.say(f"mlajit bench on {self.gpu} ({mlajit.arch()}), torch {torch.__version__}, "
                 f"cuDNN {torch.backends.cudnn.version()}, library {mlajit.library_path()}, seed {self.seed}, "
                 f"budget {args.budget_s} s, mla_prefill {'present' if mlajit.has_mla_prefill() else 'ABSENT'}")

    # ---- utilities ----
    def say(self, msg):
        print(msg, flush=True)
        self.log.write(msg + "\n")
        self.log.flush()

    def add(self, **kw):
        row = {k: kw.get(k, "") for k in FIELDS}
        for k in ("ms", "anchor_ms"):
            if isinstance(row[k], float):
                row[k] = f"{row[k]:.4f}"
        for k in ("tflops", "anchor_tflops"):
            if isinstance(row[k], float):
                row[k] = f"{row[k]:.1f}"
        if isinstance(row["speedup_vs_anchor"], float):
            row["speedup_vs_anchor"] = f"{row['speedup_vs_anchor']:.3f}"
        if row["heads"] != "" and row["tp"] == "":
            row["tp"] = 128 // int(row["heads"])
        self.rows.append(row)
        self.write_csv()

    def write_csv(self):
        with open(Path(self.args.out) / "bench.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(self.rows)

    def randn(self, *shape, scale=1.0):
        return (self.torch.randn(shape, device=self.dev, generator=self.gen) * scale).to(self.torch.bfloat16)

    def nsets(self, set_bytes):
        return max(1, min(8, math.ceil(ROTATE_TARGET / max(set_bytes, 1))))

    def time_ms(self, fn, nsets=1, reps=None, warmup=2):
        """Median ms of fn(i) over reps launches (i cycles over nsets input sets), CUDA events per launch,
        launches queued back to back (no host sync between them)."""
        torch = self.torch
        reps = reps or self.args.reps
        for w in range(warmup):
            fn(w % nsets)
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for i, (a, b) in enumerate(ev):
            a.record()
            fn(i % nsets)
            b.record()
        torch.cuda.synchronize()
        t = [a.elapsed_time(b) for a, b in ev]
        return statistics.median(t)

    def time_graph(self, fn, nsets, reps=None):
        """Median ms per launch of a CUDA graph holding one launch per input set (no host overhead)."""
        torch = self.torch
        reps = reps or self.args.reps
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(nsets):
                fn(i)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(nsets):
                fn(i)
        g.replay()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for a, b in ev:
            a.record()
            g.replay()
            b.record()
        torch.cuda.synchronize()
        ms = statistics.median(a.elapsed_time(b) for a, b in ev) / nsets
        del g
        return ms

    def time_best(self, fn, nsets, graph=True):
        """(ms, how): queued eager launches; for short launches also a CUDA graph replay (host overhead out),
        the lower of the two."""
        ms = self.time_ms(fn, nsets)
        if graph and not self.args.no_graphs and ms < self.args.graph_below_ms:
            try:
                gms = self.time_graph(fn, nsets)
                if gms < ms:
                    return gms, f"graph replay (eager {ms:.4f} ms)"
                return ms, f"eager (graph {gms:.4f} ms)"
            except Exception as e:
                self.say(f"graph capture failed, eager time kept: {str(e)[:200]}")
                self.torch.cuda.synchronize()
        return ms, "eager"

    def fits(self, est_s, share_end):
        return est_s < min(self.budget.left(), share_end - time.time())

    def cu(self, s_list):
        out = [0]
        for s in s_list:
            out.append(out[-1] + s)
        return out

    def free(self):
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()

    # ---- ceilings ----
    def ceilings(self):
        torch = self.torch
        n = 8192
        a, b = self.randn(n, n), self.randn(n, n)
        ms = self.time_ms(lambda i: torch.matmul(a, b), warmup=3)
        self.mm_tflops = 2 * n ** 3 / ms / 1e9
        self.add(section="ceilings", op="matmul_bf16_8192^3", impl="torch.matmul (cuBLAS)", ms=ms,
                 tflops=self.mm_tflops, formula="2*n^3", check="random inputs")
        del a, b
        x = torch.randn(1 << 30, device=self.dev, generator=self.gen).to(torch.bfloat16)  # 2 GiB
        y = torch.empty_like(x)
        ms = self.time_ms(lambda i: y.copy_(x), warmup=3)
        self.copy_tbs = 2 * x.numel() * 2 / ms / 1e9
        self.add(section="ceilings", op="copy_d2d_2GiB", impl="torch copy_", ms=ms, tflops="",
                 formula="bytes read+written / time", note=f"{self.copy_tbs:.2f} TB/s")
        self.say(f"ceilings: matmul {self.mm_tflops:.0f} TFLOP/s, copy {self.copy_tbs:.2f} TB/s")
        # Host cost of one binding call (descriptors, checks, the library's host side, the launch): a tiny
        # shape whose GPU time is far below it, calls queued back to back, wall clock over many calls.
        M = self.mlajit
        d = self.mha_set(16, 128, 128)
        out = torch.empty((128, 16, 128), dtype=torch.bfloat16, device=self.dev)
        lse = torch.empty((128, 16), dtype=torch.float32, device=self.dev)
        call = lambda: M.mha_prefill(d["q"], d["kn"], d["kp"], d["v"], [0, 128], [0, 128], 0.07, out=out, lse=lse)
        for _ in range(20):
            call()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(500):
            call()
        host_us = (time.perf_counter() - t0) / 500 * 1e6
        torch.cuda.synchronize()
        self.add(section="ceilings", op="binding_call_overhead", impl="mlajit.mha_prefill (python)", heads=16, s_q=128,
                 s_k=128, ms=host_us / 1000, formula="host wall time per call, 500 calls queued",
                 note=f"{host_us:.1f} us per call (ctypes descriptors + checks + library host side + launch)")
        self.say(f"binding: {host_us:.1f} us host time per mha_prefill call")
        del x, y
        self.free()

    # ---- MHA inputs ----
    def mha_set(self, h, s_q, s_k):
        return dict(q=self.randn(s_q, h, 192), kn=self.randn(s_k, h, 128), kp=self.randn(s_k, 64),
                    v=self.randn(s_k, h, 128))

    @staticmethod
    def set_bytes(d):
        return sum(t.numel() * t.element_size() for t in d.values() if hasattr(t, "numel"))

    def check_mha(self, name, got, s0, cu_q, cu_k, scale, rows, idx=None, want=None, lse=None):
        R = self.R
        if want is None:
            want = R.mha(s0["q"], s0["kn"], s0["v"], cu_q, cu_k, scale, rows, k_pe=s0["kp"], indices=idx)
        c = R.check_out(name, got[rows], want[0])
        if lse is not None:
            cl = R.check_lse("lse", lse[rows], want[1])
            c = R.Check(name, c.ok and cl.ok, f"{c.msg}; lse {cl.msg}")
        return c, want

    # ---- dense and masked MHA over S x heads ----
    def mha_section(self, masked, share_end):
        torch, M, R = self.torch, self.mlajit, self.R
        from torch.nn.attention import SDPBackend, sdpa_kernel
        section = "masked" if masked else "dense"
        flex = None
        if masked and not self.args.no_flex:
            try:
                from torch.nn.attention.flex_attention import create_block_mask, flex_attention
                import torch._dynamo
                torch._dynamo.config.cache_size_limit = 256
                flex = (torch.compile(flex_attention, dynamic=False), create_block_mask)
            except Exception as e:
                self.say(f"FlexAttention unavailable: {e}")
        for S in self.args.seqs:
            for h in self.args.heads:
                flops = mha_flops(h, S, S)
                est = 3.0 * (self.args.reps + 2) * flops / 250e12 + 2.0  # ours + anchor + setup
                if masked and flex:
                    est += (self.args.reps + 2) * flops / 60e12 + 8.0    # FlexAttention is far slower, compiles
                if not self.fits(est, share_end):
                    self.add(section=section, op="masked_mha" if masked else "dense_mha", impl="mlajit", heads=h,
                             s_q=S, s_k=S, topk=TOPK if masked else "", note=f"skipped: time budget (est {est:.0f} s)")
                    continue
                try:
                    self._mha_cell(masked, S, h, flops, flex, SDPBackend, sdpa_kernel)
                except Exception as e:
                    self.say(f"{section} S={S} h={h}: ERROR {e}\n{traceback.format_exc()}")
                    self.add(section=section, op="masked_mha" if masked else "dense_mha", impl="mlajit", heads=h,
                             s_q=S, s_k=S, note=f"error: {str(e)[:200]}")
                self.free()

    def _mha_cell(self, masked, S, h, flops, flex, SDPBackend, sdpa_kernel):
        torch, M, R = self.torch, self.mlajit, self.R
        section = "masked" if masked else "dense"
        scale = 1 / math.sqrt(192)
        cu = [0, S]
        s0 = self.mha_set(h, S, S)
        n = self.nsets(self.set_bytes(s0))
        sets = [s0] + [self.mha_set(h, S, S) for _ in range(n - 1)]
        idx = [R.causal_topk_indices([S], [S], TOPK, self.dev, self.gen) for _ in range(n)] if masked else None
        words = M.topk_mask_words(S)
        masks = [torch.empty((S, words), dtype=torch.int32, device=self.dev) for _ in range(n)] if masked else None
        outs = [torch.empty((S, h, 128), dtype=torch.bfloat16, device=self.dev) for _ in range(n)]
        lses = [torch.empty((S, h), dtype=torch.float32, device=self.dev) for _ in range(n)]
        rows = R.sample_rows([S], 6, self.dev, self.gen)

        def ours(i):
            d = sets[i]
            if masked:
                M.topk_mask_build(idx[i], cu, cu, out=masks[i])
            M.mha_prefill(d["q"], d["kn"], d["kp"], d["v"], cu, cu, scale, mask=masks[i] if masked else None,
                          out=outs[i], lse=lses[i])

        outs[0].fill_(float("nan"))
        ours(0)
        c, want = self.check_mha("out", outs[0], s0, cu, cu, scale, rows, idx[0] if masked else None, lse=lses[0])
        ms, how = self.time_best(ours, n)
        op = "masked_mha" if masked else "dense_mha"
        self.cache[(op, h, S, S)] = ms
        note = f"{n} input sets; {how}" + ("; time includes the top-k mask build" if masked else "")
        anchor, a_ms, a_check = "", "", ""
        if masked:
            mask_ms, _ = self.time_best(lambda i: M.topk_mask_build(idx[i], cu, cu, out=masks[i]), n)
            note += f"; mask build alone {mask_ms:.4f} ms"
            if flex:
                anchor = "FlexAttention (compiled, mask_mod over mlajit's bitmask)"
                for i in range(n):
                    M.topk_mask_build(idx[i], cu, cu, out=masks[i])
                try:
                    a_ms, a_check = self._flex(flex, sets, masks, n, S, h, scale, rows, want)
                except Exception as e:
                    a_ms, a_check = "", f"anchor error: {str(e)[:160]}"
        else:
            anchor = "cuDNN SDPA (torch, SDPBackend.CUDNN_ATTENTION)"
            try:
                ks = [torch.cat([d["kn"], d["kp"].unsqueeze(1).expand(-1, h, -1)], 2).contiguous() for d in sets[:n]]
                qs = [d["q"].transpose(0, 1).unsqueeze(0) for d in sets[:n]]
                vs = [d["v"].transpose(0, 1).unsqueeze(0) for d in sets[:n]]
                kk = [k.transpose(0, 1).unsqueeze(0) for k in ks]
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    f = lambda i: torch.nn.functional.scaled_dot_product_attention(qs[i], kk[i], vs[i], is_causal=True,
                                                                                   scale=scale)
                    o = f(0)[0].transpose(0, 1)
                    a_check = "anchor " + ("ok" if R.check_out("cudnn", o[rows], want[0]).ok else "FAIL")
                    a_ms, a_how = self.time_best(f, n)
                a_check += f"; anchor {a_how}"
                del ks, kk, o
            except Exception as e:
                a_ms, a_check = "", f"anchor error: {str(e)[:160]}"
        tf = flops / ms / 1e9
        self.add(section=section, op=op, impl="mlajit", heads=h, s_q=S, s_k=S, topk=TOPK if masked else "",
                 batch=1, ms=ms, tflops=tf, formula=MHA_FORMULA, anchor=anchor, anchor_ms=a_ms,
                 anchor_tflops=flops / a_ms / 1e9 if a_ms else "", speedup_vs_anchor=a_ms / ms if a_ms else "",
                 check=("ok" if c.ok else "FAIL ") + f" {c.msg}; {a_check}", note=note)
        self.say(f"{section:6} S={S:6} h={h:3}: mlajit {ms:8.3f} ms {tf:6.1f} TFLOP/s | "
                 f"{'anchor ' + format(a_ms, '8.3f') + ' ms' if a_ms else 'anchor -'} | {'ok' if c.ok else 'FAIL'}")

    def _flex(self, flex, sets, masks, n, S, h, scale, rows, want):
        torch, R = self.torch, self.R
        fa, create_block_mask = flex
        n = 1  # one input set: every new mask_mod closure would recompile
        bms = []
        for i in range(n):
            m = masks[i]

            def mask_mod(b, hh, q_idx, kv_idx, m=m):
                word = m[q_idx, kv_idx // 32]
                return (((word >> (kv_idx % 32)) & 1) == 1) & (kv_idx <= q_idx)

            try:
                bms.append(create_block_mask(mask_mod, None, None, S, S, device=self.dev, _compile=True))
            except TypeError:  # newer torch: no _compile argument
                bms.append(create_block_mask(mask_mod, None, None, S, S, device=self.dev))
        qs = [d["q"].transpose(0, 1).unsqueeze(0) for d in sets[:n]]
        ks = [torch.cat([d["kn"], d["kp"].unsqueeze(1).expand(-1, h, -1)], 2).transpose(0, 1).unsqueeze(0).contiguous()
              for d in sets[:n]]
        vs = [d["v"].transpose(0, 1).unsqueeze(0).contiguous() for d in sets[:n]]
        qs = [q.contiguous() for q in qs]
        f = lambda i: fa(qs[i], ks[i], vs[i], block_mask=bms[i], scale=scale)
        t0 = time.time()
        o = f(0)[0].transpose(0, 1)
        torch.cuda.synchronize()
        first = time.time() - t0
        ok = R.check_out("flex", o[rows], want[0]).ok
        ms = self.time_ms(f, n)
        return ms, f"anchor {'ok' if ok else 'FAIL'} (1 input set, eager; first call {first:.1f} s incl. compile)"

    # ---- sparse MQA over S x heads ----
    def mqa_inputs(self, h, s_q, s_k):
        return dict(q=self.randn(s_q, h, 576), kv=self.randn(s_k, 576),
                    idx=self.R.causal_topk_indices([s_q], [s_k], TOPK, self.dev, self.gen))

    def run_mqa(self, h, s_q, s_k, section):
        torch, M, R = self.torch, self.mlajit, self.R
        scale = 1 / math.sqrt(192)
        s0 = self.mqa_inputs(h, s_q, s_k)
        n = self.nsets(self.set_bytes(s0))
        sets = [s0] + [self.mqa_inputs(h, s_q, s_k) for _ in range(n - 1)]
        outs = [torch.full((s_q, h, 512), float("nan"), dtype=torch.bfloat16, device=self.dev) for _ in range(n)]
        lses = [torch.empty((s_q, h), dtype=torch.float32, device=self.dev) for _ in range(n)]
        f = lambda i: M.sparse_mqa_prefill(sets[i]["q"], sets[i]["kv"], sets[i]["idx"], scale, out=outs[i], lse=lses[i])
        f(0)
        rows = R.sample_rows([s_q], 6, self.dev, self.gen)
        ro, rl, _ = R.sparse_mqa(s0["q"], s0["kv"], s0["idx"], scale, rows)
        c = R.check_out("out", outs[0][rows], ro)
        cl = R.check_lse("lse", lses[0][rows], rl)
        ms, self.last_how = self.time_best(f, n)
        self.cache[("sparse_mqa", h, s_q, s_k)] = ms
        return ms, c, cl, n

    def mqa_section(self, share_end):
        for S in self.args.seqs:
            for h in self.args.heads:
                flops = mqa_flops(h, S)
                est = (self.args.reps + 2) * flops / 150e12 + 2.0
                if not self.fits(est, share_end):
                    self.add(section="mqa", op="sparse_mqa", impl="mlajit", heads=h, s_q=S, s_k=S, topk=TOPK,
                             note=f"skipped: time budget (est {est:.0f} s)")
                    continue
                try:
                    ms, c, cl, n = self.run_mqa(h, S, S, "mqa")
                except Exception as e:
                    self.say(f"mqa S={S} h={h}: ERROR {e}")
                    self.add(section="mqa", op="sparse_mqa", impl="mlajit", heads=h, s_q=S, s_k=S, note=f"error: {e}")
                    continue
                hp = max(64, h)
                a_ms = FLASHMLA_MS.get((S, hp), "")
                anchor = "FlashMLA sm90, published in ANCHORS.md" + (f" (heads padded to {hp})" if hp != h else "") \
                    if a_ms else "no FlashMLA figure for this shape"
                tf = mqa_flops(h, S) / ms / 1e9
                self.add(section="mqa", op="sparse_mqa", impl="mlajit", heads=h, s_q=S, s_k=S, topk=TOPK, batch=1,
                         ms=ms, tflops=tf, formula=MQA_FORMULA, anchor=anchor, anchor_ms=a_ms,
                         anchor_tflops=mqa_flops(h, S) / a_ms / 1e9 if a_ms else "",
                         speedup_vs_anchor=a_ms / ms if a_ms else "",
                         check=f"{'ok' if c.ok and cl.ok else 'FAIL'} {c.msg}; lse {cl.msg}",
                         note=f"{n} input sets; {self.last_how}; -1 padding scattered through early rows")
                self.say(f"mqa    S={S:6} h={h:3}: mlajit {ms:8.3f} ms {tf:6.1f} TFLOP/s | "
                         f"FlashMLA {a_ms if a_ms else '-'} | {'ok' if c.ok and cl.ok else 'FAIL'}")
                self.free()

    # ---- (s_q, s_k) grid: masked MHA vs sparse MQA ----
    def run_masked(self, h, s_q, s_k):
        torch, M, R = self.torch, self.mlajit, self.R
        scale = 1 / math.sqrt(192)
        cq, ck = [0, s_q], [0, s_k]
        s0 = self.mha_set(h, s_q, s_k)
        s0["idx"] = R.causal_topk_indices([s_q], [s_k], TOPK, self.dev, self.gen)
        n = self.nsets(self.set_bytes(s0))
        sets = [s0]
        for _ in range(n - 1):
            d = self.mha_set(h, s_q, s_k)
            d["idx"] = R.causal_topk_indices([s_q], [s_k], TOPK, self.dev, self.gen)
            sets.append(d)
        words = M.topk_mask_words(s_k)
        masks = [torch.empty((s_q, words), dtype=torch.int32, device=self.dev) for _ in range(n)]
        outs = [torch.full((s_q, h, 128), float("nan"), dtype=torch.bfloat16, device=self.dev) for _ in range(n)]
        lses = [torch.empty((s_q, h), dtype=torch.float32, device=self.dev) for _ in range(n)]

        def f(i):
            d = sets[i]
            M.topk_mask_build(d["idx"], cq, ck, out=masks[i])
            M.mha_prefill(d["q"], d["kn"], d["kp"], d["v"], cq, ck, scale, mask=masks[i], out=outs[i], lse=lses[i])

        f(0)
        rows = R.sample_rows([s_q], 4, self.dev, self.gen)
        c, _ = self.check_mha("out", outs[0], s0, cq, ck, scale, rows, s0["idx"], lse=lses[0])
        ms, _ = self.time_best(f, n)
        self.cache[("masked_mha", h, s_q, s_k)] = ms
        return ms, c

    def grid_section(self, share_end):
        self.grid = {}
        for h in self.args.heads:
            for s_q in self.args.seqs:
                for s_k in self.args.seqs:
                    if s_k < s_q:
                        continue
                    est = 1.0 + (self.args.reps + 2) * (mha_flops(h, s_q, s_k) / 200e12 + mqa_flops(h, s_q) / 120e12)
                    key_m, key_q = ("masked_mha", h, s_q, s_k), ("sparse_mqa", h, s_q, s_k)
                    if key_m in self.cache and key_q in self.cache:
                        est = 0
                    if not self.fits(est, share_end):
                        self.add(section="grid", op="masked_over_mqa", impl="mlajit", heads=h, s_q=s_q, s_k=s_k,
                                 topk=TOPK, note=f"skipped: time budget (est {est:.0f} s)")
                        continue
                    try:
                        checks = "reused from the masked and mqa sections"
                        if key_m not in self.cache:
                            ms_m, c = self.run_masked(h, s_q, s_k)
                            checks = f"masked {'ok' if c.ok else 'FAIL ' + c.msg}"
                        if key_q not in self.cache:
                            _, cq, cl, _ = self.run_mqa(h, s_q, s_k, "grid")
                            checks += f"; mqa {'ok' if cq.ok and cl.ok else 'FAIL ' + cq.msg}"
                        m, q = self.cache[key_m], self.cache[key_q]
                    except Exception as e:
                        self.say(f"grid h={h} s_q={s_q} s_k={s_k}: ERROR {e}")
                        self.add(section="grid", op="masked_over_mqa", heads=h, s_q=s_q, s_k=s_k, note=f"error: {e}")
                        continue
                    self.grid[(h, s_q, s_k)] = q / m
                    self.add(section="grid", op="masked_mha(+mask build)", impl="mlajit", heads=h, s_q=s_q, s_k=s_k,
                             topk=TOPK, batch=1, ms=m, tflops=mha_flops(h, s_q, s_k) / m / 1e9, formula=MHA_FORMULA,
                             anchor="mlajit sparse_mqa, same indices", anchor_ms=q,
                             anchor_tflops=mqa_flops(h, s_q) / q / 1e9, speedup_vs_anchor=q / m, check=checks,
                             note="speedup = sparse MQA ms / masked MHA ms (>1: masked MHA faster)")
                    self.say(f"grid   h={h:3} s_q={s_q:6} s_k={s_k:6}: masked {m:8.3f} ms, mqa {q:8.3f} ms, "
                             f"ratio {q / m:5.2f}")
                    self.free()

    # ---- mla_prefill: planner vs oracle ----
    def mla_inputs(self, h, s_q_list, s_k_list):
        R = self.R
        T_q, T_k = sum(s_q_list), sum(s_k_list)
        return dict(q=self.randn(T_q, h, 192), kv=self.randn(T_k, 576), w=self.randn(h * 256, 512, scale=512 ** -0.5),
                    idx=R.causal_topk_indices(s_q_list, s_k_list, TOPK, self.dev, self.gen))

    def run_mla(self, h, s_q_list, s_k_list, forces):
        """{force: (ms, paths)} for each force in forces, on one set of inputs, the first checked."""
        torch, M, R = self.torch, self.mlajit, self.R
        scale = 1 / math.sqrt(192)
        cq, ck = self.cu(s_q_list), self.cu(s_k_list)
        d = self.mla_inputs(h, s_q_list, s_k_list)
        args = (d["q"][..., :128], d["q"][..., 128:], d["kv"][:, :512], d["kv"][:, 512:], d["w"], d["idx"], cq, ck, scale)
        T_q = sum(s_q_list)
        rows = R.sample_rows(s_q_list, 3, self.dev, self.gen)
        want = R.mla(*args[:9], rows)
        res = {}
        for force in forces:
            out = torch.full((T_q, h, 128), float("nan"), dtype=torch.bfloat16, device=self.dev)
            try:
                _, paths = M.mla_prefill(*args, out=out, force_path=force, return_paths=True)
            except M.MlajitError as e:
                res[force] = (None, None, f"error: {e.message[:160]}", None)
                continue
            c = R.check_out("out", out[rows], want[0])
            call = lambda i: M.mla_prefill(*args, out=out, force_path=force)
            ms = self.time_ms(call)
            gms = None
            if not self.args.no_graphs and ms < self.args.graph_below_ms * 4:
                try:
                    gms = self.time_graph(call, 1)
                except Exception as e:
                    self.say(f"mla graph capture failed: {str(e)[:160]}")
                    torch.cuda.synchronize()
            # Compare paths by GPU time: a graph replay where one was captured (short cells are host-bound
            # eagerly), else the eager time. The eager time stays in the note.
            best = min(ms, gms) if gms else ms
            res[force] = (best, paths, "ok" if c.ok else f"FAIL {c.msg}", ms)
        return res

    def mla_section(self, share_end):
        M = self.mlajit
        if not M.has_mla_prefill():
            self.add(section="mla", op="mla_prefill", note="skipped: this libmlajit.so has no mlajit_mla_prefill")
            self.say("mla: skipped (no mlajit_mla_prefill in the library)")
            return
        self.mla_cells = []
        for h in self.args.heads:
            for s_q in self.args.mla_seqs:
                for mult in (1, 2, 4):
                    s_k = s_q * mult
                    if s_k > max(self.args.seqs):
                        continue
                    est = 2.0 + 3 * (self.args.reps + 2) * (mha_flops(h, s_q, s_k) / 200e12 + mqa_flops(h, s_q) / 120e12)
                    if not self.fits(est, share_end):
                        self.add(section="mla", op="mla_prefill", heads=h, s_q=s_q, s_k=s_k, topk=TOPK,
                                 note=f"skipped: time budget (est {est:.0f} s)")
                        continue
                    forces = [None, "masked_mha", "sparse_mqa"] + (["dense_mha"] if s_k <= TOPK else [])
                    try:
                        res = self.run_mla(h, [s_q], [s_k], forces)
                    except Exception as e:
                        self.say(f"mla h={h} {s_q}/{s_k}: ERROR {e}")
                        self.add(section="mla", op="mla_prefill", heads=h, s_q=s_q, s_k=s_k, note=f"error: {e}")
                        continue
                    auto_ms, auto_paths, auto_chk, _ = res[None]
                    forced = {f: r for f, r in res.items() if f and r[0] is not None}
                    oracle = min(forced, key=lambda f: forced[f][0]) if forced else None
                    o_ms = forced[oracle][0] if oracle else ""
                    chk = "; ".join(f"{f or 'auto'} {r[2]}" for f, r in res.items())
                    for f, r in res.items():
                        if r[0] is None:
                            continue
                        self.add(section="mla", op=f"mla_prefill force={f or 'auto'}", impl="mlajit", heads=h,
                                 s_q=s_q, s_k=s_k, topk=TOPK, batch=1, ms=r[0], formula="end to end, projections incl.",
                                 anchor="oracle: fastest forced path" if oracle else "", anchor_ms=o_ms,
                                 speedup_vs_anchor=o_ms / r[0] if o_ms else "", check=r[2],
                                 note=f"paths {r[1]}; oracle {oracle}; ms = min(eager, CUDA graph replay); "
                                      f"eager {r[3]:.4f} ms (host planning included)")
                    if auto_ms is not None and oracle:
                        self.mla_cells.append((h, s_q, s_k, auto_paths[0], auto_ms, oracle, o_ms))
                        self.say(f"mla    h={h:3} s_q={s_q:6} s_k={s_k:6}: planner {auto_paths[0]:10} {auto_ms:8.3f} ms,"
                                 f" oracle {oracle:10} {o_ms:8.3f} ms, regret {auto_ms / o_ms:5.2f} | {chk}")
                    self.free()

    def mixed_section(self, share_end):
        M = self.mlajit
        if not M.has_mla_prefill():
            self.add(section="mixed", op="mla_prefill", note="skipped: this libmlajit.so has no mlajit_mla_prefill")
            return
        s_q = [1024, 512, 4096, 2048, 1024, 8192]
        s_k = [1024, 8192, 4096, 16384, 32768, 8192]
        self.mixed = []
        for h in self.args.heads:
            if not self.fits(20.0, share_end):
                self.add(section="mixed", op="mla_prefill", heads=h, note="skipped: time budget")
                continue
            plan_max = M.plan_prefill(h, TOPK, [max(s_q)], [max(s_k)], gpu_name=self.gpu).paths[0]
            try:
                res = self.run_mla(h, s_q, s_k, [None, plan_max] + [p for p in ("masked_mha", "sparse_mqa") if p != plan_max])
            except Exception as e:
                self.add(section="mixed", op="mla_prefill", heads=h, note=f"error: {e}")
                continue
            shape = "requests (s_q/s_k) " + " ".join(f"{a}/{b}" for a, b in zip(s_q, s_k))
            a_ms = res[plan_max][0]
            for f, r in res.items():
                if r[0] is None:
                    continue
                label = "per-request routing" if f is None else (f"by-maxima routing ({f})" if f == plan_max else f"forced {f}")
                self.add(section="mixed", op=f"mla_prefill {label}", impl="mlajit", heads=h, s_q=sum(s_q),
                         s_k=sum(s_k), topk=TOPK, batch=len(s_q), ms=r[0], formula="end to end, projections incl.",
                         anchor=f"by-maxima routing ({plan_max})", anchor_ms=a_ms,
                         speedup_vs_anchor=a_ms / r[0] if a_ms else "", check=r[2],
                         note=f"{shape}; paths {r[1]}; ms = min(eager, CUDA graph replay); eager {r[3]:.4f} ms")
            if res[None][0] and a_ms:
                self.mixed.append((h, res[None][0], res[None][1], a_ms, plan_max))
                self.say(f"mixed  h={h:3}: per-request {res[None][0]:8.3f} ms {res[None][1]} | by-maxima ({plan_max}) "
                         f"{a_ms:8.3f} ms | speedup {a_ms / res[None][0]:.2f}")
            self.free()

    # ---- outputs ----
    def figures(self):
        out = Path(self.args.out)
        grids = []
        for h in self.args.heads:
            vals = {(sq, sk): v for (hh, sq, sk), v in getattr(self, "grid", {}).items() if hh == h}
            if vals:
                grids.append((f"TP{128 // h} (h={h})", self.args.seqs, self.args.seqs, vals))
        if grids:
            plots.heatmaps(out / "heatmap_masked_over_mqa.png", out / "heatmap_masked_over_mqa.svg", grids,
                           "sparse MQA ms / masked MHA ms (blue >1: masked MHA faster), mlajit, same indices")
        panels = {"dense": {}, "masked": {}}
        for r in self.rows:
            if r["section"] in ("dense", "masked") and r["ms"] and r["tflops"]:
                h = int(r["heads"])
                by = panels[r["section"]]
                by.setdefault(f"mlajit h={h}", []).append((int(r["s_q"]), float(r["tflops"])))
                if r["anchor_tflops"]:
                    an = "cuDNN" if r["section"] == "dense" else "FlexAttention"
                    by.setdefault(f"{an} h={h}", []).append((int(r["s_q"]), float(r["anchor_tflops"])))
        plots.curves(out / "mha_tflops.png", out / "mha_tflops.svg",
                     [("dense causal: mlajit vs cuDNN SDPA (dashed)", sorted(panels["dense"].items())),
                      ("top-2048 masked: mlajit incl. mask build vs FlexAttention (dashed)",
                       sorted(panels["masked"].items()))],
                     f"causal MHA d_qk 192, d_v 128, bf16; TFLOP/s by the dense-causal count; {self.gpu}")

    def summary(self):
        L = [f"# mlajit benchmark, {self.gpu}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"torch {self.torch.__version__}, cuDNN {self.torch.backends.cudnn.version()}, seed {self.seed}, "
             f"median of {self.args.reps} after warm-up; every cell checked against float64 on sampled rows "
             f"before timing. Full data: bench.csv.", ""]
        L += ["## Ceilings (this run)", "",
              f"- bf16 matmul 8192^3: {getattr(self, 'mm_tflops', float('nan')):.0f} TFLOP/s",
              f"- device copy: {getattr(self, 'copy_tbs', float('nan')):.2f} TB/s (read + write)", ""]
        L += ["## Ours against each anchor", "",
              "| op | heads | S | mlajit ms | TFLOP/s | anchor | anchor ms | anchor TFLOP/s | speedup | check |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            if r["section"] in ("dense", "masked", "mqa") and r["ms"]:
                L.append(f"| {r['op']} | {r['heads']} | {r['s_q']} | {r['ms']} | {r['tflops']} | "
                         f"{r['anchor'].split(' (')[0] if r['anchor'] else '-'} | {r['anchor_ms'] or '-'} | "
                         f"{r['anchor_tflops'] or '-'} | {r['speedup_vs_anchor'] or '-'} | {'FAIL' if 'FAIL' in r['check'] else 'ok'} |")
        best = {}
        for r in self.rows:
            if r["section"] in ("dense", "masked", "mqa") and r["tflops"]:
                k = r["op"]
                if k not in best or float(r["tflops"]) > float(best[k]["tflops"]):
                    best[k] = r
        L += ["", "## Best of ours per op", "", "| op | shape | TFLOP/s | of matmul ceiling | anchor there |", "|---|---|---|---|---|"]
        mm = getattr(self, "mm_tflops", None)
        for k, r in best.items():
            frac = f"{float(r['tflops']) / mm:.0%}" if mm else "-"
            L.append(f"| {k} | h={r['heads']} S={r['s_q']} | {r['tflops']} | {frac} | "
                     f"{(r['anchor_tflops'] + ' TFLOP/s') if r['anchor_tflops'] else '-'} |")
        if getattr(self, "grid", None):
            L += ["", "## Masked MHA over sparse MQA (ratio of times, >1: masked MHA faster)", ""]
            for h in self.args.heads:
                L += [f"TP{128 // h} (h={h}):", "", "| s_q \\ s_k | " + " | ".join(str(s) for s in self.args.seqs) + " |",
                      "|---" * (len(self.args.seqs) + 1) + "|"]
                for sq in self.args.seqs:
                    cells = [f"{self.grid[(h, sq, sk)]:.2f}" if (h, sq, sk) in self.grid else "" for sk in self.args.seqs]
                    L.append(f"| {sq} | " + " | ".join(cells) + " |")
                L.append("")
        if getattr(self, "mla_cells", None):
            L += ["## mla_prefill: planner vs oracle (fastest forced path)", "",
                  "Times are the lower of eager launches through the binding and a CUDA-graph replay (short cells "
                  "are host-bound eagerly: the binding, the library's planning and several launches per call); "
                  "bench.csv notes give the eager time.", "",
                  "| heads | s_q | s_k | planner path | ms | oracle path | ms | planner / oracle |", "|---|---|---|---|---|---|---|---|"]
            for h, sq, sk, p, ms, o, oms in self.mla_cells:
                L.append(f"| {h} | {sq} | {sk} | {p} | {ms:.3f} | {o} | {oms:.3f} | {ms / oms:.2f} |")
            reg = [ms / oms for *_, ms, _, oms in self.mla_cells]
            same = sum(1 for c in self.mla_cells if c[3] == c[5])
            L += ["", f"Planner regret (planner ms / oracle ms) over {len(reg)} cells: geometric mean "
                  f"{math.exp(sum(math.log(x) for x in reg) / len(reg)):.3f}, worst {max(reg):.2f}; the planner picked "
                  f"the oracle's path in {same} of {len(reg)} (a different pick within timing noise counts as a miss).", ""]
        if getattr(self, "mixed", None):
            L += ["## Mixed batch: per-request routing vs by-maxima", "",
                  "| heads | per-request ms | paths | by-maxima path | by-maxima ms | speedup |", "|---|---|---|---|---|---|"]
            for h, ms, paths, ams, p in self.mixed:
                L.append(f"| {h} | {ms:.3f} | {' '.join(paths)} | {p} | {ams:.3f} | {ams / ms:.2f} |")
            L.append("")
        skipped = [r for r in self.rows if r["note"].startswith("skipped")]
        if skipped:
            L += [f"Skipped for time or missing symbols: {len(skipped)} cells (see bench.csv, note column).", ""]
        (Path(self.args.out) / "summary.md").write_text("\n".join(L) + "\n")
        return L


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting cells after this many seconds")
    ap.add_argument("--seqs", default="1024,2048,4096,8192,16384,32768")
    ap.add_argument("--heads", default="128,64,32,16")
    ap.add_argument("--mla-seqs", default="1024,2048,4096,8192")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--sections", default="ceilings,dense,masked,mqa,grid,mla,mixed")
    ap.add_argument("--no-flex", action="store_true", help="skip the FlexAttention anchor")
    ap.add_argument("--no-graphs", action="store_true", help="time eager launches only")
    ap.add_argument("--graph-below-ms", type=float, default=1.0,
                    help="also time a CUDA graph replay (no host overhead) for launches shorter than this")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message=".*_compile flag on create_block_mask.*")
    args.seqs = [int(x) for x in args.seqs.split(",")]
    args.heads = [int(x) for x in args.heads.split(",")]
    args.mla_seqs = [int(x) for x in args.mla_seqs.split(",")]
    args.reps = max(10, args.reps)
    import torch
    if not torch.cuda.is_available():
        print("run_bench.py: no CUDA GPU here; run it on the GPU machine (bash tools/bench/run_on_gpu.sh)")
        return 2
    if not args.out:
        gpu = torch.cuda.get_device_name().split()[-1].lower()
        args.out = str(ROOT / "docs" / "bench" / f"{datetime.date.today():%Y-%m-%d}_{gpu}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    r = Runner(args)
    sections = args.sections.split(",")
    # Shares of the budget (unused time carries over to the next section).
    shares = {"ceilings": 0.02, "dense": 0.10, "masked": 0.40, "mqa": 0.05, "grid": 0.18, "mla": 0.18, "mixed": 0.07}
    total = sum(shares[s] for s in sections if s in shares)
    for s in sections:
        start = time.time()
        share_end = start + r.budget.left() * shares.get(s, 0.1) / max(total, 1e-9)
        total -= shares.get(s, 0.1)
        r.say(f"== {s} (until +{share_end - r.budget.t0:.0f} s)")
        try:
            if s == "ceilings":
                r.ceilings()
            elif s in ("dense", "masked"):
                r.mha_section(s == "masked", share_end)
            elif s == "mqa":
                r.mqa_section(share_end)
            elif s == "grid":
                r.grid_section(share_end)
            elif s == "mla":
                r.mla_section(share_end)
            elif s == "mixed":
                r.mixed_section(share_end)
        except Exception as e:
            r.say(f"section {s}: ERROR {e}\n{traceback.format_exc()}")
        r.say(f"== {s} done in {time.time() - start:.0f} s")
    try:
        r.figures()
    except Exception as e:
        r.say(f"figures: ERROR {e}\n{traceback.format_exc()}")
    lines = r.summary()
    r.say("\n".join(lines))
    fails = [x for x in r.rows if "FAIL" in x["check"]]
    r.say(f"BENCH: {len(r.rows)} rows, {len(fails)} with a failed check, out {args.out}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
