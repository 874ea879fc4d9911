#!/usr/bin/env bash
# What the tracer costs the thread that frees the pages: pool_workload tears down POOLS memfds of
# BYTES closed first on its main thread (the pages freed there, as libwayland and KWin do), REPS
# times each, interleaved: untraced ("none"); with a do-nothing program on the same tracepoint
# ("attached": what attaching alone costs, a filter that never matches); and under
# tools/shm-teardown-trace ("tool"). Prints the teardown's wall and CPU time (all threads) per run.
# With --bpf-stats it also sets kernel.bpf_stats_enabled for the tool's runs (and restores it), and
# prints each BPF program's runs and mean run time.
#
#   tests/tracer/workload_overhead.sh WORKLOAD [REPS] [POOLS] [BYTES] [--bpf-stats]
#                                      (5 52 20971520: 52 pools of 20 MiB, the burst client's)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stats=no
args=()
for arg in "$@"; do [ "$arg" = --bpf-stats ] && stats=yes || args+=("$arg"); done
workload=${args[0]:?usage: workload_overhead.sh WORKLOAD [REPS] [POOLS] [BYTES] [--bpf-stats]}
reps=${args[1]:-5} pools=${args[2]:-52} bytes=${args[3]:-20971520}
work=$(mktemp -d)
tracer_pid= workload_pid=
saved_stats=$(cat /proc/sys/kernel/bpf_stats_enabled)
cleanup() {
    [ -n "$tracer_pid" ] && kill -INT "$tracer_pid" 2>/dev/null && wait "$tracer_pid" 2>/dev/null
    [ -n "$workload_pid" ] && kill "$workload_pid" 2>/dev/null && wait "$workload_pid" 2>/dev/null
    echo "$saved_stats" >/proc/sys/kernel/bpf_stats_enabled
    rm -rf "$work"
}
trap cleanup EXIT
printf '%s\n' 'BEGIN { printf("R\n"); }' \
    'tracepoint:filemap:mm_filemap_delete_from_page_cache /pid == 0/ { @n = count(); }' >"$work/attached.bt"

wait_for() {  # wait_for <file> <word>
    for _ in $(seq 900); do grep -qs "$2" "$1" && return 0; sleep 0.1; done
    echo "no '$2' in $1"; exit 1
}

bpf_prog_stats() {  # bpf_prog_stats <bpftrace pid>: every program that ran, busiest first
    for fd in /proc/"$1"/fdinfo/*; do
        awk '/^run_time_ns|^run_cnt/ { v[$1] = $2 }
             END { if (v["run_cnt:"] > 0) printf "    bpf program: %d runs, mean %.0f ns, %.1f ms\n",
                   v["run_cnt:"], v["run_time_ns:"] / v["run_cnt:"], v["run_time_ns:"] / 1e6 }' "$fd" 2>/dev/null || true  # a descriptor may close meanwhile
    done | sort -k3 -n -r | awk "NR <= 3"
}

one_run() {  # one_run none|attached|tool
    rm -f "$work/in"
    mkfifo "$work/in"
    "$workload" "$pools" "$bytes" main <"$work/in" >"$work/out" &
    workload_pid=$!
    exec 3>"$work/in"
    wait_for "$work/out" ready
    local bpftrace_pid=
    case $1 in
    attached)
        bpftrace -q --no-warnings "$work/attached.bt" >"$work/trace" 2>/dev/null &
        tracer_pid=$! bpftrace_pid=$!
        wait_for "$work/trace" R ;;
    tool)
        "$root/tools/shm-teardown-trace" "$workload_pid" >"$work/trace" 2>"$work/trace.err" &
        tracer_pid=$!
        wait_for "$work/trace.err" tracing
        bpftrace_pid=$(pgrep -P "$tracer_pid" -x bpftrace) ;;
    esac
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo go >&3
    exec 3>&-
    # Read while the workload still sits in its closing poll(): the tool ends itself, and detaches
    # its programs, once the workload has exited.
    wait_for "$work/out" done
    if [ "$stats" = yes ] && [ "$1" = tool ]; then bpf_prog_stats "$bpftrace_pid"; fi
    wait "$workload_pid"
    workload_pid=
    if [ -n "$tracer_pid" ]; then kill -INT "$tracer_pid"; wait "$tracer_pid" || true; tracer_pid=; fi
    printf '%-9s load %-5s %s\n' "$1" "$load" "$(sed -n 's/^done //p' "$work/out")"
    if [ "$1" = tool ]; then sed -n 's/^summary: /    tracer: /p' "$work/trace"; fi
}

[ "$stats" = yes ] && echo 1 >/proc/sys/kernel/bpf_stats_enabled
echo "$pools pools of $bytes bytes closed first; $(nproc) cores, $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"
for _ in $(seq "$reps"); do
    for mode in none attached tool; do one_run "$mode"; done
done
