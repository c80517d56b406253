"""The engine-style worked example (examples/python/sparse_mla_prefill_vllm.py) runs: its planner-only dry
run everywhere the library is built; with torch and a GPU, its checked prefill (bf16 paged cache and
fp8_ds_mla), which compares with a float64 reference and exits 1 on a mismatch."""
import os
import subprocess
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "python" / "sparse_mla_prefill_vllm.py"
sys.path.insert(0, str(ROOT / "tools" / "python"))

from mlajit import _lib  # noqa: E402


def _lib_loads():
    try:
        _lib.lib()
        return True
    except OSError:
        return False


def _gpu():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def _run(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools" / "python"))
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, env=env, timeout=600)


@unittest.skipUnless(_lib_loads(), "libmlajit.so is not built")
class ExampleTests(unittest.TestCase):
    def test_dry_run_plans_every_request(self):
        r = _run("--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [ln for ln in r.stdout.splitlines() if "request:" in ln]
        self.assertEqual(len(lines), 4, r.stdout)
        for ln in lines:
            self.assertRegex(ln, r"-> (dense_mha|masked_mha|sparse_mqa)")

    @unittest.skipUnless(_gpu(), "needs torch and a GPU")
    def test_checked_prefill_bf16_and_fp8(self):
        for kvd in ("auto", "fp8_ds_mla"):
            r = _run("--kv-cache-dtype", kvd)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("PASS", r.stdout)


if __name__ == "__main__":
    unittest.main()
