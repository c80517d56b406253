#!/usr/bin/env python3
"""The loops of a PTX file (each backward branch to a label above it) with their instruction counts, for comparing what two
compilers made of one source (MLAJIT_DUMP_DIR writes NVRTC's PTX; `nvcc -ptx` of the dumped .cu gives nvcc's).

  ptx_loops.py FILE.ptx [--match OPCODE] [--mix]
--match: only loops containing OPCODE (a prefix, e.g. cp.async.cg, wgmma.mma_async); --mix: each loop's opcode counts too.

Why: session 34 found the 16-head sparse MQA kernel 8 % slower on NVRTC's cubin than on nvcc's of the same source, the whole
difference in the PTX (ptxas rebuilds both cubins byte for byte). The producer's gather loop was 182 PTX instructions through
NVRTC against nvcc's 133: NVRTC keeps shared pointers 64 bits wide, so each cp.async destination came from a 64-bit pointer
(add.s64, cvt.u32.u64 per copy). `cvt.u32.u64` inside a copy loop is the sign of it.
"""
import collections
import re
import sys


def loops(lines):
    labels = {}
    for i, line in enumerate(lines):
        m = re.match(r"^(\$L__BB\d+_\d+):", line)
        if m:
            labels[m.group(1)] = i
    for i, line in enumerate(lines):
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            yield labels[m.group(1)], i


def opcodes(body):
    for line in body:
        t = line.strip()
        if not t or t.startswith((".loc", "//", "$L", "{", "}", ".pragma")):
            continue
        if t.startswith("@"):  # predicated: the opcode follows the guard
            t = t.split(None, 1)[1] if " " in t else t
        yield t.split()[0].rstrip(";")


def main() -> int:
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__)
        return 2
    match = args[args.index("--match") + 1] if "--match" in args else None
    lines = open(args[0]).read().splitlines()
    for a, b in loops(lines):
        ops = list(opcodes(lines[a:b + 1]))
        if match and not any(o.startswith(match) for o in ops):
            continue
        print(f"lines {a + 1}-{b + 1}: {len(ops)} instructions")
        if "--mix" in args:
            mix = collections.Counter(ops).most_common(12)
            print("   " + ", ".join(f"{o} {n}" for o, n in mix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
