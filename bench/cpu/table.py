#!/usr/bin/env python3
"""Markdown table of a cpu_moe_bench JSON: time, % of roofline and speedup vs the oneDNN baseline (and vs
the previous kernels, MOERUN_CPU_KERNELS=v1, when the run used --compare-v1).

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
    v1 = {(r["shape"], r["format"], r["m"]): r for r in rows if r["backend"] == "cpu-v1"}  # --compare-v1
    print("| shape | format | M | variant | cpu ms | GB/s | % of roofline | vs oneDNN | vs reference |" + (" v1 ms | vs v1 |" if v1 else ""))
    print("|---|---|---|---|---|---|---|---|---|" + ("---|---|" if v1 else ""))
    seen = set()
    for r in rows:
        if r["backend"] != "cpu":
            continue
        k = (r["shape"], r["format"], r["m"])
        again = k in seen  # the thread-scaling repeats: timed alone, not paired with a v1 row
        seen.add(k)
        b = f"{base[k]['time_ms'] / r['time_ms']:.2f}x" if k in base else "–"
        f = f"{ref[k]['time_ms'] / r['time_ms']:.0f}x" if k in ref else "–"
        line = (f"| {r['shape']} | {r['format']} | {r['m']} | {r.get('variant', '')} | {r['time_ms']:.2f} | {r['gbps']:.1f} | "
                f"{r['roofline_pct']:.0f}% | {b} | {f} |")
        if v1:
            o = v1.get(k)
            same_threads = o is not None and o["threads"] == r["threads"] and not again
            line += f" {o['time_ms']:.2f} | {o['time_ms'] / r['time_ms']:.2f}x |" if same_threads else " – | – |"
        print(line)


if __name__ == "__main__":
    main()
