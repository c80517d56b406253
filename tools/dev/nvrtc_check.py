#!/usr/bin/env python3
"""Kernel development aid: compile one kernels_src template with NVRTC (as the runtime does: no toolkit
headers, kernel files as in-memory headers) and print the log and ptxas resource usage. One difference:
--use_fast_math, as the nvcc kernel harnesses build, which the runtime does NOT pass (src/jit/compiler.cpp):
the attention kernels' SASS differs (FTZ forms, the epilogue's IEEE reciprocal). The runtime's exact
compile, timed: mlajit-nvrtc-time (tools/dev/nvrtc_time); its SASS: tools/dev/sass_snapshot.sh OUT BUILD_DIR.

  tools/dev/nvrtc_check.py mha/sm80.cuh --arch sm_90a -D MJ_BLOCK_M=128 -D MJ_BLOCK_N=64 ...

Each -D NAME=VALUE becomes `constexpr int NAME = VALUE;` ahead of `#include "<template>"`, which is how
the runtime specializes a kernel.
"""
import argparse, ctypes, glob, os, sys

here = os.path.dirname(os.path.abspath(__file__))
ksrc = os.path.join(here, "..", "..", "kernels_src")
ap = argparse.ArgumentParser()
ap.add_argument("template")
ap.add_argument("--arch", default="sm_90a")
ap.add_argument("-D", action="append", default=[])
ap.add_argument("--ptx", action="store_true", help="print the PTX too")
a = ap.parse_args()
nv = ctypes.CDLL(os.environ.get("NVRTC", "/usr/local/cuda/lib64/libnvrtc.so"))
files = sorted(glob.glob(os.path.join(ksrc, "**", "*.cuh"), recursive=True) + glob.glob(os.path.join(ksrc, "**", "*.h"), recursive=True))
names = [os.path.relpath(f, ksrc).encode() for f in files]  # "mha/sm80.cuh", as the runtime names them
bodies = [open(f, "rb").read() for f in files]
src = "".join(f"constexpr int {d.split('=')[0]} = {d.split('=')[1]};\n" for d in a.D)
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
if a.ptx and rc == 0:
    nv.nvrtcGetPTXSize(prog, ctypes.byref(n)); p = ctypes.create_string_buffer(n.value); nv.nvrtcGetPTX(prog, p)
    print(p.value.decode())
print("nvrtc rc", rc)
sys.exit(1 if rc else 0)
