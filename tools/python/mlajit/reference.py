"""float64 PyTorch references of mlajit's semantics (DESIGN.md section 2) on sampled query rows, the DSA
inputs the tests and the benchmark draw, and the comparison with stated tolerances.

Everything runs on the tensors' device (float64 on the GPU for speed); only the rows asked for are
computed, so checking a 32k-token prefill costs milliseconds.
"""
import math

import torch

# Tolerances (the C++ tests' constants, tests/reference/reference.h): bf16 outputs of a correct kernel
# sit near 1e-2 worst case per element and ~3e-3 in relative L2.
OUT_RTOL = 2e-2
OUT_ATOL_RMS_FRACTION = 2e-2
OUT_REL_L2_MAX = 1e-2
LSE_ATOL = 1e-3
# lse of the one-call mla_prefill: each path rounds an intermediate to bf16 (k_nope / v after the
# up-projection, or the absorbed q), which moves the logits by ~1e-2 at DeepSeek's scale; a wrong or
# missing key moves lse by O(1). Same bound as tests/gpu/test_mla_prefill_gpu.cpp.
MLA_LSE_ATOL = 1.5e-2


# ---- inputs --------------------------------------------------------------------------------------------

def causal_topk_indices(s_q_list, s_k_list, topk, device, generator=None, block_rows=2048):
    """int32 [sum(s_q), topk] request-local DSA indices: for every query, min(topk, causal prefix) distinct
    keys of its bottom-right-aligned causal prefix, the remaining entries -1, all in random order (so -1
    is scattered through the row, not only at its end)."""
    rows = []
    for s_q, s_k in zip(s_q_list, s_k_list):
        if s_k < s_q:
            raise ValueError(f"s_k ({s_k}) must be >= s_q ({s_q})")
        for start in range(0, s_q, block_rows):
            end = min(s_q, start + block_rows)
            i = torch.arange(start, end, device=device)
            prefix = (s_k - s_q + 1 + i).unsqueeze(1)  # keys 0 .. prefix-1 are causal for local query i
            scores = torch.rand((end - start, s_k), device=device, generator=generator)
            scores.masked_fill_(torch.arange(s_k, device=device).unsqueeze(0) >= prefix, -1.0)
            k = min(topk, s_k)
            val, idx = scores.topk(k, dim=1)
            idx = idx.to(torch.int32)
            idx.masked_fill_(val < 0, -1)
            if k < topk:
                idx = torch.cat([idx, torch.full((end - start, topk - k), -1, dtype=torch.int32, device=device)], 1)
            perm = torch.rand((end - start, topk), device=device, generator=generator).argsort(dim=1)
            rows.append(idx.gather(1, perm))
    return torch.cat(rows, 0).contiguous()


def sample_rows(s_q_list, per_request, device, generator=None):
    """Global query rows to check: first and last of every request plus up to per_request random others."""
    out = []
    base = 0
    for s_q in s_q_list:
        if s_q > 0:
            pick = {base, base + s_q - 1}
            if s_q > 2 and per_request > 0:
                r = torch.randint(0, s_q, (per_request,), device="cpu", generator=_cpu_gen(generator))
                pick.update(base + int(x) for x in r)
            out.extend(sorted(pick))
        base += s_q
    return torch.tensor(out, dtype=torch.long, device=device)


def _cpu_gen(generator):
    if generator is None:
        return None
    g = torch.Generator(device="cpu")
    g.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item()))
    return g


def _requests(rows, cu_q, cu_k):
    """For each row: request start in q, s_q, start in k, s_k (host lists in, tensors out)."""
    cu_q = torch.as_tensor(cu_q, dtype=torch.long)
    cu_k = torch.as_tensor(cu_k, dtype=torch.long)
    r = rows.cpu()
    b = torch.searchsorted(cu_q, r, right=True) - 1
    return cu_q[b], cu_q[b + 1] - cu_q[b], cu_k[b], cu_k[b + 1] - cu_k[b]


# ---- references ----------------------------------------------------------------------------------------

def sparse_mqa(q, kv, indices, sm_scale, rows, cu_q=None, cu_kv=None, d_v=512, chunk=16, q_is_rows=False,
               causal=False):
    """Sparse MQA on `rows`: (out [r, h, d_v], lse [r, h], max_logits [r, h]) in float64.
    q [s_q, h, d_qk] (or already [r, h, d_qk] at `rows` with q_is_rows), kv [s_kv, d_qk], indices
    [s_q, topk]; with cu_q/cu_kv (host lists) indices are local to each request. The contract (mlajit.h):
    a key listed twice in a row is attended once; with `causal` (DSA's semantics, the one call's) query i of
    a request also skips keys past its bottom-right-aligned position s_k - s_q + i."""
    dev = q.device
    if cu_q is None:
        cu_q, cu_kv = [0, indices.size(0)], [0, kv.size(0)]
    q0, s_q, k0, s_k = _requests(rows, cu_q, cu_kv)
    if causal:
        s_k = torch.minimum(s_k, s_k - s_q + (rows.cpu() - q0) + 1)
    outs, lses, mls = [], [], []
    for c in range(0, rows.numel(), chunk):
        rr = rows[c:c + chunk]
        idx = indices[rr].long()
        base = k0[c:c + chunk].to(dev).unsqueeze(1)
        lim = s_k[c:c + chunk].to(dev).unsqueeze(1)
        valid = (idx >= 0) & (idx < lim)
        # A repeated key counts once: keep only its first slot in the row.
        srt, order = torch.where(valid, idx, -1 - torch.arange(idx.size(1), device=dev)).sort(dim=1)
        first = torch.ones_like(valid)
        first[:, 1:] = srt[:, 1:] != srt[:, :-1]
        valid &= torch.zeros_like(valid).scatter_(1, order, first)
        g = kv[(idx.clamp(min=0) + base).clamp(max=kv.size(0) - 1)].double()  # [r, topk, d]
        qd = q[c:c + chunk] if q_is_rows else q[rr]
        logit = torch.einsum("rhd,rkd->rhk", qd.double(), g) * sm_scale
        logit = logit.masked_fill(~valid.unsqueeze(1), -math.inf)
        ml = logit.amax(dim=2)
        lse = torch.logsumexp(logit, dim=2)
        p = torch.exp(logit - lse.unsqueeze(2)).nan_to_num(0.0)
        outs.append(torch.einsum("rhk,rkd->rhd", p, g[..., :d_v]))
        lses.append(lse)
        mls.append(ml)
    return torch.cat(outs), torch.cat(lses), torch.cat(mls)


def key_mask(indices, s_k):
    """bool [rows, s_k]: key j is selected by the row's indices (entries outside [0, s_k) select nothing)."""
    idx = indices.long()
    idx = torch.where((idx >= 0) & (idx < s_k), idx, s_k)  # invalid entries land in a spare column
    m = torch.zeros((idx.size(0), s_k + 1), dtype=torch.bool, device=idx.device)
    m.scatter_(1, idx, True)
    return m[:, :s_k]


def mha(q, k, v, cu_q, cu_k, sm_scale, rows, k_pe=None, indices=None, key_chunk=4096):
    """Causal MHA (bottom-right aligned), optionally restricted to each row's top-k `indices`, on `rows`:
    (out [r, h, 128], lse [r, h]) in float64. k is [T_k, h, 192], or k_nope [T_k, h, 128] with k_pe
    [T_k, 64] shared by the heads."""
    dev = q.device
    q0, s_q, k0, s_k = _requests(rows, cu_q, cu_k)
    out = torch.zeros((rows.numel(), q.size(1), v.size(2)), dtype=torch.float64, device=dev)
    lse = torch.empty((rows.numel(), q.size(1)), dtype=torch.float64, device=dev)
    # Rows of one request share its keys: handle them together.
    keyset = {}
    for i in range(rows.numel()):
        keyset.setdefault((int(k0[i]), int(s_k[i])), []).append(i)
    for (ks, sk), members in keyset.items():
        sel = torch.tensor(members, device=dev)
        rr = rows[sel]
        local = (rows[sel].cpu() - q0[members]).to(dev)
        prefix = (sk - s_q[members].to(dev) + 1 + local).unsqueeze(1)  # [r, 1]
        allowed = torch.arange(sk, device=dev).unsqueeze(0) < prefix
        if indices is not None:
            allowed &= key_mask(indices[rr], sk)
        qd = q[rr].double()
        logit = torch.empty((len(members), q.size(1), sk), dtype=torch.float64, device=dev)
        for c in range(0, sk, key_chunk):
            kc = k[ks + c:ks + min(sk, c + key_chunk)].double()
            if k_pe is not None:
                pe = k_pe[ks + c:ks + min(sk, c + key_chunk)].double().reshape(kc.size(0), 1, -1)
                kc = torch.cat([kc, pe.expand(-1, kc.size(1), -1)], dim=2)
            logit[:, :, c:c + kc.size(0)] = torch.einsum("rhd,khd->rhk", qd, kc) * sm_scale
        logit.masked_fill_(~allowed.unsqueeze(1), -math.inf)
        l = torch.logsumexp(logit, dim=2)
        p = torch.exp(logit - l.unsqueeze(2)).nan_to_num(0.0)
        o = torch.zeros((len(members), q.size(1), v.size(2)), dtype=torch.float64, device=dev)
        for c in range(0, sk, key_chunk):
            vc = v[ks + c:ks + min(sk, c + key_chunk)].double()
            o += torch.einsum("rhk,khd->rhd", p[:, :, c:c + vc.size(0)], vc)
        out[sel] = o
        lse[sel] = l
    return out, lse


def mla(q_nope, q_pe, kv_c, k_pe, w_kv_b, indices, cu_q, cu_k, sm_scale, rows):
    """The whole DSA prefill through the MQA formulation on `rows`: (out [r, h, 128], lse [r, h]) in
    float64, with the one call's causal index semantics. w_kv_b [h * 256, 512]: per head 128 rows of W_UK then 128 of W_UV."""
    h = q_nope.size(1)
    w = w_kv_b.double().reshape(h, 256, -1)
    w_uk, w_uv = w[:, :128, :], w[:, 128:, :]
    q_abs = torch.einsum("rhc,hcl->rhl", q_nope[rows].double(), w_uk)
    q576 = torch.cat([q_abs, q_pe[rows].double()], dim=2)
    kv = torch.cat([kv_c, k_pe], dim=1)
    latent, lse, _ = sparse_mqa(q576, kv, indices, sm_scale, rows, cu_q, cu_k, q_is_rows=True, causal=True)
    return torch.einsum("rhl,hel->rhe", latent, w_uv), lse


# ---- comparison ----------------------------------------------------------------------------------------

class Check:
    """Result of comparing a device tensor with a float64 reference."""

    def __init__(self, name, ok, msg):
        self.name, self.ok, self.msg = name, ok, msg

    def __bool__(self):
        return self.ok

    def __repr__(self):
        return f"{self.name}: {'ok' if self.ok else 'FAIL'} ({self.msg})"


def check_out(name, got, want, rtol=OUT_RTOL, atol_rms=OUT_ATOL_RMS_FRACTION, rel_l2_max=OUT_REL_L2_MAX):
    """Per element |got - want| <= rtol |want| + atol_rms * rms(want), and ||got - want|| / ||want|| <=
    rel_l2_max. NaN or inf in got fails."""
    g = got.double()
    w = want.double()
    if g.shape != w.shape:
        return Check(name, False, f"shape {tuple(g.shape)} != {tuple(w.shape)}")
    nonfinite = int((~torch.isfinite(g)).sum())
    rms = float(w.pow(2).mean().sqrt()) if w.numel() else 0.0
    err = (g - w).abs()
    bad = int((~(err <= rtol * w.abs() + atol_rms * rms)).sum())
    nrm = float(w.norm())
    rel = float((g - w).nan_to_num(math.inf).norm()) / nrm if nrm > 0 else float((g - w).norm())
    ok = nonfinite == 0 and bad == 0 and rel <= rel_l2_max
    msg = f"rel_l2 {rel:.2e}, max_abs {float(err.nan_to_num(math.inf).max()) if err.numel() else 0:.2e}, " \
          f"{bad} bad, {nonfinite} non-finite of {g.numel()}"
    return Check(name, ok, msg)


def check_lse(name, got, want, atol=LSE_ATOL):
    """|got - want| <= atol where want is finite; -inf exactly where want is -inf."""
    g = got.double()
    w = want.double()
    fin = torch.isfinite(w)
    same_inf = bool(((g == w) | fin).all())
    err = (g[fin] - w[fin]).abs()
    mx = float(err.max()) if err.numel() else 0.0
    ok = same_inf and bool(torch.isfinite(g[fin]).all()) and mx <= atol
    return Check(name, ok, f"max_abs {mx:.2e}, {int((~fin).sum())} empty rows, infinities {'match' if same_inf else 'DIFFER'}")
