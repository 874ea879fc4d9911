#!/usr/bin/env python3
"""Read gap.bt's output: the client's N largest gaps between flushes, and in each what Mutter's
threads were sampled doing (997 Hz) and how long its main thread was off the CPU.
  analyze.py TRACE MUTTER_PID [N]"""
import collections, sys

def parse(path):
    flushes, samples, switches = [], [], []
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        f = lines[i].split()
        if not f:
            i += 1; continue
        if f[0] == "C":
            flushes.append(int(f[1]))
        elif f[0] in ("O", "I"):
            switches.append((int(f[1]), f[0]))
        elif f[0] == "P":
            t, tid, comm, where = int(f[1]), int(f[2]), f[3], f[4] if len(f) > 4 else "?"
            samples.append((t, tid, comm, ["user" if where.startswith("0x") else where]))
        i += 1
    return flushes, samples, sorted(switches)

def off_cpu(switches, t0, t1):
    total, out = 0, None
    for t, kind in switches:
        if kind == "O":
            out = t
        elif out is not None:
            total += max(0, min(t, t1) - max(out, t0)) if t > t0 and out < t1 else 0
            out = None
    return total / 1e6

def main():
    path, pid = sys.argv[1], int(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    flushes, samples, switches = parse(path)
    gaps = sorted(((b - a, a, b) for a, b in zip(flushes, flushes[1:])), reverse=True)
    med = sorted(g for g, _, _ in gaps)[len(gaps) // 2] / 1e6
    print(f"{len(flushes)} client flushes, median gap {med:.1f} ms, {len(samples)} samples")
    for g, a, b in gaps[:n]:
        index = flushes.index(a)
        print(f"\ngap {g/1e6:.1f} ms after flush {index} of {len(flushes)}; main thread off CPU {off_cpu(switches, a, b):.1f} ms")
        per_thread = collections.Counter()
        main_top = collections.Counter()
        for t, tid, comm, stack in samples:
            if a <= t < b:
                per_thread[f"{comm}/{tid}"] += 1
                if tid == pid:
                    main_top[" < ".join(stack[:3])] += 1
        print("  samples per thread:", ", ".join(f"{k} {v}" for k, v in per_thread.most_common()))
        for k, v in main_top.most_common(8):
            print(f"  main {v:4d}  {k[:200]}")

main()
