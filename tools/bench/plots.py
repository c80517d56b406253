"""Figures for the benchmark: matplotlib when it is installed, else a hand-written PNG (zlib + struct: a
colored grid, no text) and an SVG with the numbers. Nothing here needs a GPU."""
import math
import struct
import zlib

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    HAVE_MPL = True
except Exception:  # pragma: no cover - depends on the machine
    plt = None
    HAVE_MPL = False


def _diverging(v, lo=0.25, hi=4.0):
    """RGB for a ratio: red below 1 (MQA faster), white at 1, blue above (masked MHA faster), log scale."""
    if v is None or not math.isfinite(v) or v <= 0:
        return (200, 200, 200)
    t = max(-1.0, min(1.0, math.log(v) / math.log(hi if v >= 1 else 1 / lo)))
    if t >= 0:
        return (int(255 * (1 - t)), int(255 * (1 - 0.6 * t)), 255)
    t = -t
    return (255, int(255 * (1 - 0.7 * t)), int(255 * (1 - t)))


def write_png(path, pixels):
    """pixels: list of rows, each a list of (r, g, b). 8-bit RGB PNG, no filtering."""
    h, w = len(pixels), len(pixels[0])
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def _label(n):
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def heatmaps(path_png, path_svg, grids, title):
    """grids: list of (panel title, s_q list, s_k list, {(s_q, s_k): ratio}). Ratio > 1: masked MHA faster."""
    # SVG with numbers, always (small, readable anywhere).
    cell, pad = 46, 60
    panels = []
    x0 = 10
    height = 0
    for name, sqs, sks, vals in grids:
        w = pad + cell * len(sks) + 20
        h = 40 + cell * len(sqs) + 50
        g = [f'<g transform="translate({x0},30)"><text x="{pad}" y="-8" font-size="13">{name}</text>']
        for i, sq in enumerate(sqs):
            g.append(f'<text x="{pad - 6}" y="{i * cell + cell / 2 + 4}" font-size="11" text-anchor="end">{_label(sq)}</text>')
            for j, sk in enumerate(sks):
                v = vals.get((sq, sk))
                r, gg, b = _diverging(v)
                g.append(f'<rect x="{pad + j * cell}" y="{i * cell}" width="{cell - 1}" height="{cell - 1}" '
                         f'fill="rgb({r},{gg},{b})"/>')
                if v is not None:
                    g.append(f'<text x="{pad + j * cell + cell / 2}" y="{i * cell + cell / 2 + 4}" font-size="11" '
                             f'text-anchor="middle">{v:.2f}</text>')
        for j, sk in enumerate(sks):
            g.append(f'<text x="{pad + j * cell + cell / 2}" y="{len(sqs) * cell + 14}" font-size="11" '
                     f'text-anchor="middle">{_label(sk)}</text>')
        g.append(f'<text x="{pad}" y="{len(sqs) * cell + 32}" font-size="11">s_k (rows: s_q)</text></g>')
        panels.append("".join(g))
        x0 += w
        height = max(height, h)
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{x0 + 10}" height="{height + 40}" font-family="sans-serif">'
           f'<text x="10" y="18" font-size="14">{title}</text>' + "".join(panels) + "</svg>")
    with open(path_svg, "w") as f:
        f.write(svg)
    if HAVE_MPL:
        fig, axes = plt.subplots(1, len(grids), figsize=(4.2 * len(grids), 4.2), squeeze=False)
        for ax, (name, sqs, sks, vals) in zip(axes[0], grids):
            img = [[_diverging(vals.get((sq, sk))) for sk in sks] for sq in sqs]
            ax.imshow([[tuple(c / 255 for c in px) for px in row] for row in img], aspect="auto")
            for i, sq in enumerate(sqs):
                for j, sk in enumerate(sks):
                    v = vals.get((sq, sk))
                    if v is not None:
                        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8)
            ax.set_xticks(range(len(sks)), [_label(s) for s in sks])
            ax.set_yticks(range(len(sqs)), [_label(s) for s in sqs])
            ax.set_xlabel("s_k")
            ax.set_ylabel("s_q")
            ax.set_title(name, fontsize=10)
        fig.suptitle(title, fontsize=11)
        fig.tight_layout()
        fig.savefig(path_png, dpi=110)
        plt.close(fig)
    else:
        # Text-free fallback: panels side by side, 24 px cells, grey gaps.
        c = 24
        rows_n = max(len(sqs) for _, sqs, _, _ in grids)
        width = sum(len(sks) * c + c for _, _, sks, _ in grids)
        px = [[(255, 255, 255)] * width for _ in range(rows_n * c)]
        x = 0
        for _, sqs, sks, vals in grids:
            for i, sq in enumerate(sqs):
                for j, sk in enumerate(sks):
                    col = _diverging(vals.get((sq, sk)))
                    for yy in range(i * c, i * c + c - 2):
                        for xx in range(x + j * c, x + j * c + c - 2):
                            px[yy][xx] = col
            x += len(sks) * c + c
        write_png(path_png, px)


_HEAD_COLORS = {128: "#1f77b4", 64: "#2ca02c", 32: "#ff7f0e", 16: "#d62728"}


def _color(name, k):
    for h, c in _HEAD_COLORS.items():
        if f"h={h}" in name:
            return c
    return ["#9467bd", "#8c564b", "#e377c2", "#7f7f7f"][k % 4]


def _is_anchor(name):
    return not name.startswith("mlajit")


def curves(path_png, path_svg, panels, title, xlabel="S (tokens)", ylabel="TFLOP/s"):
    """panels: list of (panel title, [(label, [(x, y)])]); one color per head count (h=N in the label),
    solid lines for mlajit, dashed for anchors; log2 x axis. PNG with matplotlib, else SVG."""
    panels = [(t, [(n, sorted(p)) for n, p in ser if p]) for t, ser in panels]
    panels = [(t, ser) for t, ser in panels if ser]
    if not panels:
        return None
    if HAVE_MPL:
        fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.6), squeeze=False)
        for ax, (pt, series) in zip(axes[0], panels):
            for k, (name, pts) in enumerate(series):
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name, color=_color(name, k),
                        linestyle="--" if _is_anchor(name) else "-", markersize=4)
            ax.set_xscale("log", base=2)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.set_title(pt, fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=7, ncol=2)
        fig.suptitle(title, fontsize=11)
        fig.tight_layout()
        fig.savefig(path_png, dpi=110)
        plt.close(fig)
        return path_png
    W, H, L, B = 620, 420, 60, 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W * len(panels)}" height="{H + 20}" '
           f'font-family="sans-serif"><text x="10" y="16" font-size="13">{title}</text>']
    for pi, (pt, series) in enumerate(panels):
        x0 = pi * W
        xs = [p[0] for _, pts in series for p in pts]
        ys = [p[1] for _, pts in series for p in pts]
        lx0, lx1 = math.log2(min(xs)), math.log2(max(xs)) + 1e-9
        y1 = max(ys) * 1.1 or 1
        out.append(f'<text x="{x0 + L}" y="36" font-size="12">{pt}</text>')
        for k, (name, pts) in enumerate(series):
            col = _color(name, k)
            pp = " ".join(f"{x0 + L + (math.log2(x) - lx0) / max(lx1 - lx0, 1e-9) * (W - L - 170):.1f},"
                          f"{H - B - y / y1 * (H - B - 50):.1f}" for x, y in pts)
            dash = ' stroke-dasharray="6,4"' if _is_anchor(name) else ""
            out.append(f'<polyline fill="none" stroke="{col}" stroke-width="2"{dash} points="{pp}"/>')
            out.append(f'<text x="{x0 + W - 165}" y="{56 + 14 * k}" font-size="10" fill="{col}">{name}</text>')
        out.append(f'<text x="{x0 + L}" y="{H - 8}" font-size="11">{xlabel}: {int(min(xs))} .. {int(max(xs))} '
                   f'(log2); {ylabel}: 0 .. {y1:.0f}</text>')
    out.append("</svg>")
    with open(path_svg, "w") as f:
        f.write("".join(out))
    return path_svg
