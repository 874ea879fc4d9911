#!/usr/bin/env python3
"""Which mapping each sampled address of Mutter's threads fell in, within the client's N largest
gaps while it drew (as analyze.py). MAPS is /proc/PID/maps as run.sh copied it at the client's end,
so a mapping made and gone before then reads "?".  where.py TRACE MAPS [N]"""
import bisect, collections, sys

from analyze import frame_gaps, parse

maps = []
for line in open(sys.argv[2]):
    f = line.split()
    lo, hi = (int(x, 16) for x in f[0].split("-"))
    maps.append((lo, hi, f[1], f[5] if len(f) > 5 else "[anon]"))
maps.sort()
starts = [m[0] for m in maps]
def region(ip):
    i = bisect.bisect_right(starts, ip) - 1
    if i >= 0 and maps[i][0] <= ip < maps[i][1]:
        return f"{maps[i][3].rsplit('/', 1)[-1]} ({maps[i][2]})"
    return "kernel" if ip >= 1 << 63 else "?"
flushes, samples, _ = parse(sys.argv[1])
for g, i, a, b in frame_gaps(flushes)[: int(sys.argv[3]) if len(sys.argv) > 3 else 3]:
    c = collections.Counter((comm, region(ip)) for t, tid, comm, where, ip in samples if a <= t < b)
    print(f"gap {g/1e6:.1f} ms after flush {i} of {len(flushes)}:")
    for (comm, r), n in c.most_common(8): print(f"  {n:4d} {comm:12s} {r}")
