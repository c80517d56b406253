"""ctypes mirror of include/mlajit/mlajit.h and the loading of libmlajit.so.

Only this module knows the C layout. The structs below must match the header field for field; a change
to the header's structs needs the same change here (tests/test_binding.py checks the sizes against
values computed from the header's layout rules).
"""
import ctypes
import os
import threading
from pathlib import Path

# Status codes (mlajit_status).
OK = 0
INVALID_ARGUMENT = 1
NO_DRIVER = 2
UNSUPPORTED = 7

# mlajit_dtype
BF16, FP32, INT32, UINT32, UINT8 = 0, 1, 2, 3, 4

# mlajit_path
PATHS = ("dense_mha", "masked_mha", "sparse_mqa")
PATH_IDS = {name: i for i, name in enumerate(PATHS)}


class Tensor(ctypes.Structure):
    """mlajit_tensor: device pointer, dtype, up to 4 dims, strides in elements."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * 4),
        ("stride", ctypes.c_int64 * 4),
    ]


_I32P = ctypes.POINTER(ctypes.c_int32)


class _Args(ctypes.Structure):
    """An args struct of the C API: struct_size (first field) is set to this struct's size on creation."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.struct_size = ctypes.sizeof(self)


class SparseMqaArgs(_Args):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q", Tensor), ("kv", Tensor), ("indices", Tensor),
        ("out", Tensor), ("lse", Tensor), ("max_logits", Tensor),
        ("cu_seqlens_q", Tensor), ("cu_seqlens_kv", Tensor),
        ("cu_seqlens_q_host", _I32P), ("cu_seqlens_kv_host", _I32P),
        ("sm_scale", ctypes.c_float),
        ("block_table", Tensor),
        ("causal", ctypes.c_int32),
        # Appended after 0.2 (760 -> 776 bytes on 64-bit): the key-set pre-pass's optional device scratch. An
        # older library accepts the longer struct while these stay 0 (NULL, 0 bytes: no pre-pass).
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
    ]


class MhaArgs(_Args):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q", Tensor), ("k", Tensor), ("k_nope", Tensor), ("k_pe", Tensor), ("v", Tensor),
        ("out", Tensor), ("lse", Tensor),
        ("cu_seqlens_q", Tensor), ("cu_seqlens_k", Tensor),
        ("cu_seqlens_q_host", _I32P), ("cu_seqlens_k_host", _I32P),
        ("mask", Tensor),
        ("sm_scale", ctypes.c_float),
    ]


class TopkMaskArgs(_Args):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("indices", Tensor),
        ("cu_seqlens_q", Tensor), ("cu_seqlens_k", Tensor),
        ("cu_seqlens_q_host", _I32P), ("cu_seqlens_k_host", _I32P),
        ("mask", Tensor),
    ]


class MlaPrefillArgs(_Args):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q_nope", Tensor), ("q_pe", Tensor), ("kv_c", Tensor), ("k_pe", Tensor), ("w_kv_b", Tensor),
        ("indices", Tensor),
        ("cu_seqlens_q", Tensor), ("cu_seqlens_k", Tensor),
        ("cu_seqlens_q_host", _I32P), ("cu_seqlens_k_host", _I32P),
        ("out", Tensor), ("lse", Tensor),
        ("sm_scale", ctypes.c_float),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        ("force_path", ctypes.c_int),
        ("paths_out", ctypes.POINTER(ctypes.c_int)),
        ("topk", ctypes.c_int32),
        ("kv_cache", Tensor), ("block_table", Tensor),
    ]


class QuantizeLatentCacheArgs(_Args):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("kv_c", Tensor), ("k_pe", Tensor), ("slot_mapping", Tensor),
        ("kv_cache", Tensor),
    ]


def _package_dir():
    return Path(__file__).resolve().parent


def _repo_root():
    """The source tree holding this package (tools/python/mlajit), or None for an installed package."""
    root = _package_dir().parents[2]
    return root if (root / "CMakeLists.txt").is_file() and (root / "include" / "mlajit").is_dir() else None


def bundled_path():
    """libmlajit.so shipped inside the installed package (pip install .), or None in a source tree."""
    p = _package_dir() / "lib" / "libmlajit.so"
    return str(p) if p.is_file() else None


def candidate_paths():
    """Where libmlajit.so is looked for, in order: $MLAJIT_LIBRARY, the package's own copy, a source
    tree's build folders (build, build-gpu, build-bench), the loader path."""
    env = os.environ.get("MLAJIT_LIBRARY")
    out = []
    if env:
        out.append(env)
    own = bundled_path()
    if own:
        out.append(own)
    root = _repo_root()
    if root is not None:
        for d in ("build", "build-gpu", "build-bench"):
            out.append(str(root / d / "libmlajit.so"))
    out.append("libmlajit.so")
    return out


# NVIDIA's PyPI packages: CUDA 13 puts every library in nvidia/cu13/lib; the -cu12 packages use one folder
# per library. The library finds them itself relative to its own path (src/cuda/dynlib.cpp), which covers
# the bundled copy; for a libmlajit.so from elsewhere (MLAJIT_LIBRARY, a source build) the binding points
# MLAJIT_NVRTC_LIB / MLAJIT_CUBLASLT_LIB at them, unless the user already set those.
_NVIDIA_LIBS = {
    "MLAJIT_NVRTC_LIB": [("cu13", "libnvrtc.so.13"), ("cuda_nvrtc", "libnvrtc.so.12")],
    "MLAJIT_CUBLASLT_LIB": [("cu13", "libcublasLt.so.13"), ("cublas", "libcublasLt.so.12")],
}


def nvidia_package_libraries():
    """{env var: path} for NVRTC and cuBLASLt found in the installed nvidia-* PyPI packages."""
    try:
        import nvidia  # namespace package of nvidia-cuda-nvrtc, nvidia-cublas, ...
    except ImportError:
        return {}
    found = {}
    for var, options in _NVIDIA_LIBS.items():
        for base in getattr(nvidia, "__path__", []):
            for sub, name in options:
                p = Path(base) / sub / "lib" / name
                if p.is_file():
                    found[var] = str(p)
                    break
            if var in found:
                break
    return found


def _point_at_nvidia_packages(loaded_path):
    if bundled_path() is not None and loaded_path == bundled_path():
        return  # the bundled library searches next to itself
    for var, path in nvidia_package_libraries().items():
        os.environ.setdefault(var, path)


_lib = None
_lib_path = None
_lock = threading.Lock()


def _declare(lib):
    c = ctypes
    lib.mlajit_last_error.restype = c.c_char_p
    lib.mlajit_last_error.argtypes = []
    lib.mlajit_status_name.restype = c.c_char_p
    lib.mlajit_status_name.argtypes = [c.c_int]
    lib.mlajit_version.restype = c.c_char_p
    lib.mlajit_version.argtypes = []
    lib.mlajit_create.restype = c.c_int
    lib.mlajit_create.argtypes = [c.c_int, c.POINTER(c.c_void_p)]
    lib.mlajit_destroy.restype = c.c_int
    lib.mlajit_destroy.argtypes = [c.c_void_p]
    lib.mlajit_handle_arch.restype = c.c_char_p
    lib.mlajit_handle_arch.argtypes = [c.c_void_p]
    lib.mlajit_sparse_mqa_prefill.restype = c.c_int
    lib.mlajit_sparse_mqa_prefill.argtypes = [c.c_void_p, c.POINTER(SparseMqaArgs), c.c_void_p]
    lib.mlajit_mha_prefill.restype = c.c_int
    lib.mlajit_mha_prefill.argtypes = [c.c_void_p, c.POINTER(MhaArgs), c.c_void_p]
    lib.mlajit_topk_mask_words.restype = c.c_int64
    lib.mlajit_topk_mask_words.argtypes = [c.c_int64]
    lib.mlajit_topk_mask_bytes.restype = c.c_size_t
    lib.mlajit_topk_mask_bytes.argtypes = [c.c_int64, c.c_int64]
    lib.mlajit_topk_mask_build.restype = c.c_int
    lib.mlajit_topk_mask_build.argtypes = [c.c_void_p, c.POINTER(TopkMaskArgs), c.c_void_p]
    lib.mlajit_path_name.restype = c.c_char_p
    lib.mlajit_path_name.argtypes = [c.c_int]
    lib.mlajit_plan_prefill.restype = c.c_int
    lib.mlajit_plan_prefill.argtypes = [c.c_char_p, c.c_int, c.c_int, c.c_int, c.POINTER(c.c_int64),
                                        c.POINTER(c.c_int64), c.POINTER(c.c_int), c.POINTER(c.c_double),
                                        c.POINTER(c.c_double)]


def lib():
    """The loaded library (loaded on first use). Raises OSError listing every place tried."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        errors = []
        for p in candidate_paths():
            if os.sep in p and not os.path.exists(p):
                errors.append(f"{p}: no such file")
                continue
            try:
                _point_at_nvidia_packages(p)
                handle = ctypes.CDLL(p)
            except OSError as e:
                errors.append(f"{p}: {e}")
                continue
            _declare(handle)
            _lib, _lib_path = handle, p
            return _lib
        raise OSError("libmlajit.so not found; reinstall the package (pip install .), build it (cmake "
                      "--build build --target mlajit) or set MLAJIT_LIBRARY to its path. Tried:\n  "
                      + "\n  ".join(errors))


def library_path():
    lib()
    return _lib_path


_symbols = {}  # name -> declared function or None: the per-call functions ask for theirs on every call


def optional_symbol(name):
    """A C function of the library, or None when this build lacks it (declared once, on first use)."""
    try:
        return _symbols[name]
    except KeyError:
        pass
    f = _declare_optional(name)
    _symbols[name] = f
    return f


def _declare_optional(name):
    L = lib()
    try:
        f = getattr(L, name)
    except AttributeError:
        return None
    c = ctypes
    if name == "mlajit_mla_prefill_workspace_size":
        f.restype = c.c_int
        f.argtypes = [c.c_void_p, c.POINTER(MlaPrefillArgs), c.POINTER(c.c_size_t)]
    elif name == "mlajit_mla_prefill":
        f.restype = c.c_int
        f.argtypes = [c.c_void_p, c.POINTER(MlaPrefillArgs), c.c_void_p]
    elif name == "mlajit_sparse_mqa_workspace_size":
        f.restype = c.c_int
        f.argtypes = [c.c_void_p, c.POINTER(SparseMqaArgs), c.POINTER(c.c_size_t)]
    elif name == "mlajit_quantize_latent_cache":
        f.restype = c.c_int
        f.argtypes = [c.c_void_p, c.POINTER(QuantizeLatentCacheArgs), c.c_void_p]
    return f
