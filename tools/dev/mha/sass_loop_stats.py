#!/usr/bin/env python3
"""Instruction mix of a kernel's main loop, from nvdisasm text (`nvdisasm -c kernel.cubin > k.sass`).

  tools/dev/mha/sass_loop_stats.py k.sass [more.sass ...] [--min-hgmma 20]

The main loop is taken as the smallest backward-branch region holding at least --min-hgmma HGMMA
instructions (20 = one key tile of the Hopper MHA kernel: 12 for Q K^T and 8 for P V; v4's loop bodies
hold two tiles, 40). Prints the loop's instruction count and the most frequent opcodes: a cheap, offline
proxy for issue slots per tile (on 2026-12-03 the masked / dense ratio of this count, 1014 / 671 for v3,
matched ncu's issued-instruction ratio of an earlier call, 1.55x).
"""
import collections, re, sys

def parse(fn):
    items = []
    for line in open(fn):
        lab = re.match(r'^\s*(\.L_x_\d+):', line)
        if lab:
            items.append(('L', lab.group(1), None))
            continue
        m = re.search(r'/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)(.*)', line)
        if m:
            t = re.search(r'`\((\.L_x_\d+)\)', m.group(4))
            items.append(('I', m.group(3), t.group(1) if t else None))
    return items

args = sys.argv[1:]
min_gm = 20
if '--min-hgmma' in args:
    i = args.index('--min-hgmma'); min_gm = int(args[i + 1]); del args[i:i + 2]
for fn in args:
    items = parse(fn)
    labels = {it[1]: i for i, it in enumerate(items) if it[0] == 'L'}
    best = None
    for i, it in enumerate(items):
        if it[0] == 'I' and it[1] == 'BRA' and it[2] in labels and labels[it[2]] < i:
            body = [x[1] for x in items[labels[it[2]]:i] if x[0] == 'I']
            if sum(op.startswith('HGMMA') for op in body) >= min_gm and (best is None or len(body) < len(best)):
                best = body
    if best is None:
        print(f"{fn}: no loop with >= {min_gm} HGMMA")
        continue
    mix = collections.Counter(op.split('.')[0] for op in best)
    print(f"{fn}: loop {len(best)} instructions, HGMMA {mix['HGMMA']}")
    print('   ', ', '.join(f"{k} {v}" for k, v in mix.most_common(20)))
