#!/usr/bin/env python3
"""Markdown tables of a cpu_moe_bench JSON: time, % of roofline (and the peak its floor used; the read
bandwidth is the larger of the measured one and the fastest row's streaming rate, see read_bw), speedup vs
the oneDNN baseline when the run had one (and vs the previous kernels, MOERUN_CPU_KERNELS=v1, when the run
used --compare-v1); for a --stream-sweep run, the crossover sweep (rows: shape x M, columns: the
MOERUN_CPU_STREAM_MAX_TOKENS value n, cells: ms, the fastest in bold); for a --decode-ratios run, each
format's speedup over bf16 alternated call by call; for a --compare-env / --compare-amx1 /
--compare-down1 run, each alternative against the rule, timed call by call.

usage: table.py cpu.json [more.json ...]
"""
import json
import sys


def gf(v):
    return "absent" if v is None else f"{v:.0f} GFLOP/s"


def read_bw(d, threads):
    """The read bandwidth a row's floor uses: the larger of the bandwidth measured for its thread count and
    the highest weight-streaming rate any cpu or oneDNN row at that thread count reached in the same run
    (on a shared machine a short bandwidth probe can land in a busy moment; a kernel that streamed
    faster shows the machine could)."""
    lim = d["limits"]
    measured = lim["read_bandwidth_gbs"] if threads == d["threads"] else lim.get("read_bandwidth_gbs_1thread", 0)
    seen = [r["gbps"] for r in d["rows"] if r["threads"] == threads and (r["backend"] == "cpu" or r["backend"].startswith("onednn"))]
    return max([measured or 0] + seen), measured


def roofline_pct(d, r):
    bw, _ = read_bw(d, r["threads"])
    # (JSON from before rows named their peak: the FMA peak every row used then)
    peak = r.get("peak_gflops") or d["limits"]["fma_fp32_peak_gflops"]
    floor_ms = max(r["weight_bytes"] / (bw * 1e9), r["flops"] / (peak * 1e9)) * 1e3
    return 100.0 * floor_ms / r["time_ms"]


def limits_line(d):
    lim = d["limits"]
    bw, measured = read_bw(d, d["threads"])
    read = f"read {measured:.1f} GB/s"
    if bw > measured:
        read += f" measured, {bw:.1f} GB/s streamed by the fastest row (the floors use {bw:.1f})"
    s = (f"{d['cpu_model']} ({d['cpu_isa_used']}), {d['threads']} thread(s): {read}, "
         f"fp32 FMA peak AVX2 {lim['fma_fp32_peak_gflops']:.0f} GFLOP/s")
    if "avx512_fma_fp32_peak_gflops" in lim:  # older JSON has the AVX2 peak only
        s += (f", AVX-512 {gf(lim['avx512_fma_fp32_peak_gflops'])}, "
              f"AMX bf16 tile peak {gf(lim['amx_bf16_peak_gflops'])}")
    s += " (measured in the same run)"
    if d.get("onednn") is False:
        s += "; no oneDNN in this build: baseline column absent"
    if "commit" in d:  # (JSON before session 37 has neither)
        s += f"; commit {d['commit']}, started {d.get('started_utc', '?')}"
    return s + "\n"


def main_table(d):
    rows = d["rows"]
    key = lambda r: (r["shape"], r["format"], r["m"], r["threads"])
    base = {key(r): r for r in rows if r["backend"].startswith("onednn")}
    ref = {key(r): r for r in rows if r["backend"] == "reference"}
    v1 = {key(r): r for r in rows if r["backend"] == "cpu-v1"}  # --compare-v1
    cpu = [r for r in rows if r["backend"] == "cpu"]
    if not cpu:
        return
    has_base = bool(base)
    head = "| shape | format | M | threads | variant | cpu ms | GB/s | % of roofline | peak |"
    sep = "|---|---|---|---|---|---|---|---|---|"
    if has_base:
        head += " oneDNN ms | oneDNN % of roofline | vs oneDNN |"
        sep += "---|---|---|"
    head += " vs reference |"
    sep += "---|"
    if v1:
        head += " v1 ms | vs v1 |"
        sep += "---|---|"
    print(head)
    print(sep)
    seen = set()
    for r in cpu:
        k = key(r)
        again = k in seen  # a thread-scaling repeat (--threads 1): timed alone, not paired
        seen.add(k)
        line = (f"| {r['shape']} | {r['format']} | {r['m']} | {r['threads']} | {r.get('variant', '')} | {r['time_ms']:.2f} | "
                f"{r['gbps']:.1f} | {roofline_pct(d, r):.0f}% | {r.get('peak', 'fma')} |")
        if has_base:
            b = None if again else base.get(k)
            line += (f" {b['time_ms']:.2f} | {roofline_pct(d, b):.0f}% ({b.get('peak', 'fma')}) | {b['time_ms'] / r['time_ms']:.2f}x |"
                     if b else " – | – | – |")
        line += f" {ref[k]['time_ms'] / r['time_ms']:.0f}x |" if k in ref and not again else " – |"
        if v1:
            o = None if again else v1.get(k)
            line += f" {o['time_ms']:.2f} | {o['time_ms'] / r['time_ms']:.2f}x |" if o else " – | – |"
        print(line)
    print()


def sweep_table(d):
    rows = [r for r in d["rows"] if r["backend"] == "cpu-sweep"]
    if not rows:
        return
    ns = sorted({r["stream_max_tokens"] for r in rows})
    cells = {}
    for r in rows:
        cells.setdefault((r["shape"], r["m"], r["threads"]), {})[r["stream_max_tokens"]] = r
    print(f"Stream/tile crossover sweep (MOERUN_CPU_STREAM_MAX_TOKENS = n; ms, fastest in bold; "
          f"s = stream variant, t = tiles):\n")
    print("| shape | M | threads | tokens/expert | " + " | ".join(f"n={n}" for n in ns) + " |")
    print("|---|---|---|---|" + "---|" * len(ns))
    ignored = False
    for (shape, m, th), by_n in cells.items():
        best = min(r["time_ms"] for r in by_n.values())
        out = []
        for n in ns:
            r = by_n.get(n)
            if r is None:
                out.append("–")
                continue
            kind = "s" if "stream" in r.get("variant", "") else "t"
            c = f"{r['time_ms']:.2f} {kind}"
            out.append(f"**{c}**" if r["time_ms"] == best else c)
            ignored |= r.get("stream_env_honoured") is False
        tpe = next(iter(by_n.values())).get("tokens_per_expert", 0)
        print(f"| {shape} | {m} | {th} | {tpe:.1f} | " + " | ".join(out) + " |")
    if ignored:
        print("\nNote: some variants did not follow n: the backend of this run did not read MOERUN_CPU_STREAM_MAX_TOKENS.")
    print()


def ratio_table(d):
    """--decode-ratios rows: each format against bf16, alternated call by call."""
    rows = [r for r in d["rows"] if "speedup_vs_bf16" in r]
    if not rows:
        return
    print("Formats against bf16, one forward of each in turn (median over rounds of bf16's time / the format's):\n")
    print("| shape | format | M | threads | ms (median) | GB/s | faster than bf16 | 10th-90th percentile | rounds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['format']} | {r['m']} | {r['threads']} | {r['time_ms']:.3f} | {r['gbps']:.1f} | "
              f"{r['speedup_vs_bf16']:.2f}x | {r['speedup_vs_bf16_p10']:.2f}-{r['speedup_vs_bf16_p90']:.2f}x | {r['rounds']} |")
    print()


def alt_table(d):
    """--compare-env / --compare-amx1 / --compare-down1 rows: the alternative against the rule, alternated
    call by call in two halves (the alternative's runners created first, then second)."""
    keys = {"cpu-alt": "cpu_speedup_vs_alt", "cpu-amx1": "cpu_speedup_vs_amx1", "cpu-down1": "cpu_speedup_vs_down1"}
    rows = [r for r in d["rows"] if r["backend"] in keys and keys[r["backend"]] in r]
    if not rows:
        return
    key = lambda r: (r["shape"], r["format"], r["m"], r["threads"])
    rule = {}
    for r in d["rows"]:  # the first cpu row of a key is the one timed against the alternative (as main_table)
        if r["backend"] == "cpu":
            rule.setdefault(key(r), r)
    print("Alternatives against the rule, alternated call by call (the rule's speedup = the alternative's time / "
          "the rule's; above 1: the rule is faster; each half's, the alternative's runners created first / second; "
          "the overall ratio is of the medians of both halves' samples pooled, so it may fall outside the two):\n")
    print("| shape | format | M | threads | alternative | rule ms | alternative ms | rule's speedup | halves |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        c = rule.get(key(r))
        halves = (f"{r['speedup_alt_created_first']:.3f} / {r['speedup_alt_created_second']:.3f}"
                  if "speedup_alt_created_first" in r else "–")
        print(f"| {r['shape']} | {r['format']} | {r['m']} | {r['threads']} | {r['variant']} | "
              f"{c['time_ms']:.3f} | {r['time_ms']:.3f} | {r[keys[r['backend']]]:.3f}x | {halves} |" if c else
              f"| {r['shape']} | {r['format']} | {r['m']} | {r['threads']} | {r['variant']} | – | {r['time_ms']:.3f} | "
              f"{r[keys[r['backend']]]:.3f}x | {halves} |")
    print()


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) >= 2 else 2)
    for path in sys.argv[1:]:
        d = json.load(open(path))
        if len(sys.argv) > 2:
            print(f"### {path}\n")
        print(limits_line(d))
        main_table(d)
        sweep_table(d)
        ratio_table(d)
        alt_table(d)


if __name__ == "__main__":
    main()
