#!/usr/bin/env python3
"""drain.bt's traces: each KWin drain over 1.5 ms by what took its time, each of its syscalls over
0.5 ms by what the other CPU ran as it began, and the kernel stacks sampled in those syscalls.
  summarize.py TRACE..."""
import collections, re, sys
NAMES = {11: "munmap", 202: "futex", 228: "clock_nanosleep"}
drains, causes, other, stacks = 0, collections.Counter(), collections.Counter(), collections.Counter()
durations = []
for path in sys.argv[1:]:
    text = open(path).read()
    for m in re.finditer(r"^\d+ drain (\d+) us: .*?longest syscall (\d+) us id (\d+) arg1 (\d+)", text, re.M):
        drains += 1
        total, longest, sid = int(m.group(1)), int(m.group(2)), int(m.group(3))
        durations.append(total)
        if longest > 500 and sid in NAMES:
            causes[f"one {NAMES[sid]}{' (FUTEX_WAKE_PRIVATE)' if sid == 202 and m.group(4) == '129' else ''} over 0.5 ms"] += 1
        else:
            causes["no syscall over 0.5 ms (user space, or many short calls)"] += 1
    for m in re.finditer(r"^  syscall (\d+) took (\d+) us on cpu \d+; the other cpu ran (\S+)", text, re.M):
        sid = int(m.group(1))
        if sid in (11, 202):
            other[(NAMES[sid], "idle" if m.group(3).startswith("swapper") else m.group(3))] += 1
    for m in re.finditer(r"@slow_syscall\[(\d+), \n(.*?)\]: (\d+)", text, re.S):
        frames = [l.strip().split("+")[0] for l in m.group(2).strip().split("\n")]
        stacks[(NAMES.get(int(m.group(1)), m.group(1)), " < ".join(frames[:4]))] += int(m.group(3))
print(f"{drains} drains over 1.5 ms ({min(durations)}-{max(durations)} us) in {len(sys.argv) - 1} traces (a repetition each: its burst and the client's exit)")
for k, n in causes.most_common(): print(f"  {n:3d}  {k}")
print("syscalls over 0.5 ms in a drain, by what the other CPU ran as each began:")
for (s, o), n in sorted(other.items()): print(f"  {n:3d}  {s}, other CPU {o}")
print("kernel stacks sampled (1999 Hz) in a drain's syscall past its first 0.5 ms:")
for (s, st), n in stacks.most_common(8): print(f"  {n:3d}  {s}: {st}")
