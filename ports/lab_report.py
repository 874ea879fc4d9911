#!/usr/bin/env python3
"""lab_report.py RESULTS.jsonl --machine TEXT --date STAMP [--source TEXT] [--json OUT]

Turns the records lab.sh measure wrote (one JSON object per client run) into one table and the
issue's target checks, all within this one run:
  burst: each patched build's max gap <= 0.25x its stock build's, in every repetition, and
         <= 1.5x shm_compositor's (recommended mode) of the same repetition;
  churn: p50 of each patched build at most 10% above its stock build's (median over repetitions):
         deferral must not slow the common case;
  nothing left: descriptors and memfd mappings back to baseline after every client;
  weston-simple-shm: no protocol error under any build.
"""
import argparse
import json
import statistics
import sys

STOCK = {"kwin": "stock", "sway": "stock"}
PATCHED = {"kwin": ["ours"], "sway": ["ours"]}
REFERENCE = ("shm_compositor", "queue+worker-unmap")


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fmt(values):
    return " / ".join("-" if v is None else f"{v:.1f}" for v in values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--machine", default="")
    ap.add_argument("--date", default="")
    ap.add_argument("--source", default="")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = load(args.results)
    reps = sorted({r["rep"] for r in rows})

    def pick(comp, build, client):
        by_rep = {r["rep"]: r for r in rows if r["compositor"] == comp and r["build"] == build and r["client"] == client}
        return [by_rep.get(rep) for rep in reps]

    builds = []
    for r in rows:
        key = (r["compositor"], r["build"])
        if key not in builds:
            builds.append(key)

    print(f"lab.sh measure, {args.date}, {args.machine}; {len(reps)} repetitions, figures per repetition (1 / 2 / 3)")
    if args.source:
        print(f"built from {args.source}")
    print(f"{'compositor':<15} {'build':<19} {'client':<7} {'gap p50 ms':<20} {'gap p99 ms':<20} {'gap max ms':<22} {'client own ms':<16} {'missed':<9} left after client")
    for comp, build in builds:
        for client in ("burst", "churn", "simple-shm"):
            recs = pick(comp, build, client)
            if not any(recs):
                continue
            left = []
            for r in recs:
                if r is None or "fds_after" not in r:
                    continue
                dfd = r["fds_after"] - r["fds_before"]
                dmem = r["memfd_maps_after"] - r["memfd_maps_before"]
                if dfd > 0 or dmem > 0:
                    left.append(f"rep{r['rep']}: +{dfd} fds +{dmem} memfd maps")
            leftover = "; ".join(left) if left else ("nothing" if any(r and "fds_after" in r for r in recs) else "-")
            if client == "simple-shm":
                status = " / ".join("-" if r is None else ("PROTOCOL ERROR" if r.get("protocol_error") else "ok") for r in recs)
                print(f"{comp:<15} {build:<19} {client:<7} {status:<62} {'':<16} {'':<9} {leftover}")
                continue
            g = lambda k: [None if r is None or k not in r else r[k] for r in recs]
            missed = " / ".join("-" if v is None else str(v) for v in g("missed_frames"))
            print(f"{comp:<15} {build:<19} {client:<7} {fmt(g('gap_p50_ms')):<20} {fmt(g('gap_p99_ms')):<20} {fmt(g('gap_max_ms')):<22} {fmt(g('client_work_max_ms')):<16} {missed:<9} {leftover}")

    # Targets
    checks = []
    ref = pick(*REFERENCE, "burst")
    for comp, stock in STOCK.items():
        stock_burst = pick(comp, stock, "burst")
        stock_churn = pick(comp, stock, "churn")
        variants = PATCHED[comp] + [b for c, b in builds if c == comp and b not in PATCHED[comp] and b != stock]
        for build in variants:
            burst = pick(comp, build, "burst")
            churn = pick(comp, build, "churn")
            if not any(burst):
                continue
            ratios, vs_ref = [], []
            for s, p, r in zip(stock_burst, burst, ref):
                ratios.append(None if not (s and p and "gap_max_ms" in s and "gap_max_ms" in p) else p["gap_max_ms"] / s["gap_max_ms"])
                vs_ref.append(None if not (r and p and "gap_max_ms" in r and "gap_max_ms" in p) else p["gap_max_ms"] / r["gap_max_ms"])
            ok1 = all(x is not None and x <= 0.25 for x in ratios)
            ok2 = all(x is not None and x <= 1.5 for x in vs_ref)
            checks.append({"compositor": comp, "build": build, "target": "burst max <= 0.25x stock, every rep",
                           "values": ratios, "met": ok1})
            checks.append({"compositor": comp, "build": build, "target": "burst max <= 1.5x shm_compositor " + REFERENCE[1],
                           "values": vs_ref, "met": ok2})
            sp = [r["gap_p50_ms"] for r in stock_churn if r and "gap_p50_ms" in r]
            pp = [r["gap_p50_ms"] for r in churn if r and "gap_p50_ms" in r]
            if sp and pp:
                ratio = statistics.median(pp) / statistics.median(sp)
                checks.append({"compositor": comp, "build": build, "target": "churn p50 <= 1.10x stock (median of reps)",
                               "values": [ratio], "met": ratio <= 1.10})
    leaks = [r for r in rows if "fds_after" in r and (r["fds_after"] > r["fds_before"] or r["memfd_maps_after"] > r["memfd_maps_before"])]
    checks.append({"compositor": "all", "build": "all", "target": "fds and memfd maps back to baseline after every client",
                   "values": [len(leaks)], "met": not leaks})
    perr = [r for r in rows if r["client"] == "simple-shm" and r.get("protocol_error")]
    checks.append({"compositor": "all", "build": "all", "target": "weston-simple-shm: no protocol error",
                   "values": [len(perr)], "met": not perr})
    print("\ntargets (ratios per repetition)")
    for c in checks:
        vals = " / ".join("-" if v is None else f"{v:.2f}" for v in c["values"])
        print(f"  {'MET ' if c['met'] else 'MISS'} {c['compositor']:<6} {c['build']:<12} {c['target']:<52} {vals}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": args.date, "machine": args.machine, "source": args.source, "repetitions": len(reps), "records": rows, "targets": checks}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
