#!/usr/bin/env python3
"""lab_report.py RESULTS.jsonl --machine TEXT --date STAMP [--source TEXT] [--json OUT]

Turns the records lab.sh measure wrote (one JSON object per client run) into tables and the
targets of issues 32 and 33, all within this one run, for every compositor measured with a
`stock` build (each other build of it is held against that stock), on the client runs without the
tracer where the run has them:
  burst: each other build's burst max gap <= 0.35x its stock build's, in every repetition;
         libwayland's series below its naive baseline (one-thread) in every repetition;
  no frame skipped: each other build's burst max gap <= 1.5x its own median frame interval (the
         burst client's gap p50), in every repetition;
  churn: p50 of each other build at most 10% above its stock build's (median over repetitions):
         deferral must not slow the common case;
  library baseline (lab.sh --shm-baseline REF): shm_compositor's burst max and churn p50 on this
         library at most 1.10x the same mode on the library at REF (median of the per-repetition ratios);
  nothing left: descriptors and memfd mappings back to baseline after every client;
  weston-simple-shm: no protocol error under any build.
  tracer (issue 34), on each traced burst: 52 +- 2 pools and 1 GiB +- 5%; a stock build frees them on
         the main thread, whose longest teardown stretch is the largest gap within one frame interval
         (the value: |stretch - gap| / interval); any other build frees none there and has no stretch
         over 2 ms (the value: the longest stretch, ms).
The burst max gap is the largest of the whole client run for KWin's and wlroots' compositors (issue
33), and for weston and Mutter (issue 32, whose targets read "after the burst") the largest from the
client's first wl_buffer destroy on: the gaps that hold the teardown (48 with lab.sh's client since
fcca8cb, 12 before). The ~52 gaps before it (the window's first frames included) had no pool to tear
down; both halves are printed. Runs whose client did not split its gaps (before 1d6ccf9) are read
whole.
Beside each client's max gap, the tracer's view of the same run (tools/shm-teardown-trace on the
compositor): pools and bytes freed, how many on the main thread and on others, and the main
thread's longest teardown stretch with the part of it the thread spent waiting for a CPU. When the run
measured clients with and without the tracer (lab.sh measure --tracer both), the tracer's overhead
on the burst max gap.
"""
import argparse
import json
import statistics
import sys

CLIENTS = ("burst", "burst/no-tracer", "churn", "churn/no-tracer", "simple-shm")
TRACED = ("burst", "churn")
BURST_POOLS = 52  # lab.sh's burst client: 52 pools of 20 MiB, 1.02 GiB
NAIVE = "one-thread"  # ports/libwayland/alternatives/0001-one-thread.patch
# Builds that free a dead pool's pages on the thread that drops it; every other build defers them.
# mr4755 is not here: its cleanup thread frees them, and the check says whether it does.
INLINE_BUILDS = ("stock", "close-first", "debian")
# Issue 32 holds libwayland's compositors to the largest gap "after the burst" (from the client's
# first wl_buffer destroy on); issue 33 holds KWin and wlroots' to the burst's largest gap.
AFTER_BURST = ("weston", "mutter")


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fmt(values, digits=1):
    return " / ".join("-" if v is None else f"{v:.{digits}f}" for v in values)


class Run:
    def __init__(self, rows):
        self.rows = rows
        self.reps = sorted({r["rep"] for r in rows})
        self.builds = []
        for r in rows:
            key = (r["compositor"], r["build"])
            if key not in self.builds:
                self.builds.append(key)

    def untraced(self, comp, client):
        """The client run the targets read for comp: without the tracer where comp has one (the
        tracer slows the freeing it watches), else the traced one."""
        bare = client + "/no-tracer"
        return bare if any(r["compositor"] == comp and r["client"] == bare for r in self.rows) else client

    def pick(self, comp, build, client):
        """One record per repetition (None where that repetition has none)."""
        by_rep = {r["rep"]: r for r in self.rows
                  if r["compositor"] == comp and r["build"] == build and r["client"] == client}
        return [by_rep.get(rep) for rep in self.reps]


def field(recs, key):
    return [None if r is None or r.get(key) is None else r[key] for r in recs]


def leftover_text(recs):
    left = []
    for r in recs:
        if r is None or "fds_after" not in r:
            continue
        dfd = r["fds_after"] - r["fds_before"]
        dmem = r["memfd_maps_after"] - r["memfd_maps_before"]
        if dfd > 0 or dmem > 0:
            left.append(f"rep{r['rep']}: +{dfd} fds +{dmem} memfd maps")
    if left:
        return "; ".join(left)
    return "nothing" if any(r and "fds_after" in r for r in recs) else "-"


def print_gaps(run):
    print(f"{'compositor':<15} {'build':<19} {'client':<16} {'gap p50 ms':<20} {'gap p99 ms':<20} {'gap max ms':<22} "
          f"{'client own ms':<16} {'missed':<9} left after client")
    for comp, build in run.builds:
        for client in CLIENTS:
            recs = run.pick(comp, build, client)
            if not any(recs):
                continue
            left = leftover_text(recs)
            if client == "simple-shm":
                status = " / ".join("-" if r is None else ("PROTOCOL ERROR" if r.get("protocol_error") else "ok") for r in recs)
                print(f"{comp:<15} {build:<19} {client:<16} {status:<62} {'':<16} {'':<9} {left}")
                continue
            missed = " / ".join("-" if v is None else str(v) for v in field(recs, "missed_frames"))
            print(f"{comp:<15} {build:<19} {client:<16} {fmt(field(recs, 'gap_p50_ms')):<20} "
                  f"{fmt(field(recs, 'gap_p99_ms')):<20} {fmt(field(recs, 'gap_max_ms')):<22} "
                  f"{fmt(field(recs, 'client_work_max_ms')):<16} {missed:<9} {left}")


def mib(values):
    return [None if v is None else v / 2**20 for v in values]


def print_tracer(run):
    """The tracer's view of each traced client run, beside that run's max gap: the bursts that began
    before the client left (what its exit dropped is not counted)."""
    lines = []
    for comp, build in run.builds:
        for client in TRACED:
            recs = run.pick(comp, build, client)
            if not any(r and ("trace_pools" in r or "trace_error" in r) for r in recs):
                continue
            errors = sorted({r["trace_error"] for r in recs if r and "trace_error" in r})
            lines.append(f"{comp:<15} {build:<19} {client:<7} {fmt(field(recs, 'gap_max_ms')):<22} "
                         f"{fmt(field(recs, 'trace_pools'), 0):<14} {fmt(mib(field(recs, 'trace_bytes')), 0):<20} "
                         f"{fmt(field(recs, 'trace_main_thread_pools'), 0):<14} "
                         f"{fmt(field(recs, 'trace_other_thread_pools'), 0):<14} "
                         f"{fmt(field(recs, 'trace_main_longest_ms'), 2):<22} "
                         f"{fmt(field(recs, 'trace_main_longest_cpu_wait_ms'), 2):<22} {'; '.join(errors)}")
    if not lines:
        return
    print("\ntools/shm-teardown-trace on the compositor during the same client runs (the bursts that began before the client left)")
    print(f"{'compositor':<15} {'build':<19} {'client':<7} {'gap max ms':<22} {'pools':<14} {'MiB':<20} "
          f"{'main-thread':<14} {'other-thread':<14} {'main longest ms':<22} {'of it CPU wait ms':<22} tracer error")
    for line in lines:
        print(line)


def print_overhead(run):
    """Burst max gap without and with the tracer attached, where the run measured both."""
    lines = []
    for comp, build in run.builds:
        without = field(run.pick(comp, build, "burst/no-tracer"), "gap_max_ms")
        with_tracer = field(run.pick(comp, build, "burst"), "gap_max_ms")
        if any(v is not None for v in without) and any(v is not None for v in with_tracer):
            lines.append(f"  {comp:<15} {build:<19} without {fmt(without):<22} with {fmt(with_tracer)}")
    if lines:
        print("\ntracer overhead: burst max gap ms without / with the tracer attached, per repetition")
        for line in lines:
            print(line)


def in_intervals(recs, key):
    """recs' `key` in frame intervals (each record's own gap p50)."""
    return [None if not (r and r.get(key) and r.get("gap_p50_ms")) else r[key] / r["gap_p50_ms"] for r in recs]


def print_skip_control(run):
    """Each burst's largest gap before the client destroyed a pool (no teardown yet: the run's own
    control for a skipped frame) and from then on, both in frame intervals (the run's gap p50)."""
    lines = []
    for comp, build in run.builds:
        recs = run.pick(comp, build, run.untraced(comp, "burst"))
        if not any(r and r.get("gap_max_before_teardown_ms") for r in recs):
            continue
        lines.append(f"  {comp:<15} {build:<19} before {fmt(in_intervals(recs, 'gap_max_before_teardown_ms'), 2):<22} "
                     f"from {fmt(in_intervals(recs, 'gap_max_from_teardown_ms'), 2)}")
    if lines:
        print("\nburst: largest gap before the first destroy (no teardown yet) and from it on, in frame intervals")
        for line in lines:
            print(line)


def ratio_list(num, den, key="gap_max_ms"):
    return [None if not (n and d and n.get(key) and d.get(key)) else n[key] / d[key] for n, d in zip(num, den)]


def burst_key(comp, *groups):
    """The gap comp's burst targets read: for libwayland's compositors (issue 32), the largest after
    the burst where this run's client split its gaps; else the largest of the whole client run. A
    record of a split run that lacks the figure reads None, which fails its repetition."""
    split = any(r and "gaps_before_teardown" in r for g in groups for r in g)
    return "gap_max_from_teardown_ms" if comp in AFTER_BURST and split else "gap_max_ms"


def burst_label(key):
    return "burst max after the first wl_buffer destroy" if key == "gap_max_from_teardown_ms" else "burst max"


def build_targets(run, comp, build):
    stock_burst = run.pick(comp, "stock", run.untraced(comp, "burst"))
    burst = run.pick(comp, build, run.untraced(comp, "burst"))
    if not any(burst):
        return []
    key = burst_key(comp, burst, stock_burst)
    vs_stock = ratio_list(burst, stock_burst, key)
    # The client's median gap is the compositor's frame interval; a skipped frame is 2x it.
    vs_pace = in_intervals(burst, key)
    checks = [
        {"compositor": comp, "build": build, "target": f"{burst_label(key)} <= 0.35x stock, every rep",
         "values": vs_stock, "met": all(x is not None and x <= 0.35 for x in vs_stock)},
        {"compositor": comp, "build": build, "target": f"{burst_label(key)} <= 1.5x own frame interval (no skip)",
         "values": vs_pace, "met": all(x is not None and x <= 1.5 for x in vs_pace)},
    ]
    sp = [r["gap_p50_ms"] for r in run.pick(comp, "stock", run.untraced(comp, "churn")) if r and r.get("gap_p50_ms")]
    pp = [r["gap_p50_ms"] for r in run.pick(comp, build, run.untraced(comp, "churn")) if r and r.get("gap_p50_ms")]
    if sp and pp:
        ratio = statistics.median(pp) / statistics.median(sp)
        checks.append({"compositor": comp, "build": build, "target": "churn p50 <= 1.10x stock (median of reps)",
                       "values": [ratio], "met": ratio <= 1.10})
    return checks


def baseline_targets(run, comp):
    """libwayland: the series below its naive baseline (one plain thread, every munmap in order, no budget)."""
    if (comp, "ours") not in run.builds or (comp, NAIVE) not in run.builds:
        return []
    burst = run.untraced(comp, "burst")
    ours, naive = run.pick(comp, "ours", burst), run.pick(comp, NAIVE, burst)
    key = burst_key(comp, ours, naive)
    vs_naive = ratio_list(ours, naive, key)
    return [{"compositor": comp, "build": "ours", "target": f"{burst_label(key)} < {NAIVE}'s, every rep",
             "values": vs_naive, "met": all(x is not None and x < 1.0 for x in vs_naive)}]


def baseline_library_targets(run):
    """lab.sh --shm-baseline: shm_compositor on this library against the same on the library at REF."""
    checks = []
    for comp, build in run.builds:
        if "@" not in build or (comp, build.split("@")[0]) not in run.builds:
            continue
        new = build.split("@")[0]
        for client in ("burst", "churn"):
            key = "gap_max_ms" if client == "burst" else "gap_p50_ms"
            shape = run.untraced(comp, client)
            ratios = [x for x in ratio_list(run.pick(comp, new, shape), run.pick(comp, build, shape), key) if x is not None]
            if ratios:
                median = statistics.median(ratios)
                checks.append({"compositor": comp, "build": new, "target": f"{client} {key[4:-3]} <= 1.10x {build} (median of reps)",
                               "values": ratios, "met": median <= 1.10})
    return checks


def tracer_checks(recs, inline):
    """Issue 34's reading of one traced burst client: what the tracer saw, per repetition."""
    values, met = [], True
    for r in recs:
        if not r or "trace_pools" not in r:
            values.append(None)
            met = False
            continue
        sized = abs(r["trace_pools"] - BURST_POOLS) <= 2 and abs(r["trace_bytes"] / 2**30 - 1.0) <= 0.05
        if inline:
            # freed on the main thread, and its longest stretch is the client's largest gap, within a frame
            off = abs(r["trace_main_longest_ms"] - r["gap_max_ms"]) / r["gap_p50_ms"]
            ok = sized and r["trace_main_thread_pools"] >= r["trace_pools"] - 2 and off <= 1.0
            values.append(off)
        else:
            ok = sized and r["trace_main_thread_pools"] == 0 and r["trace_main_longest_ms"] <= 2.0
            values.append(r["trace_main_longest_ms"])
        met = met and ok
    return values, met


def tracer_targets(run):
    checks = []
    for comp, build in run.builds:
        recs = run.pick(comp, build, "burst")
        if not any(r and "trace_pools" in r for r in recs):
            continue
        inline = build in INLINE_BUILDS
        values, met = tracer_checks(recs, inline)
        target = ("tracer: 52+-2 pools, 1 GiB+-5%, freed on main, |stretch - gap| / frame <= 1" if inline
                  else "tracer: 52+-2 pools, 1 GiB+-5%, none freed on main, stretch <= 2 ms")
        checks.append({"compositor": comp, "build": build, "target": target, "values": values, "met": met})
    return checks


def targets(run):
    checks = []
    for comp in dict.fromkeys(c for c, _ in run.builds):
        if (comp, "stock") not in run.builds:
            continue
        for c, build in run.builds:
            if c == comp and build != "stock":
                checks += build_targets(run, comp, build)
        checks += baseline_targets(run, comp)
    checks += baseline_library_targets(run)
    checks += tracer_targets(run)
    rows = run.rows
    leaks = [r for r in rows if "fds_after" in r and (r["fds_after"] > r["fds_before"] or r["memfd_maps_after"] > r["memfd_maps_before"])]
    checks.append({"compositor": "all", "build": "all", "target": "fds and memfd maps back to baseline after every client",
                   "values": [len(leaks)], "met": not leaks})
    perr = [r for r in rows if r["client"] == "simple-shm" and r.get("protocol_error")]
    checks.append({"compositor": "all", "build": "all", "target": "weston-simple-shm: no protocol error",
                   "values": [len(perr)], "met": not perr})
    return checks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--machine", default="")
    ap.add_argument("--date", default="")
    ap.add_argument("--source", default="")
    ap.add_argument("--json")
    args = ap.parse_args()
    run = Run(load(args.results))
    print(f"lab.sh measure, {args.date}, {args.machine}; {len(run.reps)} repetitions, figures per repetition "
          f"({' / '.join(map(str, run.reps))})")
    if args.source:
        print(f"built from {args.source}")
    print_gaps(run)
    print_tracer(run)
    print_overhead(run)
    print_skip_control(run)
    checks = targets(run)
    print("\ntargets (ratios per repetition)")
    for c in checks:
        print(f"  {'MET ' if c['met'] else 'MISS'} {c['compositor']:<14} {c['build']:<18} {c['target']:<78} {fmt(c['values'], 2)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": args.date, "machine": args.machine, "source": args.source, "repetitions": len(run.reps),
                       "records": run.rows, "targets": checks}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
