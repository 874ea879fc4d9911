#!/usr/bin/env python3
"""drain.bt's traces, as run.sh leaves them (DIR/trace-N.txt beside stat-N.txt, kwin-N.log and
client-N.log). Only what came before the last /proc/stat sample counts: run.sh takes it just before
it stops the tracer, once the client has left, while KWin still drains what the client's exit
dropped. Prints each drain over 1.5 ms by its longest system call, the drains' calls over 0.5 ms by
what the other CPU ran as each began, the kernel stacks sampled in them (the whole trace: bpftrace
prints that map at its end), and per repetition the counts, steal time and KWin's and the client's
own lines.
  summarize.py DIR/trace-N.txt..."""
import collections, os, re, sys

# x86_64 system call numbers (asm/unistd_64.h)
NAMES = {11: "munmap", 202: "futex", 228: "clock_gettime"}
FUTEX_WAKE_PRIVATE = 129


def name(sid):
    return NAMES.get(sid, f"syscall {sid}")


def stat_rows(path):
    """(uptime s, steal ticks) per line: "UPTIME cpu user nice system idle iowait irq softirq steal ..."."""
    return [(float(f[0]), int(f[9])) for f in (line.split() for line in open(path)) if len(f) > 9]


def main():
    longest, other, stacks, per_rep = collections.Counter(), collections.Counter(), collections.Counter(), []
    durations = []
    for path in sys.argv[1:]:
        base = os.path.dirname(path)
        rep = re.search(r"trace-(\d+)\.txt$", path).group(1)
        rows = stat_rows(os.path.join(base, f"stat-{rep}.txt"))
        cutoff = rows[-1][0] * 1e9
        text = open(path).read()
        counted = 0
        for m in re.finditer(r"^(\d+) drain (\d+) us: .*?longest syscall (\d+) us id (\d+) arg1 (\d+)", text, re.M):
            if int(m.group(1)) > cutoff:
                break
            counted, call_end = counted + 1, m.end()
            durations.append(int(m.group(2)))
            sid, call_us = int(m.group(4)), int(m.group(3))
            wake = " (FUTEX_WAKE_PRIVATE)" if sid == 202 and int(m.group(5)) == FUTEX_WAKE_PRIVATE else ""
            longest[f"longest call over 0.5 ms: {name(sid)}{wake}" if call_us > 500 else "no call over 0.5 ms"] += 1
        for m in re.finditer(r"^  syscall (\d+) took (\d+) us on cpu \d+; the other cpu ran (\S+)", text[:call_end] if counted else "", re.M):
            other[(name(int(m.group(1))), "idle" if m.group(3).startswith("swapper") else m.group(3))] += 1
        for m in re.finditer(r"@slow_syscall\[(\d+), \n(.*?)\]: (\d+)", text, re.S):
            frames = [f.strip().split("+")[0] for f in m.group(2).strip().split("\n")]
            stacks[(name(int(m.group(1))), " < ".join(frames[:4]))] += int(m.group(3))
        steal = rows[-1][1] - rows[0][1]
        logs = [l.strip() for l in open(os.path.join(base, f"kwin-{rep}.log")) if "Reclaimed" in l]
        client = open(os.path.join(base, f"client-{rep}.log")).read().strip()
        per_rep.append((rep, counted, steal, logs, client))
    print(f"{len(durations)} drains over 1.5 ms ({min(durations)}-{max(durations)} us) in {len(per_rep)} bursts")
    for k, n in longest.most_common():
        print(f"  {n:3d}  {k}")
    print("the drains' calls over 0.5 ms (any drain), by what the other CPU ran as each began:")
    for (s, o), n in sorted(other.items()):
        print(f"  {n:3d}  {s}, other CPU {o}")
    print("kernel stacks sampled (1999 Hz) in a drain's call past its first 0.5 ms, whole trace:")
    for (s, st), n in stacks.most_common(8):
        print(f"  {n:3d}  {s}: {st}")
    print("per repetition: drains over 1.5 ms; steal over the run (10 ms ticks); KWin's log; the client")
    for rep, counted, steal, logs, client in per_rep:
        print(f"rep {rep}: {counted} drains over 1.5 ms; steal {steal} ticks")
        for line in logs + [client]:
            print(f"  {line}")


main()
