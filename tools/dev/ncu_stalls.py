#!/usr/bin/env python3
"""Where a kernel's warps wait, from an Nsight Compute source page exported as CSV (tools/dev/mqa/run_t37.sh writes them:
`ncu -i REPORT --page source --csv --print-source cuda` per CUDA source line, `--print-source sass` per instruction).

Prints the rows with the most warp-stall samples (all samples, and the not-issued ones where the page has them), each with
its share of the kernel's samples and its source text, then the totals. Columns are found by name, so both views work.

  ncu_stalls.py PAGE.csv [--top N] [--grep TEXT]      (--grep: only rows whose source text contains TEXT)
"""
import argparse
import csv
import re
import sys


def number(text):
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return 0.0


def read_rows(path):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    # ncu may print notes before the table: start at the first line that looks like the header.
    start = next((i for i, l in enumerate(lines) if "Warp Stall Sampling" in l), None)
    if start is None:
        sys.exit(f"{path}: no 'Warp Stall Sampling' column (was the report taken with --section SourceCounters?)")
    return list(csv.DictReader(lines[start:]))


def column(header, pattern):
    for h in header:
        if re.search(pattern, h):
            return h
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--grep", default=None)
    a = ap.parse_args()
    rows = read_rows(a.csv)
    if not rows:
        sys.exit(f"{a.csv}: the table is empty")
    header = list(rows[0].keys())
    all_col = column(header, r"Warp Stall Sampling \(All")
    idle_col = column(header, r"Warp Stall Sampling \(Not[- ]issued")
    src_col = column(header, r"^Source$") or column(header, r"Source")
    where_col = column(header, r"^(# )?Line|^(# )?Address")
    total = sum(number(r[all_col]) for r in rows) or 1.0
    total_idle = sum(number(r[idle_col]) for r in rows) if idle_col else 0.0
    picked = [r for r in rows if a.grep is None or a.grep in (r.get(src_col) or "")]
    picked.sort(key=lambda r: number(r[all_col]), reverse=True)
    print(f"{a.csv}: {len(rows)} rows, {total:.0f} stall samples" + (f", {total_idle:.0f} not issued" if idle_col else ""))
    for r in picked[: a.top]:
        s = number(r[all_col])
        idle = f" {number(r[idle_col]):8.0f} idle" if idle_col else ""
        where = (r.get(where_col) or "").strip() if where_col else ""
        print(f"{s:8.0f} {100 * s / total:5.1f}%{idle}  {where:>8}  {(r.get(src_col) or '').strip()[:110]}")


if __name__ == "__main__":
    main()
