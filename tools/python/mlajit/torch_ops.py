"""mlajit's ops as PyTorch custom ops: torch.ops.mlajit.{mla_prefill, sparse_mqa_prefill, mha_prefill,
topk_mask_build, quantize_latent_cache}. mla_prefill's kv_cache may be the FP8 latent cache (torch.uint8
[num_blocks, block_size, 656]); quantize_latent_cache writes one in place (it mutates kv_cache).

Two backends register the same schemas under the same names (mlajit/_torch_schemas.py), so user code is
the same with either; `mlajit.torch_ops_backend()` says which one is active and why:
- "cpp": libmlajit_torch.so (tools/python/csrc/mlajit_torch.cpp), TORCH_LIBRARY ops whose CUDA kernels call
  the C API with no Python on the call path, and SymInt-aware Meta kernels for torch.compile. Chosen when
  the library is found and was built against this very torch version (mlajit/_torch_lib.py).
- "python": torch.library ops defined in Python calling the C API through ctypes (mlajit/_torch_ops_python.py).
  torch.library's Python dispatch alone costs ~13 us per call.
MLAJIT_TORCH_BACKEND=auto (default) | cpp (fail unless the C++ ops load) | python (never load them).

Either way the ops have fake (meta) implementations: a model calling them compiles under
torch.compile(fullgraph=True) without graph breaks and is captured by CUDA graphs. Imported by
`import mlajit` when PyTorch is installed.
"""
import os

import torch

from . import _lib as L
from . import _ops as O
from . import _torch_lib

_MODES = ("auto", "cpp", "python")


def _select():
    """(backend, reason): loads the C++ ops when allowed and possible."""
    mode = os.environ.get("MLAJIT_TORCH_BACKEND", "auto").strip().lower() or "auto"
    if mode not in _MODES:
        raise ImportError(f"MLAJIT_TORCH_BACKEND={mode!r}: expected one of {', '.join(_MODES)}")
    if mode == "python":
        return "python", "MLAJIT_TORCH_BACKEND=python"
    try:
        L.lib()  # the C++ ops link libmlajit: load the binding's copy first, so both share it
    except OSError as e:
        why = f"libmlajit.so not loadable: {str(e).splitlines()[0]}"
    else:
        path, why = _torch_lib.find(torch.__version__)
        if path is not None:
            try:
                torch.ops.load_library(path)
            except (OSError, RuntimeError) as e:
                why = f"{path} failed to load: {e}"
            else:
                _share_handles(path)
                return "cpp", f"{path} (built for torch {torch.__version__})"
    if mode == "cpp":
        raise ImportError(f"MLAJIT_TORCH_BACKEND=cpp but the C++ torch ops cannot be used: {why}")
    return "python", why


def _share_handles(path):
    """The binding's functions (mlajit.mla_prefill, ...) use the C++ ops' handle of each device: one handle
    and one cuBLASLt set-up per device for both."""
    import ctypes
    f = ctypes.CDLL(path).mlajit_torch_handle
    f.restype = ctypes.c_void_p
    f.argtypes = [ctypes.c_int]
    O._handle_provider = f


_BACKEND, _REASON = _select()
if _BACKEND == "python":
    from . import _torch_ops_python  # noqa: F401,E402  (defines and registers the Python ops)


def backend():
    """'cpp' (libmlajit_torch.so) or 'python' (torch.library ops defined in Python)."""
    return _BACKEND


def backend_reason():
    """Why this backend: the C++ library's path, or why it was not used."""
    return _REASON


def _mask_words(cu_k_host):
    """The mask width topk_mask_build allocates for these host cu_seqlens_k (both backends' rule)."""
    max_k = 0
    for i in range(len(cu_k_host) - 1):
        max_k = torch.sym_max(max_k, cu_k_host[i + 1] - cu_k_host[i])
    return (max_k + 127) // 128 * 4
