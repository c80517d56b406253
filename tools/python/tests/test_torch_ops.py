"""Tests of the PyTorch custom ops (torch.ops.mlajit.*; python3 -m unittest discover tools/python/tests).

- CPU (needs torch, no GPU, no library): the fake implementations' shapes and dtypes for every op under
  FakeTensorMode; opcheck on meta tensors (schema, fake, AOT dispatch with dynamic shapes); torch.compile(fullgraph=True) over a module calling torch.ops.mlajit.mla_prefill traces
  it in one graph, with host cu_seqlens becoming symbolic instead of recompiling per batch layout; the fake
  mask width equals the library's mlajit_topk_mask_words (when libmlajit.so loads).
- GPU (needs torch, a GPU and the library): mla_prefill through the op against the float64 reference
  (fresh random inputs, outputs poisoned first by the caching allocator's reuse); torch.compile (inductor,
  fullgraph) output = eager output; CUDA graph replay on new inputs = eager on the same inputs; the
  other three ops = the binding's functions (same kernels: bitwise); sparse_mqa_prefill, which passes the
  key-set pre-pass a workspace, = the C call without one (bitwise; contiguous, paged, causal, FP8 paged,
  a growing workspace), also replayed from a CUDA graph.
Both backends of the ops (mlajit.torch_ops_backend(): the C++ library libmlajit_torch.so, or the ops
defined in Python) run the same tests; a process registers one, so run this file once per backend:
MLAJIT_TORCH_BACKEND=cpp / python (tools/bench/host_cost_on_gpu.sh does); set, it is also asserted.
Skipped, saying why, without torch (the CI machine: PyPI's torch is ~0.5 GB plus ~3 GB of CUDA wheels).
"""
import math
import os
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools" / "python"))

import mlajit  # noqa: E402
from mlajit import _lib  # noqa: E402

try:
    import torch
    import mlajit.torch_ops  # noqa: F401  (registers torch.ops.mlajit.*)
    HAVE_TORCH = True
except ImportError:  # pragma: no cover - depends on the machine
    torch = None
    HAVE_TORCH = False


def _lib_loads():
    try:
        _lib.lib()
        return True
    except OSError:
        return False


LIB_OK = _lib_loads()
GPU_OK = HAVE_TORCH and LIB_OK and torch.cuda.is_available()


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (the custom ops need it)")
class TestBackend(unittest.TestCase):
    """Which backend registered the ops, and that its schemas are the shared ones."""

    def test_backend_and_schemas(self):
        from mlajit import torch_ops
        from mlajit._torch_schemas import NAMESPACE, SCHEMAS
        backend = mlajit.torch_ops_backend()
        self.assertIn(backend, ("cpp", "python"), torch_ops.backend_reason())
        wanted = os.environ.get("MLAJIT_TORCH_BACKEND", "auto")
        if wanted in ("cpp", "python"):
            self.assertEqual(backend, wanted, torch_ops.backend_reason())
        print(f"\n  torch ops backend: {backend} ({torch_ops.backend_reason()})", file=sys.stderr)
        for name, schema in SCHEMAS.items():
            loaded = getattr(torch.ops.mlajit, name).default._schema
            self.assertEqual(str(loaded), str(torch._C.parse_schema(f"{NAMESPACE}::{schema}")), name)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (the custom ops need it)")
class TestFake(unittest.TestCase):
    """Shapes of the fake implementations; no GPU needed."""

    def setUp(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        self.mode = FakeTensorMode()

    def test_shapes(self):
        T, Tk, h, topk = 40, 64, 16, 64
        cu_q, cu_k = [0, 24, 40], [0, 24, 64]
        with self.mode:
            bf = dict(dtype=torch.bfloat16, device="cuda")
            i32 = dict(dtype=torch.int32, device="cuda")
            q = torch.empty(T, h, 192, **bf)
            latent = torch.empty(Tk, 576, **bf)
            w = torch.empty(h * 256, 512, **bf)
            idx = torch.empty(T, topk, **i32)
            cq, ck = torch.empty(3, **i32), torch.empty(3, **i32)
            out = torch.ops.mlajit.mla_prefill(q[..., :128], q[..., 128:], latent[:, :512], latent[:, 512:], w, idx,
                                               cq, ck, cu_q, cu_k, 0.1)
            self.assertEqual((tuple(out.shape), out.dtype, out.device.type), ((T, h, 128), torch.bfloat16, "cuda"))
            q576 = torch.empty(T, h, 576, **bf)
            o, lse = torch.ops.mlajit.sparse_mqa_prefill(q576, latent, idx, 0.1)
            self.assertEqual((tuple(o.shape), o.dtype), ((T, h, 512), torch.bfloat16))
            self.assertEqual((tuple(lse.shape), lse.dtype), ((T, h), torch.float32))
            o, lse = torch.ops.mlajit.sparse_mqa_prefill(q576, latent, idx, 0.1, cq, ck, cu_q, cu_k)
            self.assertEqual(tuple(o.shape), (T, h, 512))
            kn, kp, v = torch.empty(Tk, h, 128, **bf), torch.empty(Tk, 64, **bf), torch.empty(Tk, h, 128, **bf)
            o, lse = torch.ops.mlajit.mha_prefill(q, kn, kp, v, cq, ck, cu_q, cu_k, 0.1)
            self.assertEqual((tuple(o.shape), tuple(lse.shape)), ((T, h, 128), (T, h)))
            mask = torch.ops.mlajit.topk_mask_build(idx, cq, ck, cu_q, [0, 24, 24 + 100])
            self.assertEqual((tuple(mask.shape), mask.dtype), ((T, 4), torch.int32))  # max s_k 100 -> 4 words

    @unittest.skipUnless(LIB_OK, "libmlajit.so not built")
    def test_mask_words_match_library(self):
        from mlajit.torch_ops import _mask_words
        for s_k in (0, 1, 31, 32, 33, 1000, 65536):
            self.assertEqual(_mask_words([0, s_k]), mlajit.topk_mask_words(s_k), f"s_k {s_k}")
            with self.mode:  # the active backend's fake kernel (C++ Meta kernel or Python fake)
                idx = torch.empty(5, 64, dtype=torch.int32, device="cuda")
                cu = torch.empty(2, dtype=torch.int32, device="cuda")
                mask = torch.ops.mlajit.topk_mask_build(idx, cu, cu, [0, 5], [0, s_k])
            self.assertEqual(tuple(mask.shape), (5, mlajit.topk_mask_words(s_k)), f"fake mask, s_k {s_k}")


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (the custom ops need it)")
class TestOpcheckMeta(unittest.TestCase):
    """torch.library.opcheck on meta tensors (no GPU): the schema, the fake kernel against the meta kernel,
    and AOT dispatch with dynamic shapes (SymInt host lists), for the ops that return tensors."""

    def test_opcheck_meta(self):
        T, Tk, h = 24, 40, 16
        m = dict(device="meta")
        q = torch.empty(T, h, 192, dtype=torch.bfloat16, **m)
        lat = torch.empty(Tk, 576, dtype=torch.bfloat16, **m)
        w = torch.empty(h * 256, 512, dtype=torch.bfloat16, **m)
        idx = torch.empty(T, 64, dtype=torch.int32, **m)
        cq, ck = torch.empty(3, dtype=torch.int32, **m), torch.empty(3, dtype=torch.int32, **m)
        hq, hk = [0, 10, 24], [0, 20, 40]
        kn, kp, v = (torch.empty(Tk, h, 128, dtype=torch.bfloat16, **m), torch.empty(Tk, 64, dtype=torch.bfloat16, **m),
                     torch.empty(Tk, h, 128, dtype=torch.bfloat16, **m))
        cases = {
            "mla_prefill": (q[..., :128], q[..., 128:], lat[:, :512], lat[:, 512:], w, idx, cq, ck, hq, hk, 0.1),
            "topk_mask_build": (idx, cq, ck, hq, hk),
            "sparse_mqa_prefill": (torch.empty(T, h, 576, dtype=torch.bfloat16, **m), lat, idx, 0.1, cq, ck, hq, hk),
            "mha_prefill": (q, kn, kp, v, cq, ck, hq, hk, 0.1),
        }
        for name, args in cases.items():
            torch.library.opcheck(getattr(torch.ops.mlajit, name).default, args,
                                  test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


class _Attention(torch.nn.Module if HAVE_TORCH else object):
    """An engine's sparse-MLA attention layer, reduced to the call: packed q and latent cache, DeepSeek's
    kv_b_proj weight, and both forms of cu_seqlens."""

    def __init__(self, w_kv_b, sm_scale):
        super().__init__()
        self.w_kv_b = w_kv_b
        self.sm_scale = sm_scale

    def forward(self, q, latent, indices, cu_q, cu_k, cu_q_host, cu_k_host):
        out = torch.ops.mlajit.mla_prefill(q[..., :128], q[..., 128:], latent[:, :512], latent[:, 512:], self.w_kv_b,
                                           indices, cu_q, cu_k, cu_q_host, cu_k_host, self.sm_scale)
        return out.flatten(1)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (the custom ops need it)")
class TestCompileTrace(unittest.TestCase):
    """torch.compile(fullgraph=True) traces the op into one graph (meta tensors: no GPU needed)."""

    def test_fullgraph_and_symbolic_seqlens(self):
        h, T, Tk = 16, 40, 64
        meta = dict(device="meta")
        m = _Attention(torch.empty(h * 256, 512, dtype=torch.bfloat16, **meta), 0.1)
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        c = torch.compile(m, fullgraph=True, backend=backend)
        args = (torch.empty(T, h, 192, dtype=torch.bfloat16, **meta), torch.empty(Tk, 576, dtype=torch.bfloat16, **meta),
                torch.empty(T, 64, dtype=torch.int32, **meta), torch.empty(3, dtype=torch.int32, **meta),
                torch.empty(3, dtype=torch.int32, **meta))
        layouts = [([0, 24, 40], [0, 24, 64]), ([0, 20, 40], [0, 30, 64]), ([0, 10, 40], [0, 10, 64]),
                   ([0, 1, 40], [0, 2, 64])]
        with torch.no_grad():
            for cu_q, cu_k in layouts:
                out = c(*args, cu_q, cu_k)
                self.assertEqual(tuple(out.shape), (T, h * 128))
        code = graphs[-1].code
        self.assertIn("torch.ops.mlajit.mla_prefill", code)
        # One recompile when the host lists first change (automatic dynamic), then none: the batch layout
        # is symbolic, not a guard per layout.
        self.assertLessEqual(len(graphs), 2, f"{len(graphs)} graphs for {len(layouts)} layouts")


def _sparse_mqa_without_workspace(q, kv, indices, sm_scale, cu_q=None, cu_k=None, cu_q_host=None, cu_k_host=None,
                                  block_table=None, causal=0):
    """mlajit_sparse_mqa_prefill called directly with the workspace fields left 0 (no key-set pre-pass):
    (out, lse, the workspace bytes the pre-pass would need for these arguments)."""
    import ctypes
    from mlajit import _ops as O
    dev = q.device
    out = torch.empty((q.shape[0], q.shape[1], 512), dtype=torch.bfloat16, device=dev)
    lse = torch.empty((q.shape[0], q.shape[1]), dtype=torch.float32, device=dev)
    a = _lib.SparseMqaArgs()
    a.q = O._desc(q, "q", (torch.bfloat16,), dev, 3)
    fp8 = kv.dtype == torch.uint8
    a.kv = O._desc(kv, "kv", (torch.bfloat16, torch.uint8), dev, (2, 3), code=_lib.UINT8 if fp8 else _lib.BF16)
    a.indices = O._desc(indices, "indices", (torch.int32,), dev, 2)
    a.out = O._desc(out, "out", (torch.bfloat16,), dev, 3)
    a.lse = O._desc(lse, "lse", (torch.float32,), dev, 2)
    if cu_q is not None:
        hq = (ctypes.c_int32 * len(cu_q_host))(*cu_q_host)
        hk = (ctypes.c_int32 * len(cu_k_host))(*cu_k_host)
        a.cu_seqlens_q = O._desc(cu_q, "cu_seqlens_q", (torch.int32,), dev, 1)
        a.cu_seqlens_kv = O._desc(cu_k, "cu_seqlens_kv", (torch.int32,), dev, 1)
        a.cu_seqlens_q_host = ctypes.cast(hq, ctypes.POINTER(ctypes.c_int32))
        a.cu_seqlens_kv_host = ctypes.cast(hk, ctypes.POINTER(ctypes.c_int32))
    if block_table is not None:
        a.block_table = O._desc(block_table, "block_table", (torch.int32,), dev, 2)
    a.causal = causal
    a.sm_scale = sm_scale
    handle = O._handle(dev)
    need = ctypes.c_size_t(0)
    O._check(_lib.optional_symbol("mlajit_sparse_mqa_workspace_size")(handle, ctypes.byref(a), ctypes.byref(need)),
             "mlajit_sparse_mqa_workspace_size")
    assert a.workspace is None and a.workspace_bytes == 0
    O._check(_lib.lib().mlajit_sparse_mqa_prefill(handle, ctypes.byref(a), O._stream(dev)), "mlajit_sparse_mqa_prefill")
    return out, lse, need.value


@unittest.skipUnless(GPU_OK, "needs torch, a CUDA GPU and libmlajit.so")
class TestGpu(unittest.TestCase):
    def setUp(self):
        from mlajit import reference as R
        self.R = R
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
        self.gen = torch.Generator(device=self.dev)
        self.gen.manual_seed(self.seed)

    def randn(self, *shape, scale=1.0):
        return (torch.randn(shape, device=self.dev, generator=self.gen) * scale).to(torch.bfloat16)

    def batch(self, heads=16, topk=256, s_q=(200, 64, 300), s_k=(200, 1100, 300)):
        R = self.R
        T_q, T_k = sum(s_q), sum(s_k)
        cu_q, cu_k = [0], [0]
        for a, b in zip(s_q, s_k):
            cu_q.append(cu_q[-1] + a)
            cu_k.append(cu_k[-1] + b)
        return dict(
            q=self.randn(T_q, heads, 192), latent=self.randn(T_k, 576),
            w=self.randn(heads * 256, 512, scale=1 / math.sqrt(512)),
            idx=R.causal_topk_indices(list(s_q), list(s_k), topk, self.dev, self.gen),
            cu_q=torch.tensor(cu_q, dtype=torch.int32, device=self.dev),
            cu_k=torch.tensor(cu_k, dtype=torch.int32, device=self.dev), cu_q_host=cu_q, cu_k_host=cu_k,
            s_q=list(s_q), scale=1 / math.sqrt(192))

    def op(self, b, force_path=-1):
        q, kv = b["q"], b["latent"]
        return torch.ops.mlajit.mla_prefill(q[..., :128], q[..., 128:], kv[:, :512], kv[:, 512:], b["w"], b["idx"],
                                            b["cu_q"], b["cu_k"], b["cu_q_host"], b["cu_k_host"], b["scale"], 0,
                                            force_path)

    def check_against_reference(self, b, out, what):
        R = self.R
        q, kv = b["q"], b["latent"]
        rows = R.sample_rows(b["s_q"], 16, self.dev, self.gen)
        ro, _ = R.mla(q[..., :128], q[..., 128:], kv[:, :512], kv[:, 512:], b["w"], b["idx"], b["cu_q_host"],
                      b["cu_k_host"], b["scale"], rows)
        c = R.check_out(f"{what} (seed {self.seed})", out[rows], ro)
        self.assertTrue(c, repr(c))

    def test_op_matches_reference_and_binding(self):
        b = self.batch()
        for force in (-1, 1, 2):
            out = self.op(b, force)
            self.check_against_reference(b, out, f"op force_path={force}")
            q, kv = b["q"], b["latent"]
            ref = mlajit.mla_prefill(q[..., :128], q[..., 128:], kv[:, :512], kv[:, 512:], b["w"], b["idx"],
                                     b["cu_q_host"], b["cu_k_host"], b["scale"], force_path=None if force < 0 else force)
            self.assertTrue(torch.equal(out, ref), "the op and the binding function differ (same kernels)")

    def test_compiled_equals_eager(self):
        b = self.batch()
        m = _Attention(b["w"], b["scale"])
        args = (b["q"], b["latent"], b["idx"], b["cu_q"], b["cu_k"], b["cu_q_host"], b["cu_k_host"])
        with torch.no_grad():
            eager = m(*args)
            compiled = torch.compile(m, fullgraph=True)(*args)
        self.assertTrue(torch.equal(eager, compiled), "torch.compile output differs from eager")

    def test_cuda_graph_replay_equals_eager(self):
        b = self.batch()
        m = _Attention(b["w"], b["scale"])
        static = dict(b)
        keys = ("q", "latent", "idx")
        for k in keys:
            static[k] = b[k].clone()

        def call(d):
            return m(d["q"], d["latent"], d["idx"], d["cu_q"], d["cu_k"], d["cu_q_host"], d["cu_k_host"])

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(s):
            call(static)  # warm-up on the capture stream: kernels loaded, workspace sized
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(g):
            graph_out = call(static)
        fresh = self.batch()  # new data, same layout
        for k in keys:
            static[k].copy_(fresh[k])
        g.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            eager = call(static)
        self.assertTrue(torch.equal(graph_out, eager), "CUDA graph replay differs from eager on the same inputs")
        fresh["w"] = b["w"]  # the layer's weight (the module holds b's)
        self.check_against_reference(fresh, graph_out.view(-1, 16, 128), "graph replay")

    def test_other_ops_equal_binding(self):
        R = self.R
        s_q, s_k, h = [130, 257], [1000, 257], 16
        cu_q, cu_k = [0, 130, 387], [0, 1000, 1257]
        cq = torch.tensor(cu_q, dtype=torch.int32, device=self.dev)
        ck = torch.tensor(cu_k, dtype=torch.int32, device=self.dev)
        idx = R.causal_topk_indices(s_q, s_k, 128, self.dev, self.gen)
        mask = torch.ops.mlajit.topk_mask_build(idx, cq, ck, cu_q, cu_k)
        self.assertTrue(torch.equal(mask, mlajit.topk_mask_build(idx, cu_q, cu_k)))
        q, kn, kp, v = self.randn(387, h, 192), self.randn(1257, h, 128), self.randn(1257, 64), self.randn(1257, h, 128)
        o, lse = torch.ops.mlajit.mha_prefill(q, kn, kp, v, cq, ck, cu_q, cu_k, 0.1, mask)
        o2, lse2 = mlajit.mha_prefill(q, kn, kp, v, cu_q, cu_k, 0.1, mask=mask)
        self.assertTrue(torch.equal(o, o2) and torch.equal(lse, lse2))
        qm, kv = self.randn(387, h, 576), self.randn(1257, 576)
        o, lse = torch.ops.mlajit.sparse_mqa_prefill(qm, kv, idx, 0.1, cq, ck, cu_q, cu_k)
        o2, lse2 = mlajit.sparse_mqa_prefill(qm, kv, idx, 0.1, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_k)
        self.assertTrue(torch.equal(o, o2) and torch.equal(lse, lse2))

    def mqa_case(self, heads, s_q, s_k, topk, batched=True, paged=False, fp8=False):
        """Sparse MQA inputs whose index rows hold what the key-set pre-pass compacts away: -1, positions out of
        range, repeated keys, and keys past the query's own position (skipped with causal=1)."""
        dev, gen = self.dev, self.gen
        idx = torch.cat([torch.randint(-2, k + 3, (n, topk), device=dev, generator=gen, dtype=torch.int32)
                         for n, k in zip(s_q, s_k)])
        idx[0, :] = -1  # a row with no valid key
        cu_q, cu_k = [0], [0]
        for n, k in zip(s_q, s_k):
            cu_q.append(cu_q[-1] + n)
            cu_k.append(cu_k[-1] + k)
        b = dict(q=self.randn(cu_q[-1], heads, 576), idx=idx, scale=1 / math.sqrt(192), block_table=None,
                 batched=batched)
        if batched:
            b.update(cu_q=torch.tensor(cu_q, dtype=torch.int32, device=dev),
                     cu_k=torch.tensor(cu_k, dtype=torch.int32, device=dev), cu_q_host=cu_q, cu_k_host=cu_k)
        if not paged:
            b["kv"] = self.randn(cu_k[-1], 576)
            return b
        bs = 64  # pages of 64 tokens, each request's on pages picked at random
        blocks = [(k + bs - 1) // bs for k in s_k]
        pages = torch.rand(sum(blocks) + 2, device=dev, generator=gen).argsort().to(torch.int32)
        table = torch.zeros((len(s_k), max(blocks)), dtype=torch.int32, device=dev)
        first = 0
        for r, n in enumerate(blocks):
            table[r, :n] = pages[first:first + n]
            first += n
        kv = self.randn(pages.numel(), bs, 576)
        if fp8:
            flat = kv.view(-1, 576)
            kv = torch.zeros((pages.numel(), bs, 656), dtype=torch.uint8, device=dev)
            mlajit.quantize_latent_cache(flat[:, :512], flat[:, 512:],
                                         torch.arange(flat.shape[0], dtype=torch.int32, device=dev), kv)
        b.update(kv=kv, block_table=table)
        return b

    def mqa_op(self, b, causal=0):
        if not b["batched"]:
            return torch.ops.mlajit.sparse_mqa_prefill(b["q"], b["kv"], b["idx"], b["scale"])
        return torch.ops.mlajit.sparse_mqa_prefill(b["q"], b["kv"], b["idx"], b["scale"], b["cu_q"], b["cu_k"],
                                                   b["cu_q_host"], b["cu_k_host"], b["block_table"], causal)

    def test_sparse_mqa_workspace_bit_identical(self):
        """The op passes the key-set pre-pass a workspace: its outputs equal, bit for bit, the C call's with the
        workspace fields left 0 (no pre-pass): first call, a larger call after it (the workspace grows), the same
        shape again (the cached workspace / size hint), one sequence at 128 heads, paged, causal, FP8 paged."""
        if _lib.optional_symbol("mlajit_sparse_mqa_workspace_size") is None:
            self.skipTest(f"{mlajit.library_path()} has no mlajit_sparse_mqa_workspace_size")
        cases = [("small", dict(heads=16, s_q=(64,), s_k=(128,), topk=64), 0),
                 # ~2.2 MB of workspace: more than the 1 MiB a first call (this test's or an earlier one's) sizes
                 ("larger after a small one", dict(heads=16, s_q=(1200, 900), s_k=(1500, 900), topk=256), 0),
                 ("same shape again", dict(heads=16, s_q=(1200, 900), s_k=(1500, 900), topk=256), 0),
                 ("128 heads, one sequence", dict(heads=128, s_q=(384,), s_k=(384,), topk=256, batched=False), 0),
                 ("paged", dict(heads=64, s_q=(200, 333), s_k=(700, 333), topk=128, paged=True), 0),
                 ("paged, causal", dict(heads=32, s_q=(200, 333), s_k=(700, 333), topk=192, paged=True), 1)]
        if _lib.optional_symbol("mlajit_quantize_latent_cache") is not None:
            cases.append(("FP8 paged, causal", dict(heads=16, s_q=(200, 333), s_k=(700, 333), topk=128, paged=True,
                                                    fp8=True), 1))
        for what, shape, causal in cases:
            b = self.mqa_case(**shape)
            out, lse = self.mqa_op(b, causal)
            extra = (b["cu_q"], b["cu_k"], b["cu_q_host"], b["cu_k_host"]) if b["batched"] else ()
            want_out, want_lse, need = _sparse_mqa_without_workspace(b["q"], b["kv"], b["idx"], b["scale"], *extra,
                                                                     block_table=b["block_table"], causal=causal)
            self.assertGreater(need, 0, f"{what}: the pre-pass applies to these arguments")
            self.assertTrue(torch.equal(out, want_out), f"{what}: out differs with the workspace (seed {self.seed})")
            self.assertTrue(torch.equal(lse, want_lse), f"{what}: lse differs with the workspace (seed {self.seed})")
        bad = self.mqa_case(heads=16, s_q=(64,), s_k=(128,), topk=64)
        bad["scale"] = -1.0  # after good calls (a workspace in hand): the library's own message, under the op's name
        with self.assertRaisesRegex(RuntimeError, "mlajit_sparse_mqa_prefill.*sm_scale"):
            self.mqa_op(bad)

    def test_sparse_mqa_cuda_graph_replay_equals_eager(self):
        """sparse_mqa_prefill (and its workspace) captured in a CUDA graph: replay on new inputs = eager."""
        b = self.mqa_case(heads=16, s_q=(200, 333), s_k=(700, 333), topk=128, paged=True)
        static = dict(b)
        for k in ("q", "kv", "idx"):
            static[k] = b[k].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            self.mqa_op(static, 1)  # warm-up on a side stream: kernels loaded
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            graph_out, graph_lse = self.mqa_op(static, 1)
        fresh = self.mqa_case(heads=16, s_q=(200, 333), s_k=(700, 333), topk=128, paged=True)
        for k in ("q", "kv", "idx"):
            static[k].copy_(fresh[k])
        static["block_table"].copy_(fresh["block_table"])
        g.replay()
        torch.cuda.synchronize()
        out, lse = self.mqa_op(static, 1)
        self.assertTrue(torch.equal(graph_out, out) and torch.equal(graph_lse, lse),
                        f"CUDA graph replay differs from eager on the same inputs (seed {self.seed})")

    def test_growing_shapes_and_errors(self):
        """A larger call after a smaller one (the workspace grows), checked; then an argument error after a
        good call raises the library's own message (not the workspace query's)."""
        small = self.batch(s_q=(16,), s_k=(16,), topk=64)
        self.check_against_reference(small, self.op(small), "small call")
        big = self.batch(s_q=(700, 300), s_k=(900, 1400), topk=256)
        self.check_against_reference(big, self.op(big), "larger call after a small one")
        bad = dict(big, scale=-1.0)
        with self.assertRaisesRegex(RuntimeError, "sm_scale"):
            self.op(bad)
        with self.assertRaisesRegex((RuntimeError, ValueError), "CUDA"):  # C++: RuntimeError; Python: ValueError
            q, kv = big["q"].cpu(), big["latent"]
            torch.ops.mlajit.mla_prefill(q[..., :128], q[..., 128:], kv[:, :512], kv[:, 512:], big["w"], big["idx"],
                                         big["cu_q"], big["cu_k"], big["cu_q_host"], big["cu_k_host"], 0.1)

    def test_opcheck(self):
        b = self.batch(s_q=(64,), s_k=(128,), topk=64)
        q, kv = b["q"], b["latent"]
        torch.library.opcheck(torch.ops.mlajit.mla_prefill.default,
                              (q[..., :128], q[..., 128:], kv[:, :512], kv[:, 512:], b["w"], b["idx"], b["cu_q"],
                               b["cu_k"], b["cu_q_host"], b["cu_k_host"], b["scale"]),
                              test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


if __name__ == "__main__":
    unittest.main()
