#!/usr/bin/env python3
"""The user-space half of tools/shm-teardown-trace: runs shm-teardown-trace.bt against one process,
groups what it prints into teardown bursts and prints one line (or JSON object) per burst, and a
summary when it ends (SIGINT, SIGTERM, or the target exiting). tools/README.md has the definitions.

Called by the tools/shm-teardown-trace wrapper after its checks (root, bpftrace, tracefs)."""
import argparse
import ctypes
import datetime
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "shm-teardown-trace.bt")
TMPFS_MAGIC_NAMES = ("tmpfs",)
SYSCALL_KEEP_NS = 60 * 10**9  # a munmap/close of a pool that is freed later is kept this long
OPEN_STRETCH_WAIT_NS = 2 * 10**9  # a burst waits this long for the main thread to reach its loop
MAX_BURST_NS = 10 * 10**9  # a burst that never pauses (a pool freed every frame) is cut this often
TICK_S = 0.02


def die(message):
    print(f"shm-teardown-trace: {message}", file=sys.stderr)
    sys.exit(1)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="shm-teardown-trace",
        description="Print one line per burst of shm pools (tmpfs/memfd files) a process frees.")
    parser.add_argument("target", metavar="PID|NAME", help="the compositor: a pid or an exact process name")
    parser.add_argument("--json", action="store_true", help="one JSON object per burst per line")
    parser.add_argument("--min-bytes", type=int, default=1 << 20,
                        help="pools smaller than this are counted apart (default 1 MiB)")
    parser.add_argument("--gap-ms", type=float, default=100.0,
                        help="a burst ends after this long without a pool freed (default 100)")
    parser.add_argument("--raw", metavar="FILE", help="also write bpftrace's event lines to FILE (for checking)")
    args = parser.parse_args(argv)
    if args.min_bytes < 0 or args.gap_ms <= 0:
        parser.error("--min-bytes must be >= 0 and --gap-ms > 0")
    return args


# ---- the target ----

def resolve_target(spec):
    """A pid, or the one process whose comm is exactly spec."""
    if spec.isdigit():
        pid = int(spec)
        if not os.path.isdir(f"/proc/{pid}"):
            die(f"no process {pid}")
        return pid
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as comm:
                    if comm.read().rstrip("\n") == spec:
                        found.append(int(entry))
            except OSError:
                continue
    if not found:
        die(f"no process named {spec}")
    if len(found) > 1:
        die(f"{len(found)} processes named {spec} ({', '.join(map(str, sorted(found)))}): give a pid")
    return found[0]


def kernel_dev(major, minor):
    """dev_t as the kernel stores it (and tracepoints print it): 12 bits major, 20 bits minor."""
    return (major << 20) | minor


def tmpfs_devices(pid):
    """The devices of the target's tmpfs mounts and of memfds (the kernel's internal tmpfs)."""
    devices = set()
    with open(f"/proc/{pid}/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            if fstype in TMPFS_MAGIC_NAMES:
                major, minor = fields[2].split(":")
                devices.add(kernel_dev(int(major), int(minor)))
    probe = os.memfd_create("shm-teardown-trace-probe")
    try:
        st = os.fstat(probe)
        devices.add(kernel_dev(os.major(st.st_dev), os.minor(st.st_dev)))
    finally:
        os.close(probe)
    return devices


def tmpfs_mappings(pid):
    """(address, length, dev, inode) of the target's mappings of tmpfs files, from /proc/PID/maps: pools it
    mapped before the tracer came, so that their munmap is recognised too."""
    devices = tmpfs_devices(pid)
    found = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) < 5 or fields[4] == "0":
                continue
            major, minor = (int(part, 16) for part in fields[3].split(":"))
            dev = kernel_dev(major, minor)
            if dev in devices:
                start, end = (int(part, 16) for part in fields[0].split("-"))
                found.append((start, end - start, dev, int(fields[4])))
    return found


def process_name(pid):
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return "?"


def alive(pid):
    """False once the process has exited, zombie or not (its parent may not have reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def program_text(pid):
    with open(PROGRAM) as source:
        text = source.read()
    preload = "".join(f"    @mino[{addr:#x}] = {ino}; @mdev[{addr:#x}] = {dev}; @mlen[{addr:#x}] = {length};\n"
                      for addr, length, dev, ino in tmpfs_mappings(pid))
    marker = "    // PRELOAD"
    if marker not in text:
        die(f"{PROGRAM} has no PRELOAD line")
    return text.replace(marker, preload + marker, 1)


# ---- the event lines ----

def parse_line(line):
    """One line of the .bt's output as a dict, or None for anything else."""
    parts = line.rstrip("\n").split(" ")
    kind = parts[0]
    try:
        if kind == "F" and len(parts) >= 9:
            tid, ctx, seq, dev, ino, nbytes, first, last = map(int, parts[1:9])
            return {"kind": "F", "tid": tid, "ctx": ctx, "seq": seq, "key": (dev, ino), "bytes": nbytes,
                    "first": first, "last": last, "comm": " ".join(parts[9:])}
        if kind == "U" and len(parts) >= 8:
            tid, seq, enter, sys_ns, tw_ns, dev, ino = map(int, parts[1:8])
            return {"kind": "munmap", "tid": tid, "seq": seq, "enter": enter, "dur": sys_ns + tw_ns,
                    "key": (dev, ino), "comm": " ".join(parts[8:])}
        if kind == "C" and len(parts) >= 7:
            tid, seq, enter, sys_ns, dev, ino = map(int, parts[1:7])
            return {"kind": "close", "tid": tid, "seq": seq, "enter": enter, "dur": sys_ns,
                    "key": (dev, ino), "comm": " ".join(parts[7:])}
        if kind == "S" and len(parts) == 4:
            return {"kind": "S", "start": int(parts[1]), "end": int(parts[2]), "cpu_wait": int(parts[3])}
        if kind == "s" and len(parts) == 2:
            return {"kind": "s", "start": int(parts[1])}
        if kind == "R":
            return {"kind": "R"}
    except ValueError:
        return None
    return None


def pools_of(runs):
    """Runs grouped by inode: {key: {"bytes", "first", "last", "tid", "comm"}}; the freeing thread of
    a pool is the one that freed most of it."""
    pools = {}
    for run in runs:
        pool = pools.setdefault(run["key"], {"bytes": 0, "first": run["first"], "last": run["last"],
                                             "by_tid": {}, "comm": {}})
        pool["bytes"] += run["bytes"]
        pool["first"] = min(pool["first"], run["first"])
        pool["last"] = max(pool["last"], run["last"])
        pool["by_tid"][run["tid"]] = pool["by_tid"].get(run["tid"], 0) + run["bytes"]
        pool["comm"][run["tid"]] = run["comm"]
    for pool in pools.values():
        pool["tid"] = max(pool["by_tid"], key=pool["by_tid"].get)
        pool["comm"] = pool["comm"][pool["tid"]]
    return pools


class Tracker:
    """Collects the lines and cuts them into bursts."""

    def __init__(self, pid, min_bytes, gap_ns):
        self.pid = pid
        self.min_bytes = min_bytes
        self.gap_ns = gap_ns
        self.runs = []           # F lines not yet in a burst
        self.syscalls = []       # U/C lines not yet in a burst
        self.stretches = []      # (start, end, ns waiting for a CPU) of the main thread, recent
        self.open_stretch = None
        self.names = {}
        self.bursts = []
        self.small_outside = [0, 0]  # pools under --min-bytes freed outside any burst, and bytes

    def feed(self, event):
        kind = event["kind"]
        if kind == "F":
            self.runs.append(event)
        elif kind in ("munmap", "close"):
            self.syscalls.append(event)
        elif kind == "s":
            self.open_stretch = event["start"]
        elif kind == "S":
            self.stretches.append((event["start"], event["end"], event["cpu_wait"]))
            self.open_stretch = None
        if "comm" in event:
            self.names[event["tid"]] = event["comm"]

    def due(self, now):
        """The burst in hand, if its last large pool was freed more than the gap ago and the main
        thread has since come back to its loop (or has not for OPEN_STRETCH_WAIT_NS)."""
        self._prune(now)
        big = [p for p in pools_of(self.runs).values() if p["bytes"] >= self.min_bytes]
        if not big:
            self._drop_small(now - self.gap_ns)
            return None
        last = max(p["last"] for p in big)
        if now - min(p["first"] for p in big) > MAX_BURST_NS:
            return self._cut(last, now)  # continuous churn: printed in slices
        if now - last <= self.gap_ns:
            return None
        if self.open_stretch is not None and now - last <= OPEN_STRETCH_WAIT_NS:
            return None
        return self._cut(last, now)

    def _prune(self, now):
        """Syscalls and stretches that no burst claimed: kept SYSCALL_KEEP_NS, then forgotten."""
        self.syscalls = [c for c in self.syscalls if now - c["enter"] < SYSCALL_KEEP_NS]
        self.stretches = [t for t in self.stretches if now - t[1] < SYSCALL_KEEP_NS]

    def _drop_small(self, before):
        """Small pools freed with no large one near them: counted in the summary only."""
        old = [r for r in self.runs if r["last"] < before]
        for pool in pools_of(old).values():
            self.small_outside[0] += 1
            self.small_outside[1] += pool["bytes"]
        self.runs = [r for r in self.runs if r["last"] >= before]

    def _cut(self, last, now):
        runs = [r for r in self.runs if r["first"] <= last]
        self.runs = [r for r in self.runs if r["first"] > last]
        pools = pools_of(runs)
        keys = set(pools)
        frees = {(r["tid"], r["seq"]) for r in runs if r["ctx"] != 0}
        first_free = min(p["first"] for p in pools.values())

        def freed_in(call):
            return (call["tid"], call["seq"]) in frees

        def of_pool(call):
            return call["key"] in keys
        # A munmap/close of a pool long before its pages went (libwayland closes the fd right after
        # mmap) is no part of the teardown: only those within the gap before the first freed folio.
        mine = [c for c in self.syscalls
                if freed_in(c) or (of_pool(c) and c["enter"] >= first_free - self.gap_ns)]
        self.syscalls = [c for c in self.syscalls
                         if not (freed_in(c) or of_pool(c)) and now - c["enter"] < SYSCALL_KEEP_NS]
        start = min([p["first"] for p in pools.values()] + [s["enter"] for s in mine])
        end = max([p["last"] for p in pools.values()] + [s["enter"] + s["dur"] for s in mine])
        stretches = self._stretches_in(start, end, now)
        burst = self._summarise(pools, mine, start, end, stretches)
        self.bursts.append(burst)
        return burst

    def _stretches_in(self, start, end, now):
        found = [t for t in self.stretches if t[0] <= end and t[1] >= start]
        if self.open_stretch is not None and self.open_stretch <= end:
            # still tearing down: counted up to now, its wait for a CPU unknown before its end
            found.append((self.open_stretch, now, None))
        self.stretches = [t for t in self.stretches if t[1] > end]
        return found

    def _summarise(self, pools, syscalls, start, end, stretches):
        big = {k: p for k, p in pools.items() if p["bytes"] >= self.min_bytes}
        small = [p for p in pools.values() if p["bytes"] < self.min_bytes]
        threads = {}

        def thread(tid):
            return threads.setdefault(tid, {"tid": tid, "name": self.names.get(tid, "?"), "main": tid == self.pid,
                                            "pools": 0, "bytes": 0, "munmap_ms": 0.0, "munmap_calls": 0,
                                            "close_ms": 0.0, "close_calls": 0})
        for pool in big.values():
            entry = thread(pool["tid"])
            entry["pools"] += 1
            entry["bytes"] += pool["bytes"]
        for call in syscalls:
            entry = thread(call["tid"])
            entry[call["kind"] + "_ms"] += call["dur"] / 1e6
            entry[call["kind"] + "_calls"] += 1
        main_pools = sum(1 for p in big.values() if p["tid"] == self.pid)
        durations = [(e - s) / 1e6 for s, e, _ in stretches]
        longest = max(stretches, key=lambda t: t[1] - t[0], default=(0, 0, 0))
        wait = None if longest[2] is None else round(longest[2] / 1e6, 3)
        return {
            "type": "burst", "n": len(self.bursts) + 1, "start_ns": start, "duration_ms": round((end - start) / 1e6, 3),
            "pools": len(big), "bytes": sum(p["bytes"] for p in big.values()),
            "small_pools": len(small), "small_bytes": sum(p["bytes"] for p in small),
            "main_thread_pools": main_pools, "other_thread_pools": len(big) - main_pools,
            "main_longest_ms": round(max(durations, default=0.0), 3),
            "main_longest_cpu_wait_ms": wait, "main_stretches": len(durations),
            "main_stretch_total_ms": round(sum(durations), 3),
            "threads": [{**t, "munmap_ms": round(t["munmap_ms"], 3), "close_ms": round(t["close_ms"], 3)}
                        for t in sorted(threads.values(), key=lambda t: (not t["main"], t["tid"]))],
        }


# ---- printing ----

def human_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3f} {unit}"
    return f"{n} B"


def ms_or_unknown(value):
    return "?" if value is None else f"{value:.2f}"


def wall_clock(mono_ns, offset_ns):
    stamp = datetime.datetime.fromtimestamp((mono_ns + offset_ns) / 1e9, datetime.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def burst_text(burst, when):
    threads = "; ".join(
        f"{t['name']}[{t['tid']}]{' main' if t['main'] else ''}: {t['pools']} pools, "
        f"munmap {t['munmap_ms']:.1f} ms/{t['munmap_calls']}, close {t['close_ms']:.1f} ms/{t['close_calls']}"
        for t in burst["threads"])
    return (f"{when} burst {burst['n']}: {burst['pools']} pools {human_bytes(burst['bytes'])} "
            f"(+{burst['small_pools']} small, {human_bytes(burst['small_bytes'])}) in {burst['duration_ms']:.1f} ms; "
            f"main thread {burst['main_thread_pools']}, others {burst['other_thread_pools']}; "
            f"main longest {burst['main_longest_ms']:.2f} ms, {ms_or_unknown(burst['main_longest_cpu_wait_ms'])} of it "
            f"waiting for a CPU ({burst['main_stretches']} stretches, "
            f"{burst['main_stretch_total_ms']:.1f} ms); {threads}")


def summary(tracker, traced_s):
    bursts = tracker.bursts
    longest = max(bursts, key=lambda b: b["main_longest_ms"], default={"main_longest_ms": 0.0, "main_longest_cpu_wait_ms": 0.0})
    return {
        "type": "summary", "traced_s": round(traced_s, 1), "bursts": len(bursts),
        "pools": sum(b["pools"] for b in bursts), "bytes": sum(b["bytes"] for b in bursts),
        "main_thread_pools": sum(b["main_thread_pools"] for b in bursts),
        "other_thread_pools": sum(b["other_thread_pools"] for b in bursts),
        "main_longest_ms": longest["main_longest_ms"],
        "main_longest_cpu_wait_ms": longest["main_longest_cpu_wait_ms"],
        "small_pools": sum(b["small_pools"] for b in bursts) + tracker.small_outside[0],
        "small_bytes": sum(b["small_bytes"] for b in bursts) + tracker.small_outside[1],
    }


def summary_text(s):
    return (f"summary: {s['bursts']} bursts over {s['traced_s']} s: {s['pools']} pools {human_bytes(s['bytes'])}, "
            f"main thread {s['main_thread_pools']}, others {s['other_thread_pools']}; longest main stretch "
            f"{s['main_longest_ms']:.2f} ms ({ms_or_unknown(s['main_longest_cpu_wait_ms'])} of it waiting for a CPU); small pools {s['small_pools']} ({human_bytes(s['small_bytes'])})")


# ---- running bpftrace ----

def start_bpftrace(pid, program, stderr_file):
    """bpftrace reading the program from its stdin, so no file is left behind if we are killed."""
    # bpftrace 0.17 raises RLIMIT_MEMLOCK itself and complains when it cannot (harmless: kernels
    # since 5.11 charge BPF maps to the memory cgroup instead). Raised here where allowed, to quiet it.
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass
    # Every map is preallocated at BPFTRACE_MAP_KEYS_MAX entries (4096 unless the user sets it): at
    # 65536 the program held 133 MiB of kernel memory, at 4096 about 8. 4096 threads and 4096 live
    # tmpfs mappings are enough for a compositor; past that, munmaps of unknown mappings count only
    # when they free folios.
    env = dict(os.environ)
    # Its own session: a terminal's Ctrl-C reaches only us, and we pass it on once. Ended with us if
    # we are killed, so no bpftrace is left tracing a process nobody reads about.
    tracer = subprocess.Popen(["bpftrace", "-q", "-B", "line", "--no-warnings", "-",
                               str(pid), str(os.sysconf("SC_PAGE_SIZE"))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr_file, env=env,
                              text=True, bufsize=1, start_new_session=True, preexec_fn=end_with_parent)
    tracer.stdin.write(program)
    tracer.stdin.close()
    return tracer


def end_with_parent():
    PR_SET_PDEATHSIG = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def read_lines(stream, buffer):
    """Whatever complete lines are there now, or None at end of stream."""
    chunk = os.read(stream.fileno(), 65536)
    if not chunk:
        return None
    buffer[0] += chunk.decode(errors="replace")
    *lines, buffer[0] = buffer[0].split("\n")
    return lines


def emit(record, text, as_json):
    print(json.dumps(record) if as_json else text, flush=True)


def emit_burst(burst, offset_ns, as_json):
    """start_ns is CLOCK_MONOTONIC (to match other traces); time is the same instant in UTC."""
    when = wall_clock(burst["start_ns"], offset_ns)
    emit({"type": "burst", "time": when, **{k: v for k, v in burst.items() if k != "type"}},
         burst_text(burst, when), as_json)


class Session:
    """One tracing session: bpftrace's lines in, bursts and the summary out."""

    def __init__(self, args, pid):
        self.args = args
        self.pid = pid
        self.offset_ns = time.time_ns() - time.monotonic_ns()
        self.tracker = Tracker(pid, args.min_bytes, int(args.gap_ms * 1e6))
        self.started = None
        self.raw = open(args.raw, "w") if args.raw else None

    def take(self, line):
        if self.raw:
            self.raw.write(line + "\n")
        event = parse_line(line)
        if event is None:
            return
        if event["kind"] == "R":
            self.started = time.monotonic()
            print(f"shm-teardown-trace: tracing {process_name(self.pid)} ({self.pid}); Ctrl-C to stop",
                  file=sys.stderr, flush=True)
        else:
            self.tracker.feed(event)

    def flush(self, now_ns):
        while burst := self.tracker.due(now_ns):
            emit_burst(burst, self.offset_ns, self.args.json)

    def finish(self):
        """The last burst goes out whatever the gap, then the summary."""
        if self.raw:
            self.raw.close()
        self.flush(time.monotonic_ns() + 10 * OPEN_STRETCH_WAIT_NS)
        record = summary(self.tracker, time.monotonic() - self.started)
        emit(record, summary_text(record), self.args.json)


def pump(tracer, session, stop):
    """Reads bpftrace until it exits; asks it to stop (SIGINT) on ours or when the target is gone."""
    buffer = [""]
    interrupted = False
    while True:
        if not interrupted and (stop["asked"] or (session.started and not alive(session.pid))):
            tracer.send_signal(signal.SIGINT)
            interrupted = True
        try:
            ready, _, _ = select.select([tracer.stdout], [], [], TICK_S)
        except InterruptedError:
            continue
        if ready:
            lines = read_lines(tracer.stdout, buffer)
            if lines is None:
                return
            for line in lines:
                session.take(line)
        session.flush(time.monotonic_ns())


def run(args):
    pid = resolve_target(args.target)
    stop = {"asked": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(asked=True))
    signal.signal(signal.SIGTERM, lambda *_: stop.update(asked=True))
    with tempfile.TemporaryFile("w+") as errors:
        tracer = start_bpftrace(pid, program_text(pid), errors)
        session = Session(args, pid)
        pump(tracer, session, stop)
        status = tracer.wait()
        if session.started is None:
            if stop["asked"]:
                return 130  # stopped before it attached: nothing to report
            errors.seek(0)
            detail = " ".join(line.strip() for line in errors if "RLIMIT_MEMLOCK" not in line and line.strip())
            die(f"bpftrace did not start (exit status {status}): {detail[:400]}")
        session.finish()
    return 0


if __name__ == "__main__":
    sys.exit(run(parse_args(sys.argv[1:])))
