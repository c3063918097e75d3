#!/usr/bin/env python3
"""Markdown table of a cpu_moe_bench JSON: time, % of roofline and speedup vs the oneDNN baseline.

usage: table.py cpu.json
"""
import json
import sys


def main():
    d = json.load(open(sys.argv[1]))
    lim = d["limits"]
    print(f"{d['cpu_model']} ({d['cpu_isa_used']}), {d['threads']} thread(s): read {lim['read_bandwidth_gbs']:.1f} GB/s, "
          f"fp32 FMA peak {lim['fma_fp32_peak_gflops']:.0f} GFLOP/s (measured in the same run)\n")
    rows = d["rows"]
    base = {(r["shape"], r["format"], r["m"]): r for r in rows if r["backend"].startswith("onednn")}
    ref = {(r["shape"], r["format"], r["m"]): r for r in rows if r["backend"] == "reference"}
    print("| shape | format | M | cpu ms | GB/s | % of roofline | vs oneDNN | vs reference |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["backend"] != "cpu":
            continue
        k = (r["shape"], r["format"], r["m"])
        b = f"{base[k]['time_ms'] / r['time_ms']:.2f}x" if k in base else "–"
        f = f"{ref[k]['time_ms'] / r['time_ms']:.0f}x" if k in ref else "–"
        print(f"| {r['shape']} | {r['format']} | {r['m']} | {r['time_ms']:.2f} | {r['gbps']:.1f} | {r['roofline_pct']:.0f}% | {b} | {f} |")


if __name__ == "__main__":
    main()
