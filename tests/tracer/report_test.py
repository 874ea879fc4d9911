#!/usr/bin/env python3
"""The burst logic of tools/shm-teardown-trace.py on made-up event lines: no root, no bpftrace, so it
runs everywhere. Each case feeds the lines shm-teardown-trace.bt would print and checks the bursts.

    report_test.py TOOLS_DIR"""
import importlib.util
import os
import sys

MIB = 1 << 20
MS = 10**6
PID = 100
WORKER = 101


def load(tools_dir):
    spec = importlib.util.spec_from_file_location("report", os.path.join(tools_dir, "shm-teardown-trace.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bursts_of(report, lines, end_ns, min_bytes=MIB, gap_ms=100):
    """Feeds lines, ticking the clock to each line's time as the tool would, then ends at end_ns."""
    tracker = report.Tracker(PID, min_bytes, gap_ms * MS)
    bursts = []
    for stamp, line in lines:
        while burst := tracker.due(stamp):
            bursts.append(burst)
        tracker.feed(report.parse_line(line))
    while burst := tracker.due(end_ns):
        bursts.append(burst)
    return bursts, tracker


def closed_first(t, ino, seq, tid=PID):
    """A pool closed then unmapped on tid at t ms: its pages go in the munmap's task work."""
    ns = t * MS
    return [(ns, f"C {tid} {seq} {ns} {MS // 20} 1 {ino} comp"),
            (ns + 2 * MS, f"F {tid} 3 {seq + 1} 1 {ino} {20 * MIB} {ns + MS} {ns + 2 * MS} comp"),
            (ns + 2 * MS, f"U {tid} {seq + 1} {ns + MS // 10} {MS // 2} {MS} 1 {ino} comp")]


def case_closed_first(report, check):
    lines = [(1, "s 1")] + closed_first(1, 10, 1) + closed_first(4, 11, 3) + [(8 * MS, f"S {MS} {8 * MS} 0")]
    bursts, _ = bursts_of(report, lines, 2000 * MS)
    check("closed first: one burst", len(bursts) == 1)
    b = bursts[0]
    main = b["threads"][0]
    check("closed first: 2 pools of 20 MiB on the main thread",
          (b["pools"], b["bytes"], b["main_thread_pools"], b["other_thread_pools"]) == (2, 40 * MIB, 2, 0))
    check("closed first: both closes and munmaps, munmap time with its task work",
          (main["close_calls"], main["munmap_calls"]) == (2, 2) and abs(main["munmap_ms"] - 3.0) < 1e-6)
    check("closed first: the stretch, no wait for a CPU in it",
          (b["main_longest_ms"], b["main_longest_cpu_wait_ms"], b["main_stretches"]) == (7.0, 0.0, 1))


def case_worker(report, check):
    lines = []
    # The second stretch is the longest (4 ms, 1 of them waiting for a CPU); the first waited longer.
    lengths, cpu_wait = (3 * MS, 4 * MS, MS), (2 * MS, MS, 0)
    for i in range(3):
        t = (10 + 16 * i) * MS
        lines += [(t, f"s {t}"), (t + MS // 5, f"U {PID} {i + 1} {t} {MS // 5} 0 1 {20 + i} comp"),
                  (t + lengths[i], f"S {t} {t + lengths[i]} {cpu_wait[i]}"),
                  (t + 4 * MS, f"F {WORKER} 2 {i + 1} 1 {20 + i} {20 * MIB} {t + 2 * MS} {t + 4 * MS} du-reclaim"),
                  (t + 4 * MS, f"C {WORKER} {i + 1} {t + 2 * MS} {2 * MS} 1 {20 + i} du-reclaim")]
    bursts, _ = bursts_of(report, lines, 2000 * MS)
    check("worker: one burst", len(bursts) == 1)
    b = bursts[0]
    worker = next(t for t in b["threads"] if t["tid"] == WORKER)
    check("worker: 3 pools on the worker", (b["pools"], b["main_thread_pools"], b["other_thread_pools"]) == (3, 0, 3))
    check("worker: its closes, the main thread's munmaps of the same pools",
          worker["close_calls"] == 3 and b["threads"][0]["munmap_calls"] == 3)
    check("worker: the longest main stretch, with its own wait for a CPU",
          (b["main_longest_ms"], b["main_longest_cpu_wait_ms"], b["main_stretches"]) == (4.0, 1.0, 3))


def case_open_stretch(report, check):
    # The main thread never reaches its loop: after 2 s the burst is printed with the stretch open,
    # its length counted up to then and its wait for a CPU unknown.
    lines = [(1, "s 1")] + closed_first(1, 50, 1)
    bursts, tracker = bursts_of(report, lines, 3000 * MS)
    b = bursts[0] if bursts else {}
    check("open stretch: counted up to the cut, wait unknown",
          b.get("main_longest_ms", 0) > 2000 and b.get("main_longest_cpu_wait_ms", 0) is None)
    check("open stretch: the summary says unknown too", report.summary(tracker, 3.0)["main_longest_cpu_wait_ms"] is None)


def case_summary_longest(report, check):
    # Two bursts: the summary's wait for a CPU is that of the longest stretch (the second burst's),
    # not the larger wait (the first's).
    lines = [(1, "s 1")] + closed_first(1, 60, 1) + [(4 * MS, f"S 1 {4 * MS} {3 * MS}")]
    lines += [(500 * MS, f"s {500 * MS}")] + closed_first(500, 61, 3) + [(510 * MS, f"S {500 * MS} {510 * MS} {MS}")]
    _, tracker = bursts_of(report, lines, 2000 * MS)
    s = report.summary(tracker, 2.0)
    check("summary: the longest stretch and its own wait", (s["main_longest_ms"], s["main_longest_cpu_wait_ms"]) == (10.0, 1.0))


def case_gap_and_small(report, check):
    lines = closed_first(0, 30, 1) + closed_first(300, 31, 3)
    lines.append((301 * MS, f"F {PID} 2 9 1 32 {64 * 1024} {301 * MS} {301 * MS} comp"))  # a cursor, 64 KiB
    lines.append((5000 * MS, f"F {PID} 2 10 1 33 {64 * 1024} {5000 * MS} {5000 * MS} comp"))  # alone
    bursts, tracker = bursts_of(report, lines, 9000 * MS)
    check("gap: two bursts 300 ms apart", len(bursts) == 2 and [b["pools"] for b in bursts] == [1, 1])
    check("small: counted in its burst, not as a pool", bursts[1]["small_pools"] == 1 and bursts[1]["pools"] == 1)
    check("small: one outside any burst, in the summary", tracker.small_outside == [1, 64 * 1024])


def case_close_at_creation(report, check):
    # libwayland closes the fd right after mmap: a close of the pool 5 s before it dies is not teardown.
    lines = [(0, f"C {PID} 1 0 {MS} 1 40 comp")]
    lines.append((5000 * MS, f"U {PID} 2 {5000 * MS} {MS} {4 * MS} 1 40 comp"))
    lines.append((5005 * MS, f"F {PID} 3 2 1 40 {20 * MIB} {5001 * MS} {5005 * MS} comp"))
    bursts, _ = bursts_of(report, lines, 9000 * MS)
    main = bursts[0]["threads"][0]
    check("creation close: not counted", main["close_calls"] == 0 and main["munmap_calls"] == 1)
    check("creation close: the burst spans the teardown only", bursts[0]["duration_ms"] < 10)


def case_churn(report, check):
    lines = []
    for i in range(750):  # a pool every 16 ms for 12 s
        t = i * 16 * MS
        lines.append((t + MS, f"F {PID} 2 {i} 1 {1000 + i} {2 * MIB} {t} {t + MS} comp"))
    bursts, _ = bursts_of(report, lines, 20000 * MS)
    check("churn: cut into slices of at most 10 s", len(bursts) == 2 and sum(b["pools"] for b in bursts) == 750
          and max(b["duration_ms"] for b in bursts) <= 10000)


def main(argv):
    report = load(argv[1])
    failures = []

    def check(what, ok):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)
    for case in (case_closed_first, case_worker, case_open_stretch, case_summary_longest, case_gap_and_small,
                 case_close_at_creation, case_churn):
        case(report, check)
    print("PASS" if not failures else f"{len(failures)} checks failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
