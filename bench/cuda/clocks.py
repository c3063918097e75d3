#!/usr/bin/env python3
"""The card's state while each cuda_moe_bench row was timed: SM clock and power from the nvidia-smi
samples tools/gpu-check.sh takes (smi.csv), over the interval between a row's end and the previous
row's end (bench.json's unix_s; nvidia-smi's timestamps are read as UTC: gpu-check runs it with
TZ=UTC). A row whose interval holds no sample (a short one, under the sampling period) says so; the
sample count shows how much each row's numbers rest on.

usage: clocks.py bench.json smi.csv [variant-prefix ...]   (default: cuda-graph-expert forced:cutlass)
"""
import csv
import datetime
import json
import statistics
import sys


def samples(path):
    out = []
    with open(path) as f:
        for row in csv.reader(f):
            if not row or row[0].strip() == "timestamp":
                continue
            try:
                t = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
                t = t.replace(tzinfo=datetime.timezone.utc).timestamp()
                sm = float(row[1].split()[0])
                power = float(row[3].split()[0])
            except (ValueError, IndexError):
                continue
            out.append((t, sm, power, row[5].strip() if len(row) > 5 else ""))
    return out


def main():
    bench = json.load(open(sys.argv[1]))
    smi = samples(sys.argv[2])
    prefixes = sys.argv[3:] or ["cuda-graph-expert", "forced:cutlass"]
    rows = bench["rows"]
    prev = None
    print("| shape | M | variant | ms | % roofline | samples | SM MHz (min-median-max) | W (median) | throttle reasons |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        start, end = prev, r.get("unix_s")
        prev = end
        if end is None or start is None or not any(r["variant"].startswith(p) for p in prefixes):
            continue
        win = [s for s in smi if start <= s[0] <= end]
        if not win:
            print(f"| {r['shape']} | {r['M']} | {r['variant']} | {r['ms']:.3f} | {r['pct_roofline']:.0f}% | 0 | "
                  "no sample in its interval | | |")
            continue
        mhz = [s[1] for s in win]
        watts = statistics.median(s[2] for s in win)
        reasons = sorted({s[3] for s in win})
        print(f"| {r['shape']} | {r['M']} | {r['variant']} | {r['ms']:.3f} | {r['pct_roofline']:.0f}% | {len(win)} | "
              f"{min(mhz):.0f}-{statistics.median(mhz):.0f}-{max(mhz):.0f} | {watts:.0f} | {' '.join(reasons)} |")


if __name__ == "__main__":
    main()
