#!/usr/bin/env python3
"""Smoke test for teardown_bench and stutter_demo: runs a tool with tiny sizes and checks that its
CSV, JSON (and SVG) parse and that every strategy reported every field. Asserts no timing.

usage: check_bench_output.py {teardown|stutter} TOOL OUT_PREFIX [tool arguments...]
"""
import csv
import json
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

STRATEGIES = ["close-first", "unmap-first", "thread-drop", "queue", "queue+worker", "queue+worker-unmap",
              "queue/2MiB", "queue+worker/2MiB", "queue+worker/nice", "queue+worker/pause", "queue+worker/wall"]
# Second runs of a baseline (A/A controls): teardown_bench runs them, stutter_demo by default does not.
CONTROLS = ["unmap-first/again", "thread-drop/again"]

TEARDOWN_FIELDS = [
    "pool_bytes", "pools", "runs",
    "munmap_p50_us", "munmap_p99_us", "munmap_max_us", "close_p50_us", "close_p99_us", "close_max_us",
    "step_p50_us", "step_p99_us", "step_max_us", "munmap_cpu_p50_us", "close_cpu_p50_us", "steps_per_pool", "cpu_per_pool_us",
    "teardown_cpu_per_pool_us", "loop_cpu_per_frame_us",
    "frame_ms_per_run", "frame_p99_ms", "frame_max_ms", "frame_calm_p99_ms", "frame_calm_max_ms", "frames_preempted", "max_frame_close_us", "work_ms_per_run",
    "frames_to_return", "frames_bound", "hit_frame_limit",
    "prediction_error_p50_us", "prediction_error_p99_us", "steps_over_max_step_pct",
]
PROBE_FIELDS = [
    "probe_p50_us", "probe_p99_us", "probe_p999_us", "probe_max_us", "probe_mmap_max_us", "probe_mmap_net_max_us", "unmap_off_cpu_max_us",
    "probe_samples", "probe_preempted", "probe_over_100us_per_run",
]
STUTTER_FIELDS = [
    "pools", "pool_bytes", "worst_stall_ms", "p99_stall_ms", "calm_worst_stall_ms", "calm_p99_stall_ms",
    "calm_worst_calls", "calm_worst_longest_call_ms", "calm_worst_longest_call_cpu_ms",
    "preempted_frames", "p99_frame_ms", "frames_over_interval",
    "vblanks_missed", "frames_to_return", "frames_bound", "work_ms", "max_frame_close_ms",
]
OVERHEAD_FIELDS = ["push_ns", "clock_read_ns", "step_ns", "steps_per_item", "allocations_per_push_and_drain"]

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def check_numbers(where, row, fields):
    for name in fields:
        value = row.get(name)
        check(isinstance(value, (int, float)) and math.isfinite(value) and value >= 0,
              f"{where}: field {name} missing or not a finite non-negative number: {value!r}")


def check_strategies(where, rows, fields, strategies):
    by_strategy = {r.get("strategy"): r for r in rows}
    check(set(by_strategy) - {"baseline"} == set(strategies), f"{where}: strategies {sorted(by_strategy)}")
    for s in strategies:
        if s in by_strategy:
            check_numbers(f"{where} {s}", by_strategy[s], fields)
            check(by_strategy[s]["frames_to_return"] >= 1, f"{where} {s}: memory never reported returned")


def check_csv(path, json_rows):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    check(len(rows) == len(json_rows), f"CSV has {len(rows)} rows, JSON {len(json_rows)}")
    for c, j in zip(rows, json_rows):
        for name, value in j.items():
            if isinstance(value, str):
                check(c.get(name) == value, f"CSV {name}: {c.get(name)!r} != {value!r}")
            else:
                check(c.get(name) not in (None, ""), f"CSV row {j.get('strategy')}: {name} empty")
                if c.get(name):
                    float(c[name])  # must parse


def check_teardown(data, tool_args):
    rows = data["rows"]
    groups = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["pool_bytes"]), []).append(r)
    scenarios = {scenario for scenario, _ in groups}
    check("burst" in scenarios, "no burst scenario")
    if "--firefox-focus" in tool_args:
        check("firefox-focus" in scenarios, "--firefox-focus given but no firefox-focus rows")
    for (scenario, size), group in groups.items():
        where = f"{scenario} {size:.0f} B"
        probed = scenario == "burst" and "--no-probe" not in tool_args  # firefox-focus never has the probe
        check_strategies(where, group, TEARDOWN_FIELDS + (PROBE_FIELDS if probed else []), STRATEGIES + CONTROLS)
        if not probed:
            check(all("probe_samples" not in r for r in group), f"{where}: probe figures without the probe")
            continue
        baseline = [r for r in group if r["strategy"] == "baseline"]
        check(len(baseline) == 1, f"{where}: no probe baseline row")
        for b in baseline:
            check_numbers(f"{where} baseline", b, PROBE_FIELDS)
            check(b["probe_samples"] > 0, f"{where}: baseline probe took no samples")
    check(len(data.get("cold_steps", [])) == 1, "no cold_steps section")
    for c in data.get("cold_steps", []):
        check_numbers("cold_steps", c, ["pool_bytes", "steps", "warm_cpu_per_pool_us", "cold_cpu_per_pool_us"])
        per_call = c.get("cold_cost_per_call_us")
        check(isinstance(per_call, (int, float)) and math.isfinite(per_call), f"cold_steps: bad cold_cost_per_call_us {per_call!r}")
    check(len(data.get("close_locality", [])) == 1, "no close_locality section")
    for c in data.get("close_locality", []):
        check_numbers("close_locality", c, ["pool_bytes", "close_at_once_cpu_us", "close_a_frame_later_cpu_us",
                                            "close_after_eviction_cpu_us", "close_on_other_cpu_cpu_us"])
        check(c.get("other_cpu") in (0, 1), f"close_locality: other_cpu must be 0 or 1: {c.get('other_cpu')!r}")
    check(len(data.get("call_cost", [])) == 1, "no call_cost section")
    for c in data.get("call_cost", []):
        check_numbers("call_cost", c, ["pool_bytes", "calls", "one_call_cpu_us", "split_calls_cpu_us", "separate_calls_cpu_us"])
        for name in ("cost_per_extra_call_us", "cost_per_split_us"):
            value = c.get(name)
            check(isinstance(value, (int, float)) and math.isfinite(value), f"call_cost: bad {name} {value!r}")
    check(len(data.get("frame_loop", [])) == 1, "no frame_loop section")
    for f in data.get("frame_loop", []):
        check_numbers("frame_loop", f, ["idle_frame_cpu_us"])
    check(len(data.get("overhead", [])) == 1, "no overhead section")
    for o in data.get("overhead", []):
        check_numbers("overhead", o, OVERHEAD_FIELDS)
        # Deterministic, so asserted: the queue allocates nothing per push/drain in steady state.
        check(o.get("allocations_per_push_and_drain") == 0, f"queue allocated in steady state: {o}")
    check(len(data.get("targets", [])) > 0, "no targets section")
    for t in data.get("targets", []):
        check(isinstance(t.get("target"), str) and t.get("met") in (0, 1), f"bad target row {t}")
    check_controls(data, tool_args)


# Targets read against a baseline, the field each reads, the baseline, and whether only a run with
# the probe has them.
CONTROLLED = (
    [("cpu queue / unmap-first", "cpu_per_pool_us", "unmap-first", False),
     ("teardown cpu queue / unmap-first", "teardown_cpu_per_pool_us", "unmap-first", False),
     ("probe p99.9 queue / unmap-first", "probe_p999_us", "unmap-first", True)]
    + [(f"probe mmap max {q} / thread-drop", "probe_mmap_max_us", "thread-drop", True)
       for q in ("queue+worker", "queue+worker/nice", "queue+worker/pause", "queue+worker-unmap")]
    + [(f"same, net of run-queue wait, {q}", "probe_mmap_net_max_us", "thread-drop", True)
       for q in ("queue+worker", "queue+worker/nice", "queue+worker/pause")])


def check_controls(data, tool_args):
    """Each target against a baseline carries its A/A control: that field of the baseline's second run
    over its first, at the size the targets are read at."""
    bursts = [r for r in data["rows"] if r["scenario"] == "burst"]
    size = 20736000 if any(r["pool_bytes"] == 20736000 for r in bursts) else bursts[0]["pool_bytes"]
    rows = {r["strategy"]: r for r in bursts if r["pool_bytes"] == size}
    targets = {t["target"]: t for t in data.get("targets", [])}
    for name, field, base, probed in CONTROLLED:
        expected = not (probed and "--no-probe" in tool_args)
        check((name in targets) == expected, f"target {name!r} {'missing' if expected else 'present without the probe'}")
        if name not in targets:
            continue
        got, again, first = targets[name].get("control"), rows[base + "/again"][field], rows[base][field]
        check(first > 0 and isinstance(got, (int, float)) and math.isclose(got, again / first, rel_tol=1e-6),
              f"target {name}: control {got!r}, {base}/again over {base} is {again!r} / {first!r}")
    known = {name for name, *_ in CONTROLLED}
    for name, t in targets.items():
        check("control" not in t or name in known, f"target {name} has a control but no baseline")


def check_stutter(data, svg_path):
    check_strategies("stutter", data["rows"], STUTTER_FIELDS, STRATEGIES)
    root = ET.parse(svg_path).getroot()
    titles = [t for t in root.iter("{http://www.w3.org/2000/svg}text") if t.get("font-weight") == "bold"]
    check(len(titles) == len(STRATEGIES), f"SVG has {len(titles)} panels, expected {len(STRATEGIES)}")
    bars = list(root.iter("{http://www.w3.org/2000/svg}rect"))
    check(len(bars) > 2 * len(STRATEGIES), f"SVG has only {len(bars)} rects")


def main():
    kind, tool, prefix, tool_args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    outputs = ["--csv", prefix + ".csv", "--json", prefix + ".json"]
    if kind == "stutter":
        outputs += ["--svg", prefix + ".svg"]
    run = subprocess.run([tool, *tool_args, *outputs], capture_output=True, text=True, timeout=280)
    sys.stdout.write(run.stdout)
    check(run.returncode == 0, f"{tool} exited with {run.returncode}: {run.stderr[-2000:]}")
    if run.returncode == 0:
        check("close-first" in run.stdout and "queue+worker-unmap" in run.stdout, "stdout table lacks strategies")
        with open(prefix + ".json") as f:
            data = json.load(f)
        check_numbers("machine", data["machine"], ["cpus"])
        machine = data["machine"]
        check(re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?|unknown", str(machine.get("source"))) is not None,
              f"machine.source is {machine.get('source')!r}, not a commit")
        check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", str(machine.get("date"))) is not None,
              f"machine.date is {machine.get('date')!r}, not UTC ISO 8601")
        settings = data.get("settings") or [{}]
        check_numbers("settings", settings[0], ["budget_us", "drain_pause_us", "max_step_deviations"] + (["max_step_us", "carry_model"] if kind == "teardown" else []))
        check_csv(prefix + ".csv", data["rows"])
        flag = "--max-step-deviations"
        wanted = float(tool_args[tool_args.index(flag) + 1]) if flag in tool_args else 2.0
        got = settings[0].get("max_step_deviations")
        check(got == wanted, f"settings.max_step_deviations is {got!r} for arguments {tool_args}")
        if kind == "teardown":
            carry = settings[0].get("carry_model")
            check(carry == int("--carry-model" in tool_args), f"settings.carry_model is {carry!r} for arguments {tool_args}")
            check_teardown(data, tool_args)
        else:
            check_stutter(data, prefix + ".svg")
    for message in failures:
        print("FAIL:", message)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
