#!/usr/bin/env python3
"""Swap a kernel cache's NVRTC cubins for nvcc-built ones of the same specialized source (development A/B, not a product
path: the runtime always compiles with NVRTC).

Why: the same kernel source gives different PTX through NVRTC and through nvcc (NVRTC addresses shared memory through
64-bit generic-derived registers where nvcc uses 32-bit shared addresses, and unrolls some epilogue loops differently), and
the 16-head sparse MQA kernel ran 0.28 ms slower through the library than in the nvcc-built harness (H200, session 33).
With this, the library itself runs the nvcc code: same cache key, same launch, same inputs.

  nvcc_cubins.py DUMP_DIR CACHE_DIR [FAMILY ...]
DUMP_DIR: what MLAJIT_DUMP_DIR wrote while CACHE_DIR was filled (the specialized .cu files); CACHE_DIR: the MLAJIT_CACHE_DIR
root. Every entry whose source_key matches a dumped .cu (of the named families, default all) gets nvcc's cubin, its size and
xxh3-128 checksum in meta.json, and "built_by": "nvcc" (meta.json's other fields unchanged).
"""
import ctypes
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The sources the dumped .cu files include: MLAJIT_KERNELS_DIR where the cache was filled from another kernels directory
# (as the library reads it), else this tree's.
KERNELS = pathlib.Path(os.environ.get("MLAJIT_KERNELS_DIR") or ROOT / "kernels_src").resolve()


class XXH128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


_xxh = ctypes.CDLL("libxxhash.so.0")
_xxh.XXH3_128bits.restype = XXH128
_xxh.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3_128_hex(data: bytes) -> str:
    h = _xxh.XXH3_128bits(data, len(data))
    return f"{h.high64:016x}{h.low64:016x}"  # CacheKey::hex(): hi first


def nvcc_cubin(cu: pathlib.Path, arch: str, out: pathlib.Path) -> None:
    # nvcc looks for a quoted include beside the including file first, so sparse_mqa/*.cuh's "sm90.cuh" would be
    # sparse_mqa/sm90.cuh: include kernels_src/sm90.cuh first, as the harness builds do (its guard skips the later include).
    src = cu.read_text()
    wrap = out.with_suffix(".cu")
    lines = src.splitlines()
    last_include = max(i for i, l in enumerate(lines) if l.startswith("#include"))
    lines.insert(last_include, f'#include "{KERNELS / "sm90.cuh"}"')
    wrap.write_text("\n".join(lines) + "\n")
    subprocess.run(["nvcc", "-std=c++17", "-lineinfo", f"-arch={arch}", "-cubin", "-I", str(KERNELS), "-Xptxas", "-v",
                    str(wrap), "-o", str(out)], check=True, capture_output=True)


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    dump, cache = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    families = set(sys.argv[3:])
    dumped = {p.stem.rsplit("_", 1)[1]: p for p in dump.glob("*.cu")}  # first 16 hex digits of the source key -> file
    work = cache / ".nvcc_build"
    work.mkdir(exist_ok=True)
    swapped = 0
    for meta_path in sorted(cache.glob("v*/*/*/*/meta.json")):
        meta = json.loads(meta_path.read_text())
        if families and meta["family"] not in families:
            continue
        cu = dumped.get(meta["source_key"][:16])
        if cu is None or meta.get("built_by") == "nvcc":
            continue
        cubin = work / f"{meta['key']}.cubin"
        nvcc_cubin(cu, meta["arch"], cubin)
        data = cubin.read_bytes()
        (meta_path.parent / "kernel.cubin").write_bytes(data)
        meta.update(cubin_bytes=len(data), cubin_xxh3_128=xxh3_128_hex(data), built_by="nvcc")
        meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        print(f"nvcc: {meta['spec']}")
        swapped += 1
    print(f"{swapped} cubins swapped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
