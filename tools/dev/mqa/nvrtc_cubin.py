#!/usr/bin/env python3
"""Compile kernels_src/sparse_mqa/sm80.cuh with NVRTC exactly as tools/dev/nvrtc_check.py does and write the
cubin, for reading its SASS (cuobjdump -sass). Usage: nvrtc_cubin.py OUT.cubin --arch sm_90a -D NAME=V ...
With --use_fast_math like the harnesses, unlike the runtime (see tools/dev/nvrtc_check.py)."""
import argparse, ctypes, glob, os, sys

here = os.path.dirname(os.path.abspath(__file__))
ksrc = os.path.join(here, "..", "..", "..", "kernels_src")
ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--arch", default="sm_90a")
ap.add_argument("--template", default="sparse_mqa/sm80.cuh")
ap.add_argument("-D", action="append", default=[])
ap.add_argument("--macro", action="append", default=[], help="NAME=V as #define (dev overrides)")
a = ap.parse_args()
nv = ctypes.CDLL(os.environ.get("NVRTC", "/usr/local/cuda/lib64/libnvrtc.so"))
files = sorted(glob.glob(os.path.join(ksrc, "**", "*.cuh"), recursive=True) + glob.glob(os.path.join(ksrc, "**", "*.h"), recursive=True))
names = [os.path.relpath(f, ksrc).encode() for f in files]
bodies = [open(f, "rb").read() for f in files]
src = "".join(f"#define {m.split('=')[0]} {m.split('=')[1]}\n" for m in a.macro)
src += "".join(f"constexpr int {d.split('=')[0]} = {d.split('=')[1]};\n" for d in a.D)
src += f'#include "{a.template}"\n'
prog = ctypes.c_void_p()
hn = (ctypes.c_char_p * len(names))(*names)
hb = (ctypes.c_char_p * len(bodies))(*bodies)
assert nv.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"spec.cu", len(names), hb, hn) == 0
opts = [f"--gpu-architecture={a.arch}", "-std=c++17", "-default-device", "--use_fast_math", "-lineinfo",
        "--ptxas-options=-v"]
o = (ctypes.c_char_p * len(opts))(*[x.encode() for x in opts])
rc = nv.nvrtcCompileProgram(prog, len(opts), o)
n = ctypes.c_size_t()
nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
log = ctypes.create_string_buffer(n.value)
nv.nvrtcGetProgramLog(prog, log)
print(log.value.decode())
if rc:
    sys.exit(1)
nv.nvrtcGetCUBINSize(prog, ctypes.byref(n))
buf = ctypes.create_string_buffer(n.value)
nv.nvrtcGetCUBIN(prog, buf)
open(a.out, "wb").write(buf.raw)
