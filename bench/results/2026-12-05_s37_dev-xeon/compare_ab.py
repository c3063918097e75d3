# Base against new in one A/B round's folder (ab_round1/, ab_round2/): median ms over the rounds' JSON.
#   python3 compare_ab.py ab_round1
import json, glob, os, statistics, sys
D = sys.argv[1] if len(sys.argv) > 1 else '.'
def load(v):
    out = {}
    for f in sorted(glob.glob(os.path.join(D, f'{v}_r*.json'))):
        d = json.load(open(f))
        for r in d['rows']:
            if r['backend'] != 'cpu' or r['threads'] != 2: continue
            fmt = r['format']
            out.setdefault((r['shape'], fmt, r['m']), []).append((r['time_ms'], r['floor_ms']))
    return out
b, n = load('base'), load('new')
print(f"{'shape':18} {'format':28} {'M':>4} {'base ms':>9} {'new ms':>9} {'speedup':>8} {'base %':>7} {'new %':>7}  (median of rounds; % of each run's floor)")
for k in sorted(b, key=lambda k: (k[0], k[1], k[2])):
    if k not in n: continue
    bt = statistics.median(t for t, _ in b[k]); nt = statistics.median(t for t, _ in n[k])
    bp = statistics.median(f / t * 100 for t, f in b[k]); npc = statistics.median(f / t * 100 for t, f in n[k])
    print(f"{k[0]:18} {k[1]:28} {k[2]:>4} {bt:9.3f} {nt:9.3f} {bt/nt:7.3f}x {bp:6.1f}% {npc:6.1f}%")
