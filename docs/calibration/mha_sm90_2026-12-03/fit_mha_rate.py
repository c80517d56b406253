# Masked MHA attention kernel (Hopper tier v3, shipped), H200 2026-12-03, harness median of 15, mask build excluded.
# FLOPs: 2*h*causal_pairs*(192+128). Fit t = o + F/R minimising sum ((fit - t)/t)^2 (closed form: linear LS in (o, 1/R)
# with weights 1/t^2).
pts = [(128, 8192, 5.507), (16, 8192, 0.701), (16, 16384, 2.441)]
dense = [(128, 8192, 3.830), (16, 8192, 0.517), (16, 16384, 1.821)]
def fit(pts):
    rows = [(1.0 / t, (2 * h * S * S / 2 * 320) / 1e9 / t, 1.0) for h, S, t in pts]  # o/t + F*x/t = 1, x = 1/R (ms per GFLOP)
    a11 = sum(r[0] * r[0] for r in rows); a12 = sum(r[0] * r[1] for r in rows); a22 = sum(r[1] * r[1] for r in rows)
    b1 = sum(r[0] for r in rows); b2 = sum(r[1] for r in rows)
    det = a11 * a22 - a12 * a12
    o = (b1 * a22 - b2 * a12) / det; x = (a11 * b2 - a12 * b1) / det
    R = 1 / x / 1e3  # TFLOP/s  (GFLOP per ms = TFLOP/s)
    print(f"  fit: {1/x:.1f} TFLOP/s + {o*1e3:.1f} us")
    for h, S, t in pts:
        F = 2 * h * S * S / 2 * 320
        p = o + F / 1e9 * x
        print(f"    h={h} S={S}: measured {t:.3f} ms ({F/t/1e9:.1f} TF/s), fit {p:.3f} ms ({100*(p-t)/t:+.1f} %)")
    return o, 1 / x
print("masked"); fit(pts)
print("dense"); fit(dense)
