"""mlajit: DSA (MLA + DeepSeek Sparse Attention) prefill kernels, called from PyTorch.

A thin ctypes binding of libmlajit.so's C API (include/mlajit/mlajit.h). The library is looked for at
$MLAJIT_LIBRARY, then inside this package (pip install .), then a source tree's build, build-gpu,
build-bench folders (libmlajit.so), then by plain name. Every function takes CUDA tensors and runs on
torch.cuda.current_stream(); one mlajit handle per CUDA device is created on first use under PyTorch's
context. Library errors raise MlajitError.

With PyTorch installed, importing the package also registers the custom ops torch.ops.mlajit.*
(mla_prefill, sparse_mqa_prefill, mha_prefill, topk_mask_build, quantize_latent_cache; see
mlajit.torch_ops), which torch.compile traces and CUDA graphs capture: the C++ ops of libmlajit_torch.so
when it was built for this torch, else the Python-defined ones (torch_ops_backend() says which).
"""
import importlib.util as _importlib_util

from ._lib import candidate_paths, library_path
from ._ops import (MlajitError, PrefillPlan, arch, has_mla_prefill, mha_prefill, mla_prefill, plan_prefill,
                   quantize_latent_cache, sparse_mqa_prefill, topk_mask_build, topk_mask_words, version)

PATHS = ("dense_mha", "masked_mha", "sparse_mqa")

__all__ = ["MlajitError", "PrefillPlan", "PATHS", "arch", "candidate_paths", "has_mla_prefill", "library_path",
           "mha_prefill", "mla_prefill", "plan_prefill", "quantize_latent_cache", "sparse_mqa_prefill", "topk_mask_build",
           "topk_mask_words", "version"]

if _importlib_util.find_spec("torch") is not None:
    from . import torch_ops  # noqa: F401  (registers torch.ops.mlajit.*)
    __all__.append("torch_ops")


def torch_ops_backend():
    """Which implementation serves torch.ops.mlajit.*: 'cpp' (libmlajit_torch.so, no Python on the call path),
    'python' (torch.library ops defined in Python) or 'none' (torch is not installed). The reason:
    mlajit.torch_ops.backend_reason()."""
    if _importlib_util.find_spec("torch") is None:
        return "none"
    from . import torch_ops as _t
    return _t.backend()


__all__.append("torch_ops_backend")
