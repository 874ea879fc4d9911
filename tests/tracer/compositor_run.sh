#!/usr/bin/env bash
# The tracer against the project's own compositor: shm_compositor in each MODE given, the burst
# client of ports/README.md (52 pools of 19.8 MiB committed one per frame, then destroyed together),
# with tools/shm-teardown-trace attached and without it, interleaved, REPS times. Prints one line
# per run: the client's largest frame-callback gap, the compositor's worst frame, the main thread's
# longest stretch that ended while the client still drew, and the tracer's bursts. In $OUT, per run:
# the tracer's JSON (<run>.trace.jsonl) and event lines (.trace.raw), and the client's and the
# compositor's --json reports. Needs root, bpftrace and tracefs.
#
#   tests/tracer/compositor_run.sh BUILD_DIR [REPS] [MODE...]     (3; close-first queue+worker)
#
# BUILD_DIR holds examples/wayland/{shm_compositor,stress_client} (a Release build). The compositor
# serves without a command, so the tracer can attach before the client connects; each is stopped
# by its pid (the client has ended by then, the compositor gets SIGINT and writes its report).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
reps=${2:-3}
shift $(($# >= 2 ? 2 : 1))
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(close-first queue+worker)
bin=$build/examples/wayland
tracer=$root/tools/shm-teardown-trace
client_args=(--width 2880 --height 1800 --pool-mib 20 --burst 52 --resize-every 0 --frames 64 --prepare-ahead)
out=${OUT:-$(mktemp -d /tmp/tracer-runs.XXXXXX)}
mkdir -p "$out"

work=$(mktemp -d)
compositor_pid= tracer_pid=
cleanup() {
    [ -n "$tracer_pid" ] && kill -INT "$tracer_pid" 2>/dev/null && wait "$tracer_pid" 2>/dev/null
    [ -n "$compositor_pid" ] && kill -TERM "$compositor_pid" 2>/dev/null && wait "$compositor_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR=$work
chmod 700 "$work"
json_field() { sed -n "s/^  \"$2\": \([^,]*\),\{0,1\}$/\1/p" "$1"; }

wait_for() {  # wait_for <seconds> <command...>
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.1
    done
}

monotonic_ns() { python3 -c 'import time; print(time.monotonic_ns())'; }
no_memfd_mappings() { ! grep -q 'memfd:' "/proc/$1/maps"; }

one_run() {  # one_run <mode> <traced: yes|no> <label>
    local mode=$1 traced=$2 label=$3 socket=trace-$3
    "$bin/shm_compositor" --mode "$mode" --socket "$socket" --json "$out/$label.server.json" >"$out/$label.server.log" 2>&1 &
    compositor_pid=$!
    wait_for 20 test -S "$work/$socket" || { cat "$out/$label.server.log"; echo "shm_compositor did not start"; exit 1; }
    if [ "$traced" = yes ]; then
        "$tracer" --json --raw "$out/$label.trace.raw" "$compositor_pid" >"$out/$label.trace.jsonl" 2>"$out/$label.trace.err" &
        tracer_pid=$!
        wait_for 90 grep -qs tracing "$out/$label.trace.err" || { cat "$out/$label.trace.err"; echo "the tracer did not start"; exit 1; }
    fi
    local load
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    local client_end
    WAYLAND_DISPLAY=$socket "$bin/stress_client" "${client_args[@]}" --json "$out/$label.client.json" >"$out/$label.client.log"
    client_end=$(monotonic_ns)
    # Deferred teardown (queue modes) takes a second or more on a loaded 2-core machine: wait for
    # the compositor's last memfd mapping to go, then for the tracer's gap to pass.
    wait_for 20 no_memfd_mappings "$compositor_pid" || echo "warning: memfd mappings left after 20 s"
    sleep 0.5
    if [ -n "$tracer_pid" ]; then
        kill -INT "$tracer_pid"
        wait "$tracer_pid"
        tracer_pid=
    fi
    kill -INT "$compositor_pid"
    wait "$compositor_pid" || true
    compositor_pid=
    printf '%-26s traced %-3s load %-14s gap max %7s ms, worst frame %7.1f ms' "$label" "$traced" "$load" \
        "$(json_field "$out/$label.client.json" gap_max_ms)" \
        "$(awk -v us="$(json_field "$out/$label.server.json" frame_time_max_us)" 'BEGIN { print us / 1000 }')"
    if [ "$traced" = yes ]; then
        python3 - "$out/$label.trace.jsonl" "$out/$label.trace.raw" "$client_end" <<'PY'
import json, sys
# After the client has gone, shm_compositor drains on its idle timer: the stretches that frames
# felt are those that ended while the client still drew.
drawn = [((int(e) - int(s)) / 1e6, int(w) / 1e6)
         for kind, s, e, w in (l.split() for l in open(sys.argv[2]) if l.startswith("S ")) if int(e) <= int(sys.argv[3])]
longest, wait = max(drawn, default=(0, 0))
print(f"; main longest while the client drew {longest:.2f} ms, {wait:.2f} of it waiting for a CPU"
      f" ({len(drawn)} stretches)", end="")
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] == "burst":
        threads = ", ".join(f"{t['name']}: {t['pools']} pools, munmap {t['munmap_ms']:.1f} ms/{t['munmap_calls']},"
                            f" close {t['close_ms']:.1f} ms/{t['close_calls']}" for t in r["threads"])
        print(f"\n    burst {r['n']}: {r['pools']} pools {r['bytes'] / 2**30:.3f} GiB (+{r['small_pools']} small),"
              f" main {r['main_thread_pools']} other {r['other_thread_pools']}, main longest {r['main_longest_ms']:.2f} ms"
              f" ({r['main_stretches']} stretches), {r['duration_ms']:.1f} ms; {threads}", end="")
PY
    fi
    echo
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -r)," \
    "$(date -u +%Y-%m-%dT%H:%MZ); runs in $out"
for rep in $(seq "$reps"); do
    for mode in "${modes[@]}"; do
        one_run "$mode" yes "$mode-traced-$rep"
        one_run "$mode" no "$mode-plain-$rep"
    done
done
