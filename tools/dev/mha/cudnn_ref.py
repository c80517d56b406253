# Side-by-side anchor in the same session: cuDNN SDPA (PyTorch) dense causal, d_qk 192, d_v 128, batch 1,
# at the harness's perf shapes. usage: python3 cudnn_ref.py [h:S ...]
import sys
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
torch.manual_seed(0)
shapes = [tuple(int(x) for x in a.split(":")) for a in sys.argv[1:]] or [(128, 4096), (128, 8192), (16, 16384)]
for h, S in shapes:
    q = torch.randn(1, h, S, 192, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, h, S, 192, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, h, S, 128, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
            for _ in range(3): f()
            torch.cuda.synchronize()
            ts = []
            for _ in range(15):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); f(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
        ms = sorted(ts)[len(ts) // 2]
        fl = 2 * h * S * S * 320 / 2
        print(f"cudnn dense causal h={h} S={S}: {ms:.3f} ms  {fl / ms / 1e9:.1f} TFLOP/s")
    except Exception as e:
        print("cudnn failed:", e)
    del q, k, v
