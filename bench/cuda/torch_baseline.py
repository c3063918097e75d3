#!/usr/bin/env python3
"""The torch baseline for cuda_moe_bench: the MoE expert stage written the usual way in PyTorch.

sort by expert, gather, torch._grouped_mm (gate_up), silu-and-mul, torch._grouped_mm (down),
router-weighted scatter-add; the rows per expert counted two ways (torch.bincount, which syncs with the
host, and a scatter_add that does not), each timed, and the no-sync form also captured in a CUDA graph
and replayed (as moerun's rows are); the fastest of the three kept. Uniform random routing: the top-k
of router logits drawn as cuda_moe_bench draws them (SplitMix64 from seed 1234 + M, uniform in
[-1, 1), core/random.hpp), so that both time the same experts; bf16 weights drawn uniformly in
+-1/sqrt(K). Before timing a shape, the pipeline is checked against a dense per-expert loop in f32. Median of CUDA-event intervals, each after an L2 flush: a 512 MiB zero_()
(what torch and Triton benchmarks do; it leaves the L2 full of dirty lines) and, for M <= --read-flush-max-m,
also a 512 MiB read (clean lines only), as cuda_moe_bench's '-readflush' rows.
Usage: torch_baseline.py [--json out.json] [--quick] [--ms 1024,8192] [--shapes deepseek-v3,...]
                         [--read-flush-max-m 16]
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F

COUNTINGS = ("bincount", "scatter")
SHAPES = [("deepseek-v3", 256, 8, 7168, 2048), ("mixtral-8x7b", 8, 2, 4096, 14336),
          ("qwen3-30b-a3b", 128, 8, 2048, 768), ("gpt-oss-120b-silu", 128, 4, 2880, 2880)]


def moe_expert_stage(x, ids, w, w13, w2, counting="bincount"):
    m, h = x.shape
    k = ids.shape[1]
    e = w13.shape[0]
    inter = w2.shape[2]
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    tok = order // k
    if counting == "bincount":  # what users write; on CUDA it reads the ids' max back to the host (a sync)
        counts = torch.bincount(flat, minlength=e)
    else:  # "scatter": the same counts with no host sync
        counts = torch.zeros(e, dtype=torch.int64, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
    offs = torch.cumsum(counts, 0).to(torch.int32)
    xs = x.index_select(0, tok)
    gu = torch._grouped_mm(xs, w13.transpose(-2, -1), offs=offs)
    a = F.silu(gu[:, :inter]) * gu[:, inter:]
    y = torch._grouped_mm(a, w2.transpose(-2, -1), offs=offs)
    y = y.float() * w.reshape(-1)[order].unsqueeze(1)
    out = torch.zeros(m, h, dtype=torch.float32, device=x.device)
    out.index_add_(0, tok, y)
    return out.to(x.dtype)


GOLDEN, MIX1, MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
MASK64 = (1 << 64) - 1


def router_logits(m, e, seed):
    """[m, e] float32 logits, the stream of moerun's SplitMix64(seed).uniform_pm1() (core/random.hpp)."""
    n = m * e
    try:
        import numpy as np
        with np.errstate(over="ignore"):
            z = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(GOLDEN)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
            z = z ^ (z >> np.uint64(31))
        top = (z >> np.uint64(40)).astype(np.float32)
        vals = torch.from_numpy(top * np.float32(2.0 / 16777216.0) - np.float32(1.0))
    except Exception:  # no numpy, or one torch cannot take (slower, the same numbers)  # noqa: BLE001
        out = []
        s = seed
        for _ in range(n):
            s = (s + GOLDEN) & MASK64
            z = ((s ^ (s >> 30)) * MIX1) & MASK64
            z = ((z ^ (z >> 27)) * MIX2) & MASK64
            out.append(float((z ^ (z >> 31)) >> 40))
        vals = torch.tensor(out, dtype=torch.float32) * (2.0 / 16777216.0) - 1.0
    return vals.reshape(m, e)


def check_pipeline(e, k, h, w13, w2, dev):
    """Both countings against a dense per-expert loop in f32 on a few tokens: the pipeline computes the
    MoE, so that moerun is timed against the same computation. Raises on a mismatch."""
    m, inter = 5, w2.shape[2]
    g = torch.Generator(device=dev)
    g.manual_seed(5)
    x = torch.randn(m, h, device=dev, dtype=torch.bfloat16, generator=g)
    w, ids = torch.topk(torch.softmax(router_logits(m, e, 77).to(dev), -1), k, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    want = torch.zeros(m, h, dtype=torch.float32, device=dev)
    for t in range(m):
        for j in range(k):
            ex = int(ids[t, j])
            gu = x[t].float() @ w13[ex].float().T
            a = F.silu(gu[:inter]) * gu[inter:]
            want[t] += w[t, j] * (a @ w2[ex].float().T)
    for c in COUNTINGS:
        got = moe_expert_stage(x, ids, w, w13, w2, c).float()
        rel = float((got - want).norm() / want.norm())
        if not rel < 2e-2:
            raise RuntimeError(f"torch pipeline ({c}) differs from the dense loop: relative L2 {rel:.3g}")


def captured(fn):
    """A CUDA graph of fn (the no-sync pipeline: every shape and offset stays on the device), or None
    where this torch cannot capture it (the row then keeps the eager timings alone)."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        g.replay()
        torch.cuda.synchronize()
        return g
    except Exception as ex:  # noqa: BLE001 - report and time eagerly
        print(f"torch: no CUDA graph of the pipeline ({ex}); eager timings only", flush=True)
        return None


def median_ms(fn, reps, flush, read_flush=False):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    flush_words = flush.view(torch.int32)
    times = []
    for _ in range(reps):
        if read_flush:
            flush_words.sum()
        else:
            flush.zero_()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    h = len(times) // 2
    return times[h] if len(times) % 2 else (times[h - 1] + times[h]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ms", default="", help="comma-separated token counts, e.g. 1024,8192")
    ap.add_argument("--shapes", default="", help="comma-separated shape names")
    ap.add_argument("--read-flush-max-m", type=int, default=16,
                    help="also time rows up to this M after a read-only L2 flush")
    args = ap.parse_args()
    ms_list = [1, 128] if args.quick else [1, 16, 128, 1024, 8192]
    if args.ms:
        try:
            ms_list = [int(v) for v in args.ms.split(",")]
        except ValueError:
            ap.error(f"--ms {args.ms}: expected comma-separated whole numbers")
        if any(v < 1 for v in ms_list):
            ap.error(f"--ms {args.ms}: token counts start at 1")
    wanted = [s for s in args.shapes.split(",") if s] if args.shapes else []
    unknown = [s for s in wanted if s not in {d[0] for d in SHAPES}]
    if unknown:
        ap.error(f"--shapes: unknown {', '.join(unknown)} (known: {', '.join(d[0] for d in SHAPES)})")
    shapes = [s for s in SHAPES if not wanted or s[0] in wanted]
    dev = torch.device("cuda")
    flush = torch.empty(512 << 20, dtype=torch.uint8, device=dev)
    rows = []

    def write_json():  # after every shape: a run cut short by a timeout still leaves the rows it finished
        if args.json:  # (written beside and renamed: a timeout mid-write leaves the previous version)
            with open(args.json + ".part", "w") as f:
                json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
            os.replace(args.json + ".part", args.json)

    for name, e, k, h, i in shapes:
        g = torch.Generator(device=dev)
        g.manual_seed(11)
        w13 = (torch.rand(e, 2 * i, h, device=dev, generator=g, dtype=torch.bfloat16) * 2 - 1) / h ** 0.5
        w2 = (torch.rand(e, h, i, device=dev, generator=g, dtype=torch.bfloat16) * 2 - 1) / i ** 0.5
        check_pipeline(e, k, h, w13, w2, dev)
        for m in ms_list:
            x = torch.randn(m, h, device=dev, dtype=torch.bfloat16, generator=g)
            logits = router_logits(m, e, 1234 + m).to(dev)
            w, ids = torch.topk(torch.softmax(logits, -1), k, dim=-1)  # (int64 ids, as index ops take them)
            w = w / w.sum(-1, keepdim=True)
            distinct = int(torch.unique(ids).numel())
            try:
                # Two ways to count the rows per expert, each timed; the row keeps the faster ("ms"), so
                # that moerun is compared with the better of them. The no-sync count won 25 of 28 rows
                # in one run (session 42, H100), but in an earlier run its memset-flush one-token rows
                # were the slower: launch-bound rows move with the host.
                fns = {c: (lambda c=c: moe_expert_stage(x, ids, w, w13, w2, c)) for c in COUNTINGS}
                for fn in fns.values():
                    fn()
                graph = captured(lambda: moe_expert_stage(x, ids, w, w13, w2, "scatter"))
                if graph is not None:  # moerun's rows are graph replays: so is this one
                    fns["scatter-graph"] = graph.replay
                flushes = ["write"] + (["read"] if m <= args.read_flush_max_m else [])
                for fl in flushes:
                    by = {c: median_ms(fn, 10 if m >= 1024 else 30, flush, read_flush=fl == "read") for c, fn in fns.items()}
                    best = min(by, key=by.get)
                    row = {"shape": name, "M": m, "ms": by[best], "counting": best, "flush": fl,
                           "distinct_experts": distinct}
                    row.update({f"ms_{c}": v for c, v in by.items()})
                    rows.append(row)
                    each = ", ".join(f"{c} {v:.4f}" for c, v in by.items())
                    print(f"torch {name:18s} M={m:5d} {by[best]:9.4f} ms ({each}{', read flush' if fl == 'read' else ''})",
                          flush=True)
            except Exception as ex:  # noqa: BLE001 - report and go on
                print(f"torch {name} M={m}: failed: {ex}", flush=True)
        del w13, w2
        torch.cuda.empty_cache()
        write_json()
    write_json()


if __name__ == "__main__":
    main()
