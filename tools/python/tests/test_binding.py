"""Tests of the Python binding (python3 -m unittest discover tools/python/tests).

- Layout: the ctypes structs against the C header, compiled with the machine's C compiler (skipped when
  there is none); the sparse MQA struct's appended workspace fields at their 64-bit offsets without one.
- mlajit_sparse_mqa_workspace_size: declared and answering its checks, through the library without a GPU.
- Planner: through the library on any machine (skipped when libmlajit.so is not built).
- GPU: every op against a float64 PyTorch reference on fresh random inputs, outputs poisoned with NaN
  first; sparse MQA with its workspace = without it, bit for bit; error cases. Skipped when torch, a GPU
  or the library is missing.
Tolerances: mlajit.reference (per element 2e-2 relative + 2e-2 * rms, rel L2 <= 1e-2, lse 1e-3 absolute;
1.5e-2 for mla_prefill's lse, whose paths round an intermediate to bf16).
"""
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools" / "python"))

import mlajit  # noqa: E402
from mlajit import _lib  # noqa: E402

try:
    import torch
    HAVE_TORCH = True
except ImportError:  # pragma: no cover
    torch = None
    HAVE_TORCH = False


def _lib_loads():
    try:
        _lib.lib()
        return True, ""
    except OSError as e:
        return False, str(e).splitlines()[0]


LIB_OK, LIB_WHY = _lib_loads()
GPU_OK = HAVE_TORCH and torch.cuda.is_available() and LIB_OK
GPU_WHY = ("torch is not installed" if not HAVE_TORCH else
           "no CUDA GPU" if not torch.cuda.is_available() else LIB_WHY)


class TestLayout(unittest.TestCase):
    """The ctypes mirrors have the C structs' sizes and field offsets."""

    @unittest.skipUnless(shutil.which("cc") or shutil.which("gcc"), "no C compiler to read the header's layout")
    def test_struct_layout_matches_header(self):
        structs = {
            "mlajit_tensor": _lib.Tensor,
            "mlajit_sparse_mqa_args": _lib.SparseMqaArgs,
            "mlajit_mha_args": _lib.MhaArgs,
            "mlajit_topk_mask_args": _lib.TopkMaskArgs,
            "mlajit_mla_prefill_args": _lib.MlaPrefillArgs,
            "mlajit_quantize_latent_cache_args": _lib.QuantizeLatentCacheArgs,
        }
        lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "mlajit/mlajit.h"', "int main(void) {"]
        for cname, py in structs.items():
            lines.append(f'printf("{cname} %zu\\n", sizeof({cname}));')
            for f, _ in py._fields_:
                lines.append(f'printf("{cname}.{f} %zu\\n", offsetof({cname}, {f}));')
        lines.append("return 0; }")
        cc = shutil.which("cc") or shutil.which("gcc")
        with tempfile.TemporaryDirectory() as d:
            src, exe = Path(d) / "layout.c", Path(d) / "layout"
            src.write_text("\n".join(lines))
            subprocess.run([cc, "-I", str(ROOT / "include"), str(src), "-o", str(exe)], check=True)
            got = dict(line.split() for line in subprocess.run([str(exe)], check=True, capture_output=True,
                                                                text=True).stdout.splitlines())
        for cname, py in structs.items():
            self.assertEqual(int(got[cname]), _ctypes_sizeof(py), f"sizeof({cname})")
            for f, _ in py._fields_:
                self.assertEqual(int(got[f"{cname}.{f}"]), getattr(py, f).offset, f"offsetof({cname}, {f})")

    def test_sparse_mqa_args_workspace_fields(self):
        """workspace / workspace_bytes appended after 0.2 (no compiler needed): 760 -> 776 bytes on 64-bit, the
        published 760 bytes unchanged before them, and 0 in a fresh struct (what an older library accepts)."""
        import ctypes
        A = _lib.SparseMqaArgs
        self.assertEqual([f for f, _ in A._fields_][-3:], ["causal", "workspace", "workspace_bytes"])
        if ctypes.sizeof(ctypes.c_void_p) == 8:
            self.assertEqual(ctypes.sizeof(_lib.Tensor), 80)
            self.assertEqual(A.block_table.offset, 672)
            self.assertEqual(A.causal.offset, 752)
            self.assertEqual(A.workspace.offset, 760)
            self.assertEqual(A.workspace_bytes.offset, 768)
            self.assertEqual(ctypes.sizeof(A), 776)
        a = A()
        self.assertEqual(a.struct_size, ctypes.sizeof(A))
        self.assertIsNone(a.workspace)
        self.assertEqual(a.workspace_bytes, 0)
        tail = bytes(memoryview(a).cast("B"))[A.workspace.offset:]
        self.assertEqual(tail, bytes(len(tail)))


def _ctypes_sizeof(t):
    import ctypes
    return ctypes.sizeof(t)


@unittest.skipUnless(LIB_OK, f"libmlajit.so not loadable: {LIB_WHY}")
class TestSparseMqaWorkspaceSize(unittest.TestCase):
    """mlajit_sparse_mqa_workspace_size through ctypes, without a GPU: declared, callable, its checks answer."""

    def test_declared_and_checks(self):
        import ctypes
        f = _lib.optional_symbol("mlajit_sparse_mqa_workspace_size")
        self.assertIsNotNone(f, f"{_lib.library_path()} lacks mlajit_sparse_mqa_workspace_size: rebuild it")
        self.assertIs(f.restype, ctypes.c_int)
        self.assertEqual(f.argtypes,
                         [ctypes.c_void_p, ctypes.POINTER(_lib.SparseMqaArgs), ctypes.POINTER(ctypes.c_size_t)])
        a = _lib.SparseMqaArgs()
        need = ctypes.c_size_t(12345)
        self.assertEqual(f(None, ctypes.byref(a), None), _lib.INVALID_ARGUMENT)
        self.assertIn(b"bytes is NULL", _lib.lib().mlajit_last_error())
        self.assertEqual(f(None, ctypes.byref(a), ctypes.byref(need)), _lib.INVALID_ARGUMENT)
        self.assertIn(b"handle", _lib.lib().mlajit_last_error())


@unittest.skipUnless(LIB_OK, f"libmlajit.so not loadable: {LIB_WHY}")
class TestPlanner(unittest.TestCase):
    def test_paths_and_predictions(self):
        plan = mlajit.plan_prefill(16, 2048, [1024, 4096, 16384], [1024, 16384, 65536], gpu_name="NVIDIA H200")
        self.assertEqual(len(plan.paths), 3)
        self.assertEqual(plan.paths[0], "dense_mha")  # s_k <= topk: dense is exact
        for p in plan.paths[1:]:
            self.assertIn(p, ("masked_mha", "sparse_mqa"))
        for ms in plan.mha_ms + plan.mqa_ms:
            self.assertTrue(ms > 0 and math.isfinite(ms), ms)

    def test_bad_requests(self):
        with self.assertRaises(ValueError):
            mlajit.plan_prefill(16, 2048, [1, 2], [1])
        with self.assertRaises(mlajit.MlajitError) as cm:
            mlajit.plan_prefill(16, 2048, [4096], [1024])  # s_q > s_k
        self.assertEqual(cm.exception.status, 1)
        self.assertTrue(cm.exception.message)


def _close(test, check):
    test.assertTrue(check.ok, repr(check))


@unittest.skipUnless(GPU_OK, f"skipped: {GPU_WHY}")
class TestGpu(unittest.TestCase):
    def setUp(self):
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.gen = torch.Generator(device=self.dev)
        seed = int.from_bytes(os.urandom(6), "little")
        self.gen.manual_seed(seed)
        self.seed_note = f"torch seed {seed}"

    def randn(self, *shape, scale=1.0):
        return (torch.randn(shape, device=self.dev, generator=self.gen) * scale).to(torch.bfloat16)

    def nan(self, *shape, dtype=None):
        return torch.full(shape, math.nan, dtype=dtype or torch.bfloat16, device=self.dev)

    # ---- sparse MQA ----
    def _mqa(self, heads, s_q_list, s_kv_list, topk, batched):
        from mlajit import reference as R
        T_q, T_k = sum(s_q_list), sum(s_kv_list)
        q, kv = self.randn(T_q, heads, 576), self.randn(T_k, 576)
        idx = R.causal_topk_indices(s_q_list, s_kv_list, topk, self.dev, self.gen)
        idx[0, :] = -1  # a row with no valid key
        scale = 1 / math.sqrt(192)
        cu_q = [0]
        cu_k = [0]
        for a, b in zip(s_q_list, s_kv_list):
            cu_q.append(cu_q[-1] + a)
            cu_k.append(cu_k[-1] + b)
        out, lse = self.nan(T_q, heads, 512), self.nan(T_q, heads, dtype=torch.float32)
        kw = dict(cu_seqlens_q=torch.tensor(cu_q, dtype=torch.int32, device=self.dev), cu_seqlens_kv=cu_k) \
            if batched else {}
        o, l, ml = mlajit.sparse_mqa_prefill(q, kv, idx, scale, out=out, lse=lse, return_max_logits=True, **kw)
        self.assertIs(o, out)
        rows = R.sample_rows(s_q_list, 24, self.dev, self.gen)
        ro, rl, rml = R.sparse_mqa(q, kv, idx, scale, rows, cu_q if batched else None, cu_k if batched else None)
        _close(self, R.check_out(f"out ({self.seed_note})", o[rows], ro))
        _close(self, R.check_lse("lse", l[rows], rl))
        _close(self, R.check_lse("max_logits", ml[rows], rml))
        self.assertTrue(torch.all(o[0] == 0), "a row with no valid index must be 0")

    def test_sparse_mqa_heads_128(self):
        self._mqa(128, [384], [384], 256, batched=False)

    def test_sparse_mqa_heads_16_batched(self):
        self._mqa(16, [200, 333], [700, 333], 128, batched=True)

    def test_sparse_mqa_flashmla_shapes(self):
        """kv [s_kv, 1, 576] and indices [s_q, 1, topk] as FlashMLA takes them."""
        from mlajit import reference as R
        q, kv = self.randn(128, 64, 576), self.randn(256, 1, 576)
        idx = R.causal_topk_indices([128], [256], 64, self.dev, self.gen)
        o, l = mlajit.sparse_mqa_prefill(q, kv, idx.unsqueeze(1), 0.07)
        rows = torch.arange(128, device=self.dev)
        ro, rl, _ = R.sparse_mqa(q, kv[:, 0], idx, 0.07, rows)
        _close(self, R.check_out("out", o, ro))
        _close(self, R.check_lse("lse", l, rl))

    def test_sparse_mqa_workspace_bit_identical(self):
        """The binding passes the key-set pre-pass a workspace of the queried size: the outputs equal, bit for
        bit, those of the same call with the workspace fields left 0 (as for a library without the query)."""
        from unittest import mock
        from mlajit import reference as R
        real = _lib.optional_symbol("mlajit_sparse_mqa_workspace_size")
        if real is None:
            self.skipTest(f"{mlajit.library_path()} has no mlajit_sparse_mqa_workspace_size")
        sizes = []

        def spy(handle, args, need):
            status = real(handle, args, need)
            sizes.append(need._obj.value)
            return status

        cases = ((16, [200, 333], [700, 333], 128, True), (128, [384], [384], 256, False))
        for heads, s_q, s_k, topk, batched in cases:
            T_q, T_k = sum(s_q), sum(s_k)
            q, kv = self.randn(T_q, heads, 576), self.randn(T_k, 576)
            idx = R.causal_topk_indices(s_q, s_k, topk, self.dev, self.gen)
            idx[0, :] = -1  # a row with no valid key
            idx[1, 1::2] = idx[1, 0::2]  # a row listing each of its keys twice
            cu_q, cu_k = [0], [0]
            for a, b in zip(s_q, s_k):
                cu_q.append(cu_q[-1] + a)
                cu_k.append(cu_k[-1] + b)
            kw = dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_k) if batched else {}
            sizes.clear()
            with mock.patch.dict(_lib._symbols, {"mlajit_sparse_mqa_workspace_size": spy}):
                got = mlajit.sparse_mqa_prefill(q, kv, idx, 0.07, return_max_logits=True, **kw)
            self.assertEqual(len(sizes), 1, "one size query per call")
            self.assertGreaterEqual(sizes[0], 4 * T_q * (topk + 1), "the pre-pass applies to these arguments")
            with mock.patch.dict(_lib._symbols, {"mlajit_sparse_mqa_workspace_size": None}):
                want = mlajit.sparse_mqa_prefill(q, kv, idx, 0.07, return_max_logits=True, **kw)
            for name, x, y in zip(("out", "lse", "max_logits"), got, want):
                self.assertTrue(torch.equal(x, y),
                                f"{name} differs with the workspace ({heads} heads, {self.seed_note})")

    # ---- MHA, mask ----
    def _mha_inputs(self, heads, s_q_list, s_k_list):
        T_q, T_k = sum(s_q_list), sum(s_k_list)
        cu_q, cu_k = [0], [0]
        for a, b in zip(s_q_list, s_k_list):
            cu_q.append(cu_q[-1] + a)
            cu_k.append(cu_k[-1] + b)
        return (self.randn(T_q, heads, 192), self.randn(T_k, heads, 128), self.randn(T_k, 64),
                self.randn(T_k, heads, 128), cu_q, cu_k)

    def test_mha_dense_split_and_packed_k(self):
        from mlajit import reference as R
        s_q, s_k = [300, 77], [300, 1000]  # second request: 923 cached keys (offset not a multiple of 32)
        q, kn, kp, v, cu_q, cu_k = self._mha_inputs(16, s_q, s_k)
        scale = 1 / math.sqrt(192)
        rows = R.sample_rows(s_q, 24, self.dev, self.gen)
        ro, rl = R.mha(q, kn, v, cu_q, cu_k, scale, rows, k_pe=kp)
        out, lse = self.nan(q.size(0), 16, 128), self.nan(q.size(0), 16, dtype=torch.float32)
        o, l = mlajit.mha_prefill(q, kn, kp, v, cu_q, torch.tensor(cu_k, dtype=torch.int32, device=self.dev), scale,
                                  out=out, lse=lse)
        _close(self, R.check_out(f"out split k ({self.seed_note})", o[rows], ro))
        _close(self, R.check_lse("lse split k", l[rows], rl))
        k = torch.cat([kn, kp.unsqueeze(1).expand(-1, 16, -1)], dim=2).contiguous()
        o2, l2 = mlajit.mha_prefill(q, k, None, v, cu_q, cu_k, scale, out=self.nan(q.size(0), 16, 128))
        _close(self, R.check_out("out packed k", o2[rows], ro))
        _close(self, R.check_lse("lse packed k", l2[rows], rl))

    def test_topk_mask_and_masked_mha(self):
        from mlajit import reference as R
        s_q, s_k = [130, 257], [1000, 257]
        topk = 128
        q, kn, kp, v, cu_q, cu_k = self._mha_inputs(32, s_q, s_k)
        idx = R.causal_topk_indices(s_q, s_k, topk, self.dev, self.gen)
        words = mlajit.topk_mask_words(max(s_k))
        mask = mlajit.topk_mask_build(idx, cu_q, cu_k, out=torch.full((q.size(0), words), 0x5A5A5A5A,
                                                                      dtype=torch.int32, device=self.dev))
        # Bitmask reference: bit j of word w = key 32w + j of the row's request.
        want = torch.zeros((q.size(0), words * 32), dtype=torch.bool, device=self.dev)
        for r in range(len(s_q)):
            lo, hi = cu_q[r], cu_q[r + 1]
            want[lo:hi, :s_k[r]] = R.key_mask(idx[lo:hi], s_k[r])
        bits = ((mask.unsqueeze(2) >> torch.arange(32, device=self.dev, dtype=torch.int32)) & 1).bool()
        self.assertTrue(torch.equal(bits.reshape(q.size(0), -1), want), "top-k bitmask differs from the reference")
        scale = 0.1
        rows = R.sample_rows(s_q, 24, self.dev, self.gen)
        ro, rl = R.mha(q, kn, v, cu_q, cu_k, scale, rows, k_pe=kp, indices=idx)
        o, l = mlajit.mha_prefill(q, kn, kp, v, cu_q, cu_k, scale, mask=mask, out=self.nan(q.size(0), 32, 128),
                                  lse=self.nan(q.size(0), 32, dtype=torch.float32))
        _close(self, R.check_out(f"masked out ({self.seed_note})", o[rows], ro))
        _close(self, R.check_lse("masked lse", l[rows], rl))

    # ---- one-call MLA prefill ----
    def test_mla_prefill_paths(self):
        if not mlajit.has_mla_prefill():
            self.skipTest(f"{mlajit.library_path()} has no mlajit_mla_prefill yet")
        from mlajit import reference as R
        heads, topk = 16, 256
        s_q, s_k = [200, 64, 300], [200, 1100, 300]
        T_q, T_k = sum(s_q), sum(s_k)
        q = self.randn(T_q, heads, 192)
        kv = self.randn(T_k, 576)
        w = self.randn(heads * 256, 512, scale=1 / math.sqrt(512))
        idx = R.causal_topk_indices(s_q, s_k, topk, self.dev, self.gen)
        cu_q = [0, 200, 264, 564]
        cu_k = [0, 200, 1300, 1600]
        scale = 1 / math.sqrt(192)
        args = (q[..., :128], q[..., 128:], kv[:, :512], kv[:, 512:], w, idx, cu_q, cu_k, scale)
        rows = R.sample_rows(s_q, 16, self.dev, self.gen)
        ro, rl = R.mla(*args[:9], rows)
        for force in (None, "masked_mha", "sparse_mqa"):
            lse = self.nan(T_q, heads, dtype=torch.float32)
            o, paths = mlajit.mla_prefill(*args, out=self.nan(T_q, heads, 128), lse=lse, force_path=force,
                                          return_paths=True)
            self.assertEqual(len(paths), 3)
            if force:
                self.assertEqual(paths, [force] * 3)
            _close(self, R.check_out(f"mla out force={force} paths={paths} ({self.seed_note})", o[rows], ro))
            _close(self, R.check_lse(f"mla lse force={force}", lse[rows], rl, atol=R.MLA_LSE_ATOL))
        with self.assertRaises(mlajit.MlajitError):  # dense is not exact with s_k > topk
            mlajit.mla_prefill(*args, force_path="dense_mha")

    # ---- errors ----
    def test_errors(self):
        q, kn, kp, v, cu_q, cu_k = self._mha_inputs(16, [64], [64])
        with self.assertRaisesRegex(ValueError, "dtype"):
            mlajit.mha_prefill(q.half(), kn, kp, v, cu_q, cu_k, 0.1)
        with self.assertRaisesRegex(ValueError, "CUDA"):
            mlajit.mha_prefill(q, kn.cpu(), kp, v, cu_q, cu_k, 0.1)
        strided = torch.empty((64, 16, 256), dtype=torch.bfloat16, device=self.dev)[..., ::2]
        with self.assertRaisesRegex(ValueError, "contiguous"):
            mlajit.mha_prefill(q, kn, kp, strided, cu_q, cu_k, 0.1)
        with self.assertRaises(mlajit.MlajitError) as cm:  # the library checks shapes
            mlajit.mha_prefill(q, kn, kp, v, [0, 64], [0, 63], 0.1)
        self.assertEqual(cm.exception.status, 1)
        self.assertIn("cu_seqlens_k", cm.exception.message)
        qm, kv = self.randn(64, 16, 576), self.randn(64, 576)
        bad_idx = torch.zeros((64, 100), dtype=torch.int32, device=self.dev)  # topk not a multiple of 64
        with self.assertRaises(mlajit.MlajitError) as cm:
            mlajit.sparse_mqa_prefill(qm, kv, bad_idx, 0.1)
        self.assertIn("topk", cm.exception.message)
        with self.assertRaisesRegex(ValueError, "sm_scale|positive"):
            try:
                mlajit.sparse_mqa_prefill(qm, kv, bad_idx[:, :64], -1.0)
            except mlajit.MlajitError as e:  # the library's message, as ValueError for the regex check
                raise ValueError(e.message)


if __name__ == "__main__":
    unittest.main()
