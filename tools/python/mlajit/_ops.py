"""PyTorch-facing functions over the C API (see include/mlajit/mlajit.h for the semantics).

torch is imported on first use, so `import mlajit` and `mlajit.plan_prefill` work without it.
"""
import collections
import ctypes
import threading

from . import _lib as L


class MlajitError(RuntimeError):
    """A call into libmlajit failed. `.status` is the mlajit_status code, `.status_name` its name and
    `.message` the library's explanation (what was wrong and what to do)."""

    def __init__(self, status, status_name, message, call=""):
        self.status = int(status)
        self.status_name = status_name
        self.message = message
        self.call = call
        where = f"{call}: " if call else ""
        super().__init__(f"{where}{status_name}: {message}")


def _check(status, call):
    if status != L.OK:
        lib = L.lib()
        name = lib.mlajit_status_name(status).decode()
        msg = (lib.mlajit_last_error() or b"").decode(errors="replace")
        raise MlajitError(status, name, msg, call)


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("mlajit's tensor functions need PyTorch (pip install torch)") from e
    return torch


# ---- handles, streams, workspaces (one per CUDA device) ------------------------------------------------

_state_lock = threading.Lock()
_handles = {}        # device index -> ctypes.c_void_p
_workspaces = {}     # (device index, stream handle) -> torch.uint8 tensor
_seqlen_cache = collections.OrderedDict()  # (device index, tuple) -> int32 CUDA tensor
_SEQLEN_CACHE_MAX = 64


_handle_provider = None  # set by torch_ops when the C++ ops are loaded: their handle of a device (int -> address)


def _handle(device):
    """The mlajit handle of a CUDA device, created on first use under that device's (PyTorch's) context."""
    idx = device.index
    h = _handles.get(idx)
    if h is not None:
        return h
    torch = _torch()
    with _state_lock:
        h = _handles.get(idx)
        if h is not None:
            return h
        if _handle_provider is not None:  # the C++ torch ops' handle (same primary context): share it
            torch.empty(1, device=device)  # PyTorch's context of the device exists
            address = _handle_provider(idx)
            if address:  # else: create one here, which raises the library's own error if that fails too
                h = _handles[idx] = ctypes.c_void_p(address)
                return h
        with torch.cuda.device(idx):
            # Make PyTorch's primary context current on this thread: mlajit_create(-1) binds the current one.
            torch.empty(1, device=device)
            torch.cuda.synchronize(device)
            h = ctypes.c_void_p()
            _check(L.lib().mlajit_create(-1, ctypes.byref(h)), "mlajit_create")
        _handles[idx] = h
        return h


def _stream(device):
    return ctypes.c_void_p(_torch().cuda.current_stream(device).cuda_stream)


def arch(device=None):
    """The target arch mlajit compiles for on `device` (default: the current CUDA device), e.g. 'sm_90a'."""
    torch = _torch()
    dev = torch.device("cuda", torch.cuda.current_device() if device is None else torch.device(device).index)
    return L.lib().mlajit_handle_arch(_handle(dev)).decode()


def version():
    """The library's version string."""
    return L.lib().mlajit_version().decode()


# ---- tensor descriptors ----------------------------------------------------------------------------------

_DTYPE_CODES = None
_I64x4 = ctypes.c_int64 * 4


def _dtype_codes(torch):
    global _DTYPE_CODES
    if _DTYPE_CODES is None:
        m = {torch.bfloat16: L.BF16, torch.float32: L.FP32, torch.int32: L.INT32}
        if hasattr(torch, "uint32"):
            m[torch.uint32] = L.UINT32
        _DTYPE_CODES = m
    return _DTYPE_CODES


def _device_of(*tensors):
    torch = _torch()
    for t in tensors:
        if isinstance(t, torch.Tensor):
            if t.device.type != "cuda":
                raise ValueError(f"expected CUDA tensors, got one on {t.device}: move the inputs with .cuda()")
            return t.device if t.device.index is not None else torch.device("cuda", torch.cuda.current_device())
    raise ValueError("no tensor argument given")


def _desc(t, name, dtypes, device, ndim=None, code=None):
    """mlajit_tensor for a torch tensor; None gives an absent (NULL) descriptor. Kept cheap (a few us):
    it runs for every tensor of every call."""
    if t is None:
        return L.Tensor()
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        want = " or ".join(str(x) for x in dtypes)
        raise ValueError(f"{name}: expected dtype {want}, got {t.dtype}")
    if not t.is_cuda:
        raise ValueError(f"{name}: expected a CUDA tensor, got one on {t.device}: move it with .cuda()")
    if t.get_device() != device.index:
        raise ValueError(f"{name}: is on {t.device} but the other tensors are on {device}: put all on one device")
    shape = t.shape
    n = len(shape)
    if ndim is not None and n != ndim and not (isinstance(ndim, tuple) and n in ndim):
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(shape)}")
    if n > 4 or n < 1:
        raise ValueError(f"{name}: mlajit tensors have 1 to 4 dimensions, got shape {tuple(shape)}")
    stride = list(t.stride())
    if shape[-1] > 1 and stride[-1] != 1:
        raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), got strides {tuple(stride)} "
                         f"for shape {tuple(shape)}: pass {name}.contiguous()")
    # Strides of size-1 dims never address memory; keep the last one well-formed (1).
    if shape[-1] == 1:
        stride[-1] = 1
    return L.Tensor(t.data_ptr() if t.numel() else None,
                    code if code is not None else _dtype_codes(torch)[t.dtype], n, _I64x4(*shape), _I64x4(*stride))


def _seqlens(x, name, device):
    """(mlajit_tensor of the device int32 copy, host ctypes array, host list, keep-alive) from a tensor or
    a list of ints. For lists and CPU tensors the device copy and both descriptors are cached per device."""
    torch = _torch()
    if x is None:
        raise ValueError(f"{name} is required")
    if isinstance(x, torch.Tensor):
        if x.dim() != 1:
            raise ValueError(f"{name}: expected a 1-D tensor [batch + 1], got shape {tuple(x.shape)}")
        if x.is_cuda:
            if x.dtype != torch.int32:
                raise ValueError(f"{name}: expected dtype torch.int32, got {x.dtype}")
            if x.get_device() != device.index:
                raise ValueError(f"{name}: is on {x.device}, the other tensors on {device}")
            host = [int(v) for v in x.cpu().tolist()]  # synchronizes; pass a list to avoid it
            dev = x if x.stride(0) == 1 else x.contiguous()
            arr = (ctypes.c_int32 * len(host))(*host)
            return _desc(dev, name, (torch.int32,), device, 1), arr, host, dev
        host = tuple(int(v) for v in x.tolist())
    else:
        try:
            host = tuple(int(v) for v in x)
        except TypeError:
            raise TypeError(f"{name}: expected a tensor or a sequence of ints, got {type(x).__name__}") from None
    key = (device.index, host)
    with _state_lock:
        hit = _seqlen_cache.get(key)
        if hit is not None:
            _seqlen_cache.move_to_end(key)
            return hit
    dev = torch.tensor(host, dtype=torch.int32, device=device)
    arr = (ctypes.c_int32 * len(host))(*host)
    hit = (_desc(dev, name, (torch.int32,), device, 1), arr, list(host), dev)
    with _state_lock:
        _seqlen_cache[key] = hit
        while len(_seqlen_cache) > _SEQLEN_CACHE_MAX:
            _seqlen_cache.popitem(last=False)
    return hit


def _check_out(t, name, shape, dtype, device):
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(t.shape)}")
    if t.dtype != dtype:
        raise ValueError(f"{name}: expected dtype {dtype}, got {t.dtype}")
    if t.device.type != "cuda" or t.device.index != device.index:
        raise ValueError(f"{name}: expected a tensor on {device}, got one on {t.device}")


def _int32p(arr):
    return ctypes.cast(arr, ctypes.POINTER(ctypes.c_int32))


# ---- ops -------------------------------------------------------------------------------------------------

def sparse_mqa_prefill(q, kv, indices, sm_scale, *, cu_seqlens_q=None, cu_seqlens_kv=None, out=None, lse=None,
                       return_max_logits=False):
    """Sparse MQA prefill (FlashMLA sparse-prefill semantics): every query attends to its top-k latent rows.

    Args:
        q: bf16 [s_q, h, 576] (h in 1..128), the absorbed queries [q_nope . W_UK ; q_pe].
        kv: bf16 [s_kv, 576] (also [s_kv, 1, 576]), the latent cache [kv_c ; k_pe]; kv[:, :512] is V.
        indices: int32 [s_q, topk] (also [s_q, 1, topk]), key positions per query; -1 or out of range is
            skipped; any width from 1 up. With cu_seqlens they are local to each request.
        sm_scale: softmax scale of the logits q . k.
        cu_seqlens_q, cu_seqlens_kv: optional batched form, [batch + 1] int32 tensors or lists of ints
            (both or neither). A CUDA tensor is copied to the host (a synchronization); a list is not.
        out: optional bf16 [s_q, h, 512] output; lse: optional fp32 [s_q, h] output (natural log).
        return_max_logits: also return max_logits fp32 [s_q, h] (max of the scaled logits per row).

    Returns:
        (out, lse) or (out, lse, max_logits). A query with no valid index gets out 0 and lse -inf.

    The call allocates the op's workspace (mlajit_sparse_mqa_workspace_size bytes, 4 per token and index
    position) from torch's caching allocator, so the key-set pre-pass runs: the same results, faster.

    Raises:
        ValueError / TypeError for a wrong dtype, device, layout or shape found here; MlajitError for any
        argument the library rejects (the message says what and how to fix it).
    """
    torch = _torch()
    device = _device_of(q, kv, indices)
    if isinstance(kv, torch.Tensor) and kv.dim() == 3 and kv.size(1) == 1:
        kv = kv[:, 0, :]
    if isinstance(indices, torch.Tensor) and indices.dim() == 3 and indices.size(1) == 1:
        indices = indices[:, 0, :]
    a = L.SparseMqaArgs()
    a.q = _desc(q, "q", (torch.bfloat16,), device, 3)
    a.kv = _desc(kv, "kv", (torch.bfloat16,), device, 2)
    a.indices = _desc(indices, "indices", (torch.int32,), device, 2)
    s_q, h = q.size(0), q.size(1)
    if out is None:
        out = torch.empty((s_q, h, 512), dtype=torch.bfloat16, device=device)
    else:
        _check_out(out, "out", (s_q, h, 512), torch.bfloat16, device)
    if lse is None:
        lse = torch.empty((s_q, h), dtype=torch.float32, device=device)
    else:
        _check_out(lse, "lse", (s_q, h), torch.float32, device)
    max_logits = torch.empty((s_q, h), dtype=torch.float32, device=device) if return_max_logits else None
    a.out = _desc(out, "out", (torch.bfloat16,), device, 3)
    a.lse = _desc(lse, "lse", (torch.float32,), device, 2)
    a.max_logits = _desc(max_logits, "max_logits", (torch.float32,), device, 2)
    keep = []
    if (cu_seqlens_q is None) != (cu_seqlens_kv is None):
        raise ValueError("pass both cu_seqlens_q and cu_seqlens_kv (batched form) or neither (one sequence)")
    if cu_seqlens_q is not None:
        dq, hq, _, _keep_dq = _seqlens(cu_seqlens_q, "cu_seqlens_q", device)
        dk, hk, _, _keep_dk = _seqlens(cu_seqlens_kv, "cu_seqlens_kv", device)
        keep += [_keep_dq, _keep_dk, hq, hk]
        a.cu_seqlens_q = dq
        a.cu_seqlens_kv = dk
        a.cu_seqlens_q_host = _int32p(hq)
        a.cu_seqlens_kv_host = _int32p(hk)
    a.sm_scale = float(sm_scale)
    handle = _handle(device)
    stream = _stream(device)
    ws = None  # the workspace tensor, alive across the call
    f_ws = L.optional_symbol("mlajit_sparse_mqa_workspace_size")
    if f_ws is not None:  # else a library older than the workspace fields: they stay 0 (no pre-pass), as it wants
        # The key-set pre-pass's scratch (same results, faster): a caching-allocator tensor on this stream, freed on
        # return (stream-ordered reuse; under CUDA graph capture the graph's pool keeps it for the replays).
        # The query checks the arguments as the op does: its error is the op's.
        need = ctypes.c_size_t(0)
        _check(f_ws(handle, ctypes.byref(a), ctypes.byref(need)), "mlajit_sparse_mqa_prefill")
        if need.value > 0:
            ws = torch.empty(need.value, dtype=torch.uint8, device=device)
            a.workspace = ws.data_ptr()
            a.workspace_bytes = need.value
    _check(L.lib().mlajit_sparse_mqa_prefill(handle, ctypes.byref(a), stream), "mlajit_sparse_mqa_prefill")
    return (out, lse, max_logits) if return_max_logits else (out, lse)


def mha_prefill(q, k_nope, k_pe, v, cu_seqlens_q, cu_seqlens_k, sm_scale, *, mask=None, out=None, lse=None):
    """Varlen causal MHA prefill (dense, or masked by a top-k bitmask), bottom-right causal alignment:
    the s_q queries of a request are the last s_q of its s_k keys.

    Args:
        q: bf16 [T_q, h, 192] ([q_nope ; q_pe]).
        k_nope: bf16 [T_k, h, 128], with k_pe bf16 [T_k, 64] (or [T_k, 1, 64] / [T_k, h, 64]) shared by
            all heads; or a packed k bf16 [T_k, h, 192] with k_pe=None.
        v: bf16 [T_k, h, 128].
        cu_seqlens_q, cu_seqlens_k: [batch + 1] int32 tensors or lists of ints (host copies are needed; a
            CUDA tensor is copied back, which synchronizes).
        sm_scale: softmax scale.
        mask: optional top-k bitmask [T_q, >= words] (int32 or uint32) from topk_mask_build: a key is
            attended iff causal and its bit is set.
        out: optional bf16 [T_q, h, 128]; lse: optional fp32 [T_q, h].

    Returns:
        (out, lse). A row with nothing attended gets out 0 and lse -inf.
    """
    torch = _torch()
    device = _device_of(q, k_nope, v)
    a = L.MhaArgs()
    a.q = _desc(q, "q", (torch.bfloat16,), device, 3)
    if k_pe is None:
        a.k = _desc(k_nope, "k", (torch.bfloat16,), device, 3)
    else:
        a.k_nope = _desc(k_nope, "k_nope", (torch.bfloat16,), device, 3)
        a.k_pe = _desc(k_pe, "k_pe", (torch.bfloat16,), device, (2, 3))
    a.v = _desc(v, "v", (torch.bfloat16,), device, 3)
    T_q, h = q.size(0), q.size(1)
    if out is None:
        out = torch.empty((T_q, h, 128), dtype=torch.bfloat16, device=device)
    else:
        _check_out(out, "out", (T_q, h, 128), torch.bfloat16, device)
    if lse is None:
        lse = torch.empty((T_q, h), dtype=torch.float32, device=device)
    else:
        _check_out(lse, "lse", (T_q, h), torch.float32, device)
    a.out = _desc(out, "out", (torch.bfloat16,), device, 3)
    a.lse = _desc(lse, "lse", (torch.float32,), device, 2)
    dq, hq, _, _keep_dq = _seqlens(cu_seqlens_q, "cu_seqlens_q", device)
    dk, hk, _, _keep_dk = _seqlens(cu_seqlens_k, "cu_seqlens_k", device)
    a.cu_seqlens_q = dq
    a.cu_seqlens_k = dk
    a.cu_seqlens_q_host = _int32p(hq)
    a.cu_seqlens_k_host = _int32p(hk)
    mask_types = tuple(t for t in (torch.int32, getattr(torch, "uint32", None)) if t is not None)
    a.mask = _desc(mask, "mask", mask_types, device, 2, code=L.UINT32)
    a.sm_scale = float(sm_scale)
    _check(L.lib().mlajit_mha_prefill(_handle(device), ctypes.byref(a), _stream(device)), "mlajit_mha_prefill")
    return out, lse


def topk_mask_words(max_seqlen_k):
    """Words (uint32) per mask row for a batch whose longest request has max_seqlen_k keys."""
    return int(L.lib().mlajit_topk_mask_words(int(max_seqlen_k)))


def topk_mask_build(indices, cu_seqlens_q, cu_seqlens_k, *, out=None):
    """Packed top-k bitmask from DSA indices, built on the GPU.

    Args:
        indices: int32 [T_q, topk], request-local key positions (-1 / out of range set nothing).
        cu_seqlens_q, cu_seqlens_k: [batch + 1] int32 tensors or lists of ints.
        out: optional int32 (or uint32) [T_q, >= topk_mask_words(max s_k)].

    Returns:
        int32 [T_q, words] tensor holding uint32 bit patterns: bit j of word w is key 32w + j of the row's
        request (read it as `(mask[q, k >> 5] >> (k & 31)) & 1`).
    """
    torch = _torch()
    device = _device_of(indices)
    a = L.TopkMaskArgs()
    a.indices = _desc(indices, "indices", (torch.int32,), device, 2)
    dq, hq, _, _keep_dq = _seqlens(cu_seqlens_q, "cu_seqlens_q", device)
    dk, hk, host_k, _keep_dk = _seqlens(cu_seqlens_k, "cu_seqlens_k", device)
    max_k = max((host_k[i + 1] - host_k[i] for i in range(len(host_k) - 1)), default=0)
    words = topk_mask_words(max_k)
    if out is None:
        out = torch.empty((indices.size(0), words), dtype=torch.int32, device=device)
    mask_types = tuple(t for t in (torch.int32, getattr(torch, "uint32", None)) if t is not None)
    a.mask = _desc(out, "out", mask_types, device, 2, code=L.UINT32)
    a.cu_seqlens_q = dq
    a.cu_seqlens_k = dk
    a.cu_seqlens_q_host = _int32p(hq)
    a.cu_seqlens_k_host = _int32p(hk)
    _check(L.lib().mlajit_topk_mask_build(_handle(device), ctypes.byref(a), _stream(device)),
           "mlajit_topk_mask_build")
    return out


PrefillPlan = collections.namedtuple("PrefillPlan", ["paths", "mha_ms", "mqa_ms"])
PrefillPlan.__doc__ = ("Per request: the path name ('dense_mha', 'masked_mha', 'sparse_mqa') and the predicted "
                       "ms of the MHA path and of the sparse MQA path (projections included).")


def plan_prefill(heads, topk, s_q_list, s_k_list, gpu_name=None):
    """The planner's path per request (no GPU or torch needed).

    Args:
        heads: local query heads (128 / TP degree); topk: DSA top-k (2048 for DeepSeek-V3.2).
        s_q_list, s_k_list: per request, new tokens and all keys (cached context included).
        gpu_name: picks the calibration table measured on that GPU (e.g. torch.cuda.get_device_name());
            None uses the cost model unless MLAJIT_PLAN_TABLE names a table.

    Returns:
        PrefillPlan(paths, mha_ms, mqa_ms), lists with one entry per request.
    """
    s_q = [int(x) for x in s_q_list]
    s_k = [int(x) for x in s_k_list]
    if len(s_q) != len(s_k):
        raise ValueError(f"s_q_list and s_k_list must have one entry per request, got {len(s_q)} and {len(s_k)}")
    n = len(s_q)
    sq = (ctypes.c_int64 * max(n, 1))(*s_q)
    sk = (ctypes.c_int64 * max(n, 1))(*s_k)
    paths = (ctypes.c_int * max(n, 1))()
    mha = (ctypes.c_double * max(n, 1))()
    mqa = (ctypes.c_double * max(n, 1))()
    name = gpu_name.encode() if gpu_name else None
    _check(L.lib().mlajit_plan_prefill(name, int(heads), int(topk), n, sq, sk, paths, mha, mqa), "mlajit_plan_prefill")
    return PrefillPlan([L.PATHS[paths[i]] for i in range(n)], [mha[i] for i in range(n)], [mqa[i] for i in range(n)])


def has_mla_prefill():
    """Whether the loaded library has the one-call mlajit_mla_prefill (and its workspace query)."""
    return (L.optional_symbol("mlajit_mla_prefill") is not None
            and L.optional_symbol("mlajit_mla_prefill_workspace_size") is not None)


def _force_path_id(force_path):
    if force_path is None or force_path == "auto":
        return -1
    if isinstance(force_path, str):
        if force_path not in L.PATH_IDS:
            raise ValueError(f"force_path: expected None, 'auto' or one of {L.PATHS}, got {force_path!r}")
        return L.PATH_IDS[force_path]
    if int(force_path) not in (-1, 0, 1, 2):
        raise ValueError(f"force_path: expected -1, 0, 1 or 2, got {force_path}")
    return int(force_path)


def quantize_latent_cache(kv_c, k_pe, slot_mapping, kv_cache):
    """Writes bf16 latent rows into the FP8 latent cache (fp8_ds_mla), in place.

    Args:
        kv_c: bf16 [T, 512]; k_pe: bf16 [T, 64] (views of one [T, 576] tensor are fine).
        slot_mapping: int32 [T]: token t goes to row slot % block_size of page slot // block_size; a negative
            slot skips the token.
        kv_cache: torch.uint8 [num_blocks, block_size, 656]: per token 512 e4m3 values, 4 fp32 scales (one per
            128 values, amax / 448), 64 bf16 k_pe. Other rows are left as they are.

    Returns:
        kv_cache.
    """
    torch = _torch()
    f = L.optional_symbol("mlajit_quantize_latent_cache")
    if f is None:
        raise MlajitError(L.UNSUPPORTED, "MLAJIT_ERROR_UNSUPPORTED",
                          f"this libmlajit.so ({L.library_path()}) has no mlajit_quantize_latent_cache: rebuild it",
                          "quantize_latent_cache")
    device = _device_of(kv_c, k_pe, slot_mapping, kv_cache)
    a = L.QuantizeLatentCacheArgs()
    bf = (torch.bfloat16,)
    a.kv_c = _desc(kv_c, "kv_c", bf, device, 2)
    a.k_pe = _desc(k_pe, "k_pe", bf, device, 2)
    a.slot_mapping = _desc(slot_mapping, "slot_mapping", (torch.int32,), device, 1)
    a.kv_cache = _desc(kv_cache, "kv_cache", (torch.uint8,), device, 3, code=L.UINT8)
    _check(f(_handle(device), ctypes.byref(a), _stream(device)), "mlajit_quantize_latent_cache")
    return kv_cache


def mla_prefill(q_nope, q_pe, kv_c, k_pe, w_kv_b, indices, cu_seqlens_q, cu_seqlens_k, sm_scale, *, out=None,
                lse=None, force_path=None, workspace=None, return_paths=False, topk=0, kv_cache=None,
                block_table=None):
    """One-call DSA (MLA with sparse attention) prefill: plans each request, runs it on its path.

    Args:
        q_nope: bf16 [T_q, h, 128]; q_pe: bf16 [T_q, h, 64] (views of one [T_q, h, 192] tensor cost nothing).
        kv_c: bf16 [T_k, 512]; k_pe: bf16 [T_k, 64] (views of one [T_k, 576] latent cache cost nothing).
        w_kv_b: bf16 [h * 256, 512], DeepSeek's kv_b_proj.weight (per head 128 rows W_UK, then 128 W_UV).
        indices: int32 [T_q, width], request-local key positions, -1 = none; any width (rows padded with -1);
            a key listed twice in a row is attended once.
        cu_seqlens_q, cu_seqlens_k: [batch + 1] int32 tensors or lists of ints.
        sm_scale: softmax scale.
        out: optional bf16 [T_q, h, 128]; lse: optional fp32 [T_q, h] (filled when given).
        force_path: None / 'auto' (the planner decides), or 'dense_mha' / 'masked_mha' / 'sparse_mqa' for
            every request (dense only where s_k <= topk for all).
        workspace: optional torch.uint8 CUDA tensor; by default one is cached per device and stream and
            grown as needed.
        return_paths: also return the path name each request took.
        topk: the MODEL's top-k (2048 for DeepSeek-V3.2); 0 = the indices width. Dense MHA is used only for
            requests with s_k <= topk (exact there).
        kv_cache, block_table: the paged latent cache instead of kv_c / k_pe (pass those as None): bf16
            [num_blocks, block_size, 576], or the FP8 cache torch.uint8 [num_blocks, block_size, 656]
            (quantize_latent_cache writes it); block_table int32 [batch, max_blocks].

    Returns:
        out, or (out, paths) with return_paths=True.
    """
    torch = _torch()
    f_ws = L.optional_symbol("mlajit_mla_prefill_workspace_size")
    f_run = L.optional_symbol("mlajit_mla_prefill")
    if f_ws is None or f_run is None:
        raise MlajitError(L.UNSUPPORTED, "MLAJIT_ERROR_UNSUPPORTED",
                          f"this libmlajit.so ({L.library_path()}) has no mlajit_mla_prefill: rebuild the library "
                          "from a source tree that implements it", "mla_prefill")
    device = _device_of(q_nope, q_pe, w_kv_b, indices)
    a = L.MlaPrefillArgs()
    bf = (torch.bfloat16,)
    a.q_nope = _desc(q_nope, "q_nope", bf, device, 3)
    a.q_pe = _desc(q_pe, "q_pe", bf, device, 3)
    a.kv_c = _desc(kv_c, "kv_c", bf, device, 2)
    a.k_pe = _desc(k_pe, "k_pe", bf, device, 2)
    if kv_cache is not None:
        fp8 = kv_cache.dtype == torch.uint8
        a.kv_cache = _desc(kv_cache, "kv_cache", (torch.uint8, torch.bfloat16), device, 3,
                           code=L.UINT8 if fp8 else L.BF16)
        a.block_table = _desc(block_table, "block_table", (torch.int32,), device, 2)
    a.w_kv_b = _desc(w_kv_b, "w_kv_b", bf, device, 2)
    a.indices = _desc(indices, "indices", (torch.int32,), device, 2)
    dq, hq, host_q, _keep_dq = _seqlens(cu_seqlens_q, "cu_seqlens_q", device)
    dk, hk, _, _keep_dk = _seqlens(cu_seqlens_k, "cu_seqlens_k", device)
    a.cu_seqlens_q = dq
    a.cu_seqlens_k = dk
    a.cu_seqlens_q_host = _int32p(hq)
    a.cu_seqlens_k_host = _int32p(hk)
    T_q, h = q_nope.size(0), q_nope.size(1)
    if out is None:
        out = torch.empty((T_q, h, 128), dtype=torch.bfloat16, device=device)
    else:
        _check_out(out, "out", (T_q, h, 128), torch.bfloat16, device)
    if lse is not None:
        _check_out(lse, "lse", (T_q, h), torch.float32, device)
    a.out = _desc(out, "out", bf, device, 3)
    a.lse = _desc(lse, "lse", (torch.float32,), device, 2)
    a.sm_scale = float(sm_scale)
    a.force_path = _force_path_id(force_path)
    a.topk = int(topk)
    batch = max(len(host_q) - 1, 0)
    paths = (ctypes.c_int * max(batch, 1))()
    a.paths_out = ctypes.cast(paths, ctypes.POINTER(ctypes.c_int))
    handle = _handle(device)
    need = ctypes.c_size_t(0)
    _check(f_ws(handle, ctypes.byref(a), ctypes.byref(need)), "mlajit_mla_prefill_workspace_size")
    stream = _stream(device)
    if workspace is not None:
        if not isinstance(workspace, torch.Tensor) or workspace.dtype != torch.uint8 or workspace.device != device:
            raise ValueError(f"workspace: expected a torch.uint8 tensor on {device}")
        if workspace.numel() < need.value:
            raise ValueError(f"workspace: needs {need.value} bytes for these arguments, got {workspace.numel()}")
        ws = workspace
    else:
        key = (device.index, stream.value)
        ws = _workspaces.get(key)
        if ws is None or ws.numel() < need.value:
            grow = max((need.value + (1 << 20) - 1) >> 20, 1) << 20  # whole MiB
            _workspaces.pop(key, None)  # the old one goes back to PyTorch's pool of this stream
            ws = None
            ws = torch.empty(grow, dtype=torch.uint8, device=device)
            _workspaces[key] = ws
    if ws.data_ptr() % 256:
        raise ValueError("workspace: must be 256-byte aligned (slice it at a multiple of 256)")
    a.workspace = ws.data_ptr()
    a.workspace_bytes = ws.numel()
    _check(f_run(handle, ctypes.byref(a), stream), "mlajit_mla_prefill")
    if return_paths:
        return out, [L.PATHS[paths[i]] for i in range(batch)]
    return out
