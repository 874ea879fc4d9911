#!/usr/bin/env python3
"""Read gap.bt's output: the client's N largest gaps between two flushes while it drew (gaps over
1 s are its setup before the first frame and its linger after the last), and in each what Mutter's
threads were sampled doing (997 Hz) and how long its main thread was off the CPU.
  analyze.py TRACE MUTTER_PID [N]"""
import collections, sys

def parse(path):
    flushes, samples, switches = [], [], []
    for line in open(path):
        f = line.split()
        if not f:
            continue
        if f[0] == "C":
            flushes.append(int(f[1]))
        elif f[0] in ("O", "I"):
            switches.append((int(f[1]), f[0]))
        elif f[0] == "P" and len(f) > 5:
            # ksym() of a user address prints it in hex: the thread was in user space
            samples.append((int(f[1]), int(f[2]), f[3], "user" if f[4].startswith("0x") else f[4], int(f[5], 16)))
    return flushes, samples, sorted(switches)

def off_cpu(switches, t0, t1):
    total, out = 0, None
    for t, kind in switches:
        if kind == "O":
            out = t
        elif out is not None:
            total += max(0, min(t, t1) - max(out, t0))
            out = None
    return total / 1e6

def frame_gaps(flushes):
    """(gap ns, number of the flush it follows, from 1, start, end), largest first, under 1 s."""
    return sorted(((b - a, i + 1, a, b) for i, (a, b) in enumerate(zip(flushes, flushes[1:])) if b - a < 1e9),
                  reverse=True)


def main():
    path, pid = sys.argv[1], int(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    flushes, samples, switches = parse(path)
    gaps = frame_gaps(flushes)
    med = sorted(g for g, _, _, _ in gaps)[len(gaps) // 2] / 1e6
    print(f"{len(flushes)} client flushes, median gap {med:.1f} ms, {len(samples)} samples")
    for g, number, a, b in gaps[:n]:
        print(f"\ngap {g/1e6:.1f} ms after flush {number} of {len(flushes)}; main thread off CPU {off_cpu(switches, a, b):.1f} ms")
        per_thread = collections.Counter()
        main_top = collections.Counter()
        for t, tid, comm, where, _ in samples:
            if a <= t < b:
                per_thread[f"{comm}/{tid}"] += 1
                if tid == pid:
                    main_top[where] += 1
        print("  samples per thread:", ", ".join(f"{k} {v}" for k, v in per_thread.most_common()))
        for k, v in main_top.most_common(8):
            print(f"  main {v:4d}  {k}")

if __name__ == "__main__":
    main()
