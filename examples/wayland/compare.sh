#!/usr/bin/env bash
# Side by side, in one run: the same stress_client against weston (headless, libwayland's wl_shm, so
# pools are torn down close-first inside request dispatch) and against shm_compositor in each mode.
# Prints the frame-callback gaps the client measured (what a user sees as stutter) and, for
# shm_compositor, its own worst frame, missed frames and drain p99.
#
#   examples/wayland/compare.sh [BUILD_DIR] [-- stress_client options]
#
# BUILD_DIR (default build/example) holds examples/wayland/{shm_compositor,stress_client}. The default
# client keeps 26 pools of 30 MiB alive and then destroys them together, over and over, for 10 s.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/example}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
client_args=("$@")
[ ${#client_args[@]} -gt 0 ] || client_args=(--burst 26 --resize-every 4 --duration 10)
bin=$build/examples/wayland
for program in shm_compositor stress_client; do
    [ -x "$bin/$program" ] || { echo "no $bin/$program: build it first (cmake --build $build --target $program)"; exit 1; }
done
command -v weston >/dev/null || { echo "weston is not installed (Debian: apt-get install weston)"; exit 1; }

work=$(mktemp -d)
weston_pid=
cleanup() {
    [ -n "$weston_pid" ] && kill "$weston_pid" 2>/dev/null && wait "$weston_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR=$work
chmod 700 "$work"

json_field() { sed -n "s/^  \"$2\": \([^,]*\),\{0,1\}$/\1/p" "$1"; }

run_weston() {
    weston --backend=headless-backend.so --socket=compare-weston --idle-time=0 >"$work/weston.log" 2>&1 &
    weston_pid=$!
    for _ in $(seq 100); do [ -S "$work/compare-weston" ] && break; sleep 0.1; done
    [ -S "$work/compare-weston" ] || { cat "$work/weston.log"; echo "weston did not start"; exit 1; }
    sleep 1  # let its shell client settle
    WAYLAND_DISPLAY=compare-weston "$bin/stress_client" "${client_args[@]}" --json "$work/weston.client.json" >/dev/null
    kill "$weston_pid"
    wait "$weston_pid" 2>/dev/null || true
    weston_pid=
}

run_shm_compositor() {
    "$bin/shm_compositor" --mode "$1" --socket "compare-$1" --json "$work/$1.server.json" \
        -- "$bin/stress_client" "${client_args[@]}" --json "$work/$1.client.json" >/dev/null 2>&1
}

echo "machine: $(nproc) cores, $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ); stress_client ${client_args[*]}"
run_weston
modes=(close-first unmap-first queue queue+worker queue+worker-unmap)
for mode in "${modes[@]}"; do run_shm_compositor "$mode"; done

printf '%-34s %8s %8s %8s %7s | %11s %7s %11s\n' "compositor" "gap p50" "gap p99" "gap max" "frames" \
    "worst frame" "missed" "drain p99"
row() {  # row <label> <client json> [server json]
    printf '%-34s %6s ms %6s ms %6s ms %7s' "$1" "$(json_field "$2" gap_p50_ms)" "$(json_field "$2" gap_p99_ms)" \
        "$(json_field "$2" gap_max_ms)" "$(json_field "$2" frames)"
    if [ -n "${3:-}" ]; then
        awk -v worst="$(json_field "$3" frame_time_max_us)" -v missed="$(json_field "$3" missed_frames)" \
            -v drain="$(json_field "$3" drain_p99_us)" 'BEGIN { printf " | %8.1f ms %7s %8.2f ms\n", worst / 1000, missed, drain / 1000 }'
    else
        printf ' | %11s %7s %11s\n' "-" "-" "-"
    fi
}
row "weston $(weston --version | cut -d' ' -f2) (headless)" "$work/weston.client.json"
for mode in "${modes[@]}"; do row "shm_compositor $mode" "$work/$mode.client.json" "$work/$mode.server.json"; done
