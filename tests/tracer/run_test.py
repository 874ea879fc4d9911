#!/usr/bin/env python3
"""Runs tools/shm-teardown-trace --json against pool_workload and checks what it reports.

    run_test.py TRACER WORKLOAD main|worker|crowded [POOLS] [BYTES]

main:   the workload maps each pool (the tracer sees the mmap), closes it first and unmaps it on its
        main thread; the tracer must report one burst of POOLS pools, BYTES each within 5%, all freed
        on the main thread, its close and munmap of each, and a stretch covering them. Ended with
        SIGINT (the Ctrl-C path).
worker: pools mapped before the tracer attached (known from /proc/PID/maps); the main thread unmaps
        each in two steps, front first, and a second thread closes them; the tracer must report them
        all freed on that thread (other_thread_pools) and both munmap steps of each on the main
        thread. The tracer ends by itself when the workload exits.
crowded: as main, with a thread spinning on the main thread's CPU and 50 ms of the main thread's own
        work before it waits: at least 10 ms of the longest stretch, not all, waiting for a CPU.
In every mode the longest stretch's wait for a CPU lies within it.
Exit status 77 (ctest: skipped) without root, bpftrace or a mounted tracefs; 1 on a failed check."""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

SKIP = 77
START_TIMEOUT_S = 90  # bpftrace compiles its program at start: seconds on a loaded 2-core machine


def skip_reason():
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("bpftrace") is None:
        return "bpftrace is not installed"
    if not os.path.isdir("/sys/kernel/tracing/events"):
        return "tracefs is not mounted at /sys/kernel/tracing"
    return None


class Check:
    def __init__(self):
        self.failures = 0

    def __call__(self, what, ok):
        print(("ok   " if ok else "FAIL ") + what)
        self.failures += 0 if ok else 1


def wait_for(stream, word, timeout_s):
    """The first line containing word, read on a thread so that a silent stream cannot hang us."""
    found = []

    def reader():
        for line in stream:
            if word in line:
                found.append(line)
                return
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return found[0] if found else None


def run(tracer_path, workload_path, mode, pools, size):
    workload = subprocess.Popen([workload_path, str(pools), str(size), mode], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    tracer = None
    try:
        if wait_for(workload.stdout, "ready", 60) is None:
            raise SystemExit("FAIL the workload did not get ready")
        tracer = subprocess.Popen([tracer_path, "--json", str(workload.pid)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        started = wait_for(tracer.stderr, "tracing", START_TIMEOUT_S)
        if started is None:
            tracer.kill()
            _, err = tracer.communicate()
            raise SystemExit(f"FAIL the tracer did not start within {START_TIMEOUT_S} s: {err.strip()}")
        print(started.strip())
        workload.stdin.write("go\n")
        workload.stdin.flush()
        if wait_for(workload.stdout, "done", 60) is None:
            raise SystemExit("FAIL the workload did not finish its teardown")
        if mode == "main":
            time.sleep(0.5)
            tracer.send_signal(signal.SIGINT)
        out, err = tracer.communicate(timeout=60)
        if err.strip():
            print(err.strip())
        return tracer.returncode, out
    finally:
        for process in (tracer, workload):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def check(mode, status, out, pools, size):
    print(out, end="")
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    bursts = [r for r in records if r.get("type") == "burst"]
    summaries = [r for r in records if r.get("type") == "summary"]
    ok = Check()
    ok(f"tracer exit status 0 (was {status})", status == 0)
    ok(f"one burst (got {len(bursts)})", len(bursts) == 1)
    ok("a summary last", len(summaries) == 1 and records[-1] is summaries[0])
    if len(bursts) != 1:
        return ok.failures + 1
    burst = bursts[0]
    expected = pools * size
    threads = {t["name"]: t for t in burst["threads"]}
    main = next((t for t in burst["threads"] if t["main"]), None)
    ok(f"pools == {pools} (got {burst['pools']})", burst["pools"] == pools)
    ok(f"bytes within 5% of {expected} (got {burst['bytes']})", abs(burst["bytes"] - expected) <= 0.05 * expected)
    ok("the main thread is listed", main is not None)
    if main is None:
        return ok.failures
    steps = 2 * pools if mode == "worker" else pools
    ok(f"the main thread's munmaps of the pools: {steps} (got {main['munmap_calls']})", main["munmap_calls"] == steps)
    wait, longest = burst.get("main_longest_cpu_wait_ms"), burst["main_longest_ms"]
    ok(f"the longest stretch's wait for a CPU, {wait} ms, lies within it ({longest} ms)",
       wait is not None and 0 <= wait <= longest)
    if mode == "crowded":
        # 50 ms of work on one CPU beside a spinning thread: about half of it spent waiting (43.9 of
        # 90.0 ms when written); 10 ms leaves room for any fair scheduler's slices.
        ok(f"crowded: at least 10 ms of the stretch waiting for a CPU, not all ({wait} of {longest} ms)",
           wait is not None and 10 <= wait < longest)
    if mode != "worker":
        ok(f"main_thread_pools == {pools} (got {burst['main_thread_pools']})", burst["main_thread_pools"] == pools)
        ok(f"other_thread_pools == 0 (got {burst['other_thread_pools']})", burst["other_thread_pools"] == 0)
        ok(f"the main thread closed {pools} pools (got {main['close_calls']})", main["close_calls"] == pools)
        # One stretch from the first munmap to the poll() after the last: every munmap and its task
        # work inside it (the first close comes before it; a close starts no stretch).
        ok(f"main_longest_ms {burst['main_longest_ms']} covers the main thread's munmaps {main['munmap_ms']} ms",
           main["munmap_ms"] > 0 and burst["main_longest_ms"] >= main["munmap_ms"] - 0.002
           and burst["main_stretches"] == 1)
    else:
        closer = threads.get("pool-closer")
        ok(f"other_thread_pools == {pools} (got {burst['other_thread_pools']})", burst["other_thread_pools"] == pools)
        ok(f"main_thread_pools == 0 (got {burst['main_thread_pools']})", burst["main_thread_pools"] == 0)
        ok("pool-closer freed them in close()", closer is not None and closer["pools"] == pools
           and closer["close_calls"] == pools and closer["close_ms"] > 0)
        ok(f"the main thread's munmaps make a stretch (main_longest_ms {burst['main_longest_ms']})",
           burst["main_longest_ms"] > 0)
    return ok.failures


def main(argv):
    if len(argv) not in (4, 6) or argv[3] not in ("main", "worker", "crowded"):
        print(__doc__)
        return 2
    reason = skip_reason()
    if reason:
        print(f"skipped: {reason}")
        return SKIP
    tracer_path, workload_path, mode = argv[1:4]
    pools, size = (int(argv[4]), int(argv[5])) if len(argv) == 6 else (8, 4 << 20)
    missing = subprocess.run([tracer_path, "999999999"], capture_output=True, text=True)
    ok = Check()
    ok(f"a missing process: exit 1 and one line ({missing.stderr.strip()})",
       missing.returncode == 1 and missing.stderr.count("\n") == 1 and "no process" in missing.stderr)
    status, out = run(tracer_path, workload_path, mode, pools, size)
    failures = ok.failures + check(mode, status, out, pools, size)
    print("PASS" if failures == 0 else f"{failures} checks failed")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
