"""The Python backend of mlajit's PyTorch custom ops (see mlajit.torch_ops): the ops defined with
torch.library in Python, their CUDA implementations calling libmlajit through ctypes. Used when the C++ op
library (libmlajit_torch.so) is absent or was built for another torch; the same schemas and op names.

Registered with torch.library (namespace `mlajit`) with fake (meta) implementations, so a model calling
them compiles under torch.compile(fullgraph=True) without graph breaks and is captured by CUDA graphs.

The schemas keep what the C API needs first-class:
- cu_seqlens come twice, as int32 CUDA tensors (read by the kernels; static under a CUDA graph) and as
  host lists `SymInt[]` (shapes, grids and the planner's per-request paths come from them). An engine has
  both (e.g. vLLM's query_start_loc and query_start_loc_cpu); nothing here copies between host and device,
  so the ops never synchronize and are legal inside a CUDA graph capture. Under torch.compile the host
  lists may be symbolic; the kernels see the values of the call (of the capture, under a CUDA graph).
- outputs are allocated by the op (functional: no mutated arguments), so torch.compile and CUDA graph
  trees manage their memory.

Host cost: torch.library's Python dispatch alone costs ~13 us per call (an empty Python op of this schema
on the H200 machine), so this backend cannot reach issue 15's 15 us; the C++ backend can. Here the
implementations are registered straight on the CUDA dispatch key (no autograd wrapper), reuse one ctypes
argument block per op and thread, and mla_prefill and sparse_mqa_prefill query their workspace sizes only
when the cached workspace is too small.
"""
import ctypes
import struct
import threading

import torch

from . import _lib as L
from . import _ops as O
from ._torch_schemas import NAMESPACE as _NS, SCHEMAS

try:
    _lib_def = torch.library.Library(_NS, "DEF")
except RuntimeError as e:  # another copy of the package registered the namespace in this process
    raise ImportError(f"torch.ops.{_NS} is already registered by another copy of mlajit in this process "
                      f"({e}); import one copy only (the installed package, or tools/python of a source tree)") from e

for _schema in SCHEMAS.values():
    _lib_def.define(_schema)


# ---- fake (meta) implementations: output shapes from input shapes (and the host lists for the mask) -----

@torch.library.register_fake(f"{_NS}::mla_prefill")
def _mla_prefill_fake(q_nope, q_pe, kv_c, k_pe, w_kv_b, indices, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_host,
                      cu_seqlens_k_host, sm_scale, topk=0, force_path=-1, kv_cache=None, block_table=None):
    return q_nope.new_empty((q_nope.shape[0], q_nope.shape[1], 128))


@torch.library.register_fake(f"{_NS}::sparse_mqa_prefill")
def _sparse_mqa_prefill_fake(q, kv, indices, sm_scale, cu_seqlens_q=None, cu_seqlens_kv=None, cu_seqlens_q_host=None,
                             cu_seqlens_kv_host=None, block_table=None, causal=0):
    return (q.new_empty((q.shape[0], q.shape[1], 512)),
            q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32))


@torch.library.register_fake(f"{_NS}::mha_prefill")
def _mha_prefill_fake(q, k_nope, k_pe, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_host, cu_seqlens_k_host, sm_scale,
                      mask=None):
    return (q.new_empty((q.shape[0], q.shape[1], 128)),
            q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32))


def _mask_words(cu_k_host):
    max_k = 0
    for i in range(len(cu_k_host) - 1):
        max_k = torch.sym_max(max_k, cu_k_host[i + 1] - cu_k_host[i])
    # mlajit_topk_mask_words: ceil(max_k / 32) padded to a multiple of 4 words (16-byte rows, which the Hopper
    # MHA kernel reads by TMA); checked against the library in the tests (the C++ Meta kernel has the same rule)
    return (max_k + 127) // 128 * 4


@torch.library.register_fake(f"{_NS}::topk_mask_build")
def _topk_mask_build_fake(indices, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_host, cu_seqlens_k_host):
    return indices.new_empty((indices.shape[0], _mask_words(cu_seqlens_k_host)), dtype=torch.int32)


# ---- CUDA implementations ----------------------------------------------------------------------------

_BF16 = torch.bfloat16
_tls = threading.local()
_host_arrays = {}  # tuple of ints -> ctypes int32 array (kept alive; engines repeat a few layouts)
_HOST_ARRAYS_MAX = 4096


def _host(seq):
    """Address of a cached int32 host array holding seq (the C API reads cu_seqlens from the host)."""
    key = tuple(seq)
    hit = _host_arrays.get(key)
    if hit is None:
        arr = (ctypes.c_int32 * len(key))(*key)
        if len(_host_arrays) >= _HOST_ARRAYS_MAX:
            _host_arrays.clear()
        hit = _host_arrays[key] = (arr, ctypes.addressof(arr))
    return hit[1]


_PTR = struct.Struct("=Q")


def _put_ptr(a, field, address):
    _PTR.pack_into(a.bytes, a.offsets[field], address)


_CODES = {torch.bfloat16: L.BF16, torch.float32: L.FP32, torch.int32: L.INT32, torch.uint8: L.UINT8}
if hasattr(torch, "uint32"):
    _CODES[torch.uint32] = L.UINT32


_TENSOR = struct.Struct("=Qii4q4q")  # mlajit_tensor: data, dtype, ndim, shape[4], stride[4]
assert _TENSOR.size == ctypes.sizeof(L.Tensor)


def _put(a, field, t, code=None):
    """Writes the mlajit_tensor field `field` of the args block `a` for a CUDA tensor, in one pack_into at
    the field's offset: the per-call cost is reading the tensor's metadata, not ctypes field by field.
    The library checks shapes, strides and the dtype code."""
    if not t.is_cuda:
        raise ValueError(f"{field}: mlajit ops take CUDA tensors, got one on {t.device}")
    if code is None:
        code = _CODES.get(t.dtype)
        if code is None:
            raise ValueError(f"{field}: unsupported dtype {t.dtype} (mlajit takes bf16, fp32, int32)")
    sh = t.shape
    st = t.stride()
    n = len(sh)
    if n == 3:
        v = (t.data_ptr(), code, 3, sh[0], sh[1], sh[2], 0, st[0], st[1], st[2], 0)
    elif n == 2:
        v = (t.data_ptr(), code, 2, sh[0], sh[1], 0, 0, st[0], st[1], 0, 0)
    elif n == 1:
        v = (t.data_ptr(), code, 1, sh[0], 0, 0, 0, st[0], 0, 0, 0)
    elif n == 4:
        v = (t.data_ptr(), code, 4, *sh, *st)
    else:
        raise ValueError(f"{field}: mlajit tensors have 1 to 4 dimensions, got shape {tuple(sh)}")
    _TENSOR.pack_into(a.bytes, a.offsets[field], *v)


class _ArgBlock:
    """One op's reusable C args struct on this thread, its bytes as a memoryview and its fields' offsets."""

    def __init__(self, cls):
        self.struct = cls()
        self.bytes = memoryview(self.struct).cast("B")
        self.offsets = {name: getattr(cls, name).offset for name, _ in cls._fields_}
        self.zero = bytes(ctypes.sizeof(cls))
        if cls._fields_[0][0] == "struct_size":  # the ABI's size-versioned structs
            self.struct.struct_size = ctypes.sizeof(cls)
            self.zero = bytes(self.bytes)
        self.ptr = ctypes.byref(self.struct)


def _args(kind, cls):
    """This thread's argument block of one op, reset (absent tensors are NULL; struct_size set)."""
    a = getattr(_tls, kind, None)
    if a is None:
        a = _ArgBlock(cls)
        setattr(_tls, kind, a)
    else:
        a.bytes[:] = a.zero
    return a


_C = None


def _c():
    """The library with every function this module calls declared (argtypes: a stream is a pointer)."""
    global _C
    if _C is None:
        lib = L.lib()
        for name in ("mlajit_mla_prefill", "mlajit_mla_prefill_workspace_size"):
            if L.optional_symbol(name) is None:
                raise O.MlajitError(L.UNSUPPORTED, "MLAJIT_ERROR_UNSUPPORTED",
                                    f"{L.library_path()} has no {name}: rebuild it from a newer source tree")
        _C = lib
    return _C


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing


def _device_state(device):
    """(handle, stream) for the tensor's device: PyTorch's current stream of that device (as an int)."""
    if _raw_stream is not None:
        return O._handle(device), _raw_stream(device.index)
    return O._handle(device), torch.cuda.current_stream(device).cuda_stream


class _Workspace:
    """An op's workspace of one (device, stream): grown on demand, never shrunk. A workspace used while a
    CUDA graph was being captured is kept alive for good (the graph replays into it)."""

    def __init__(self):
        self.tensor = None
        self.ptr = 0         # self.tensor's address and bytes (what the args block gets)
        self.nbytes = 0
        self.pinned = False  # self.tensor was used during a capture
        self.captured = []   # earlier workspaces a captured graph still uses


_workspaces = {}      # mla_prefill's, by (device index, stream)
_mqa_workspaces = {}  # sparse_mqa_prefill's (its key-set pre-pass), by (device index, stream)


def _workspace(device, stream, cache=_workspaces):
    key = (device.index, stream)
    w = cache.get(key)
    if w is None:
        w = cache[key] = _Workspace()
    return w


def _grow(w, need, device):
    if w.tensor is not None and w.tensor.numel() >= need:
        return
    size = max((need + (1 << 20) - 1) >> 20, 1) << 20  # whole MiB
    if w.pinned:
        w.captured.append(w.tensor)
    w.tensor = torch.empty(size, dtype=torch.uint8, device=device)
    w.ptr = w.tensor.data_ptr()
    w.nbytes = size
    w.pinned = False


# The ops' workspace / workspace_bytes fields: adjacent in both args structs, written with one pack_into.
_WS_FIELDS = struct.Struct("=QQ")
_MLA_WS_OFFSET = L.MlaPrefillArgs.workspace.offset
_MQA_WS_OFFSET = L.SparseMqaArgs.workspace.offset
assert L.MlaPrefillArgs.workspace_bytes.offset == _MLA_WS_OFFSET + 8
assert L.SparseMqaArgs.workspace_bytes.offset == _MQA_WS_OFFSET + 8


def _call_with_workspace(w, device, a, ws_offset, call, size, handle, stream, name, size_name):
    """call(handle, args, stream) with the cached workspace w of (device, stream); with none yet, or after the call
    failed (nothing launches when a check fails), sizes it with size(handle, args, &need) and, where the workspace was
    the problem, grows it and calls once more. A real argument error keeps the call's own message (the query replaces
    the thread's); with no workspace tried yet an error of the query carries size_name."""
    status = L.OK
    if w.tensor is not None:
        _WS_FIELDS.pack_into(a.bytes, ws_offset, w.ptr, w.nbytes)
        status = call(handle, a.ptr, stream)
        if status == L.OK:
            return
    first = None
    if status != L.OK:  # the call's own error, before the query below replaces the thread's message
        try:
            O._check(status, name)
        except O.MlajitError as e:
            first = e
    need = ctypes.c_size_t(0)
    qs = size(handle, a.ptr, ctypes.byref(need))
    if qs != L.OK:
        if first is not None:
            raise first
        O._check(qs, size_name)
    if first is not None and w.nbytes >= need.value:
        raise first  # not a workspace problem
    _grow(w, need.value, device)
    _WS_FIELDS.pack_into(a.bytes, ws_offset, w.ptr, w.nbytes)
    O._check(call(handle, a.ptr, stream), name)


def _mla_prefill_cuda(q_nope, q_pe, kv_c, k_pe, w_kv_b, indices, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_host,
                      cu_seqlens_k_host, sm_scale, topk=0, force_path=-1, kv_cache=None, block_table=None):
    device = q_nope.device
    T, h = q_nope.shape[0], q_nope.shape[1]
    out = torch.empty((T, h, 128), dtype=_BF16, device=device)
    a = _args("mla", L.MlaPrefillArgs)
    _put(a, "q_nope", q_nope)
    _put(a, "q_pe", q_pe)
    if kv_c is not None:
        _put(a, "kv_c", kv_c)
    if k_pe is not None:
        _put(a, "k_pe", k_pe)
    if kv_cache is not None:  # paged latent cache [num_blocks, block_size, 576] + block_table [batch, max_blocks]
        _put(a, "kv_cache", kv_cache)
    if block_table is not None:
        _put(a, "block_table", block_table)
    _put(a, "w_kv_b", w_kv_b)
    _put(a, "indices", indices)
    _put(a, "cu_seqlens_q", cu_seqlens_q)
    _put(a, "cu_seqlens_k", cu_seqlens_k)
    _put_ptr(a, "cu_seqlens_q_host", _host(cu_seqlens_q_host))
    _put_ptr(a, "cu_seqlens_k_host", _host(cu_seqlens_k_host))
    _put(a, "out", out)
    a.struct.sm_scale = sm_scale
    if "topk" in a.offsets:
        a.struct.topk = topk
    a.struct.force_path = force_path
    handle, stream = _device_state(device)
    w = _workspace(device, stream)
    capturing = _capturing()
    lib = _c()
    _call_with_workspace(w, device, a, _MLA_WS_OFFSET, lib.mlajit_mla_prefill, lib.mlajit_mla_prefill_workspace_size, handle,
                         stream, "mlajit_mla_prefill", "mlajit_mla_prefill_workspace_size")
    if capturing:
        w.pinned = True
    return out


def _sparse_mqa_prefill_cuda(q, kv, indices, sm_scale, cu_seqlens_q=None, cu_seqlens_kv=None, cu_seqlens_q_host=None,
                             cu_seqlens_kv_host=None, block_table=None, causal=0):
    device = q.device
    s_q, h = q.shape[0], q.shape[1]
    out = torch.empty((s_q, h, 512), dtype=_BF16, device=device)
    lse = torch.empty((s_q, h), dtype=torch.float32, device=device)
    a = _args("mqa", L.SparseMqaArgs)
    _put(a, "q", q)
    _put(a, "kv", kv)
    _put(a, "indices", indices)
    _put(a, "out", out)
    _put(a, "lse", lse)
    batched = [x is not None for x in (cu_seqlens_q, cu_seqlens_kv, cu_seqlens_q_host, cu_seqlens_kv_host)]
    if any(batched):
        if not all(batched):
            raise ValueError("sparse_mqa_prefill: the batched form needs cu_seqlens_q, cu_seqlens_kv and both host "
                             "lists; pass all four or none")
        _put(a, "cu_seqlens_q", cu_seqlens_q)
        _put(a, "cu_seqlens_kv", cu_seqlens_kv)
        _put_ptr(a, "cu_seqlens_q_host", _host(cu_seqlens_q_host))
        _put_ptr(a, "cu_seqlens_kv_host", _host(cu_seqlens_kv_host))
    if block_table is not None:
        _put(a, "block_table", block_table)
    if causal:
        a.struct.causal = causal
    a.struct.sm_scale = sm_scale
    handle, stream = _device_state(device)
    lib = _c()
    size = L.optional_symbol("mlajit_sparse_mqa_workspace_size")
    if size is None:  # a library older than the workspace fields: they stay 0 (no pre-pass), which it accepts
        O._check(lib.mlajit_sparse_mqa_prefill(handle, a.ptr, stream), "mlajit_sparse_mqa_prefill")
        return out, lse
    # The key-set pre-pass's workspace (same results, faster), cached per (device, stream) as mla_prefill's. The query
    # checks the arguments as the op does: its error is the op's.
    w = _workspace(device, stream, _mqa_workspaces)
    _call_with_workspace(w, device, a, _MQA_WS_OFFSET, lib.mlajit_sparse_mqa_prefill, size, handle, stream,
                         "mlajit_sparse_mqa_prefill", "mlajit_sparse_mqa_prefill")
    if w.tensor is not None and _capturing():
        w.pinned = True
    return out, lse


def _mha_prefill_cuda(q, k_nope, k_pe, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_host, cu_seqlens_k_host, sm_scale,
                      mask=None):
    device = q.device
    T, h = q.shape[0], q.shape[1]
    out = torch.empty((T, h, 128), dtype=_BF16, device=device)
    lse = torch.empty((T, h), dtype=torch.float32, device=device)
    a = _args("mha", L.MhaArgs)
    _put(a, "q", q)
    if k_pe is None:
        _put(a, "k", k_nope)  # packed k [T_k, h, 192]
    else:
        _put(a, "k_nope", k_nope)
        _put(a, "k_pe", k_pe)
    _put(a, "v", v)
    _put(a, "out", out)
    _put(a, "lse", lse)
    _put(a, "cu_seqlens_q", cu_seqlens_q)
    _put(a, "cu_seqlens_k", cu_seqlens_k)
    _put_ptr(a, "cu_seqlens_q_host", _host(cu_seqlens_q_host))
    _put_ptr(a, "cu_seqlens_k_host", _host(cu_seqlens_k_host))
    if mask is not None:
        _put(a, "mask", mask, L.UINT32)
    a.struct.sm_scale = sm_scale
    handle, stream = _device_state(device)
    O._check(_c().mlajit_mha_prefill(handle, a.ptr, stream), "mlajit_mha_prefill")
    return out, lse


def _topk_mask_build_cuda(indices, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_host, cu_seqlens_k_host):
    device = indices.device
    max_k = max((cu_seqlens_k_host[i + 1] - cu_seqlens_k_host[i] for i in range(len(cu_seqlens_k_host) - 1)),
                default=0)
    mask = torch.empty((indices.shape[0], O.topk_mask_words(max_k)), dtype=torch.int32, device=device)
    a = _args("mask", L.TopkMaskArgs)
    _put(a, "indices", indices)
    _put(a, "cu_seqlens_q", cu_seqlens_q)
    _put(a, "cu_seqlens_k", cu_seqlens_k)
    _put_ptr(a, "cu_seqlens_q_host", _host(cu_seqlens_q_host))
    _put_ptr(a, "cu_seqlens_k_host", _host(cu_seqlens_k_host))
    _put(a, "mask", mask, L.UINT32)
    handle, stream = _device_state(device)
    O._check(_c().mlajit_topk_mask_build(handle, a.ptr, stream), "mlajit_topk_mask_build")
    return mask


@torch.library.register_fake(f"{_NS}::quantize_latent_cache")
def _quantize_latent_cache_fake(kv_c, k_pe, slot_mapping, kv_cache):
    return None


def _quantize_latent_cache_cuda(kv_c, k_pe, slot_mapping, kv_cache):
    a = _args("quant", L.QuantizeLatentCacheArgs)
    _put(a, "kv_c", kv_c)
    _put(a, "k_pe", k_pe)
    _put(a, "slot_mapping", slot_mapping)
    _put(a, "kv_cache", kv_cache)
    f = L.optional_symbol("mlajit_quantize_latent_cache")
    if f is None:
        raise O.MlajitError(L.UNSUPPORTED, "MLAJIT_ERROR_UNSUPPORTED",
                            f"{L.library_path()} has no mlajit_quantize_latent_cache: rebuild it from a newer source tree")
    handle, stream = _device_state(kv_c.device)
    O._check(f(handle, a.ptr, stream), "mlajit_quantize_latent_cache")


# Straight on the CUDA key: no autograd wrapper on the hot path (these are inference ops).
_lib_def.impl("mla_prefill", _mla_prefill_cuda, "CUDA")
_lib_def.impl("sparse_mqa_prefill", _sparse_mqa_prefill_cuda, "CUDA")
_lib_def.impl("mha_prefill", _mha_prefill_cuda, "CUDA")
_lib_def.impl("topk_mask_build", _topk_mask_build_cuda, "CUDA")
_lib_def.impl("quantize_latent_cache", _quantize_latent_cache_cuda, "CUDA")
