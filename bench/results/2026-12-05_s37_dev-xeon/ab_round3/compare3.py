import json, glob, statistics
def load(v):
    out = {}
    for f in sorted(glob.glob(f'./{v}_r*.json')):
        for r in json.load(open(f))['rows']:
            if r['backend'] != 'cpu' or r['threads'] != 2: continue
            out.setdefault((r['shape'], r['format'], r['m']), []).append(r['time_ms'])
    return out
b, n, t = load('base'), load('new'), load('t4')
print(f"{'shape':16} {'format':10} {'M':>3} {'base':>8} {'<=2 tok':>8} {'<=4 tok':>8}  speedups (median ms of 3 alternating rounds)")
for k in sorted(b):
    bm, nm, tm = (statistics.median(x[k]) for x in (b, n, t))
    print(f"{k[0]:16} {k[1]:10} {k[2]:>3} {bm:8.3f} {nm:8.3f} {tm:8.3f}  {bm/nm:.3f}x {bm/tm:.3f}x")
