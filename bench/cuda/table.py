#!/usr/bin/env python3
"""Markdown table of a cuda_moe_bench JSON: % of roofline and speedup vs torch per shape and M.

usage: table.py bench.json [variant ...]   (default variants: cuda-graph-expert cuda-eager-full cublas-full)

Rows that carry pct_roofline_local (cuda-graph-expert at M >= 1024: the matmul rate measured alternated
with the row's own runs, at the clocks the card had then) get a second table against that rate.
"""
import json
import sys


def table(title, rows, cell):
    """A markdown table of rows (shape by M), each cell cell(row), after a bold title line."""
    ms = sorted({r["M"] for r in rows})
    print(f"{title}\n")
    print("| shape | " + " | ".join(f"M={m}" for m in ms) + " |")
    print("|---|" + "---|" * len(ms))
    for shape in dict.fromkeys(r["shape"] for r in rows):
        cells = []
        for m in ms:
            r = next((r for r in rows if r["shape"] == shape and r["M"] == m), None)
            cells.append("" if r is None else cell(r))
        print(f"| {shape} | " + " | ".join(cells) + " |")
    print()


def torch_cell(r):
    """The speedup over torch, or a dash where torch has no row (null; 0 in JSON before session 43)."""
    v = r.get("speedup_vs_torch")
    return f"{v:.2f}x" if v else "- (no torch row)"


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) >= 2 else 2)
    d = json.load(open(sys.argv[1]))
    variants = sys.argv[2:] or ["cuda-graph-expert", "cuda-eager-full", "cublas-full"]
    known = sorted({r["variant"] for r in d["rows"]})
    unknown = [v for v in sys.argv[2:] if v not in known]
    if unknown:  # a named variant with no rows is a typo, not an empty table
        sys.exit(f"table.py: no rows of variant {', '.join(unknown)} in {sys.argv[1]} (it has: {', '.join(known)})")
    print(f"{d['device']}: copy {d['copy_bw_TBps']:.2f} TB/s, bf16 matmul {d['matmul_TFLOPs']:.0f} TFLOP/s (measured in the same run)\n")
    if "matmul_sustained_TFLOPs" in d:
        end = (f"{d['matmul_sustained_TFLOPs_end']:.0f} after the sweep (10-call median then: "
               f"{d['matmul_TFLOPs_end']:.0f})" if "matmul_sustained_TFLOPs_end" in d
               else "none after the sweep (the run was cut short: its rows end where it stopped)")
        print(f"matmul over ~1 s back to back: {d['matmul_sustained_TFLOPs']:.0f} TFLOP/s at the start, {end}\n")
    for v in variants:
        rows = [r for r in d["rows"] if r["variant"] == v]
        if not rows:
            continue
        table(f"**{v}** — time, % of roofline, speedup vs torch pipeline", rows,
              lambda r: f"{r['ms']:.3f} ms, {r['pct_roofline']:.0f}%, " + torch_cell(r))
        local = [r for r in rows if "pct_roofline_local" in r]
        if local:
            table(f"**{v}**, against the matmul rate alternated with the row — time, matmul TFLOP/s then, "
                  "% of that roofline", local,
                  lambda r: f"{r['ms']:.3f} ms, {r['local_matmul_TFLOPs']:.0f}, {r['pct_roofline_local']:.0f}%")


if __name__ == "__main__":
    main()
