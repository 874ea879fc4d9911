#!/usr/bin/env bash
# Runs shm_compositor with one client and checks its --json report; the wayland ctest tests use it.
#
#   run_test.sh simple-shm|stress|shrink <shm_compositor> [compositor options] -- <client> [args...]
#
# Every kind checks that the client connected, that every pool the client created was reclaimed with
# no teardown error, and that the compositor's descriptors and file mappings (pools are memfd
# mappings) are back to what they were before the client came. Then:
#   simple-shm  the client (weston-simple-shm, which only exits on a signal) was configured and drew
#               frames: 10 buffers read means 10 frame callbacks answered; no protocol error
#   stress      the client exited 0 (no protocol error); the drain figures are printed
#   shrink      exactly one read hit SIGBUS and the compositor went on (the client exits 0 only if it
#               got wl_shm.error.invalid_fd and then drew frames on a new connection)
# XDG_RUNTIME_DIR is unset, so the compositor makes its own; `timeout` ends a hung run.
set -euo pipefail
kind=$1
compositor=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

status=0
env -u XDG_RUNTIME_DIR -u WAYLAND_DISPLAY timeout --kill-after=5 90 \
    "$compositor" --json "$work/report.json" "$@" || status=$?
[ -s "$work/report.json" ] || { echo "FAIL: no report (exit status $status)"; exit 1; }
cat "$work/report.json"

field() { sed -n "s/^  \"$1\": \(.*\),\{0,1\}$/\1/p" "$work/report.json" | sed 's/,$//'; }
failures=0
expect() {  # expect <description> <test expression...>
    local what=$1
    shift
    if ! "$@"; then
        echo "FAIL: $what"
        failures=$((failures + 1))
    fi
}

expect "compositor exit status 0 (was $status)" test "$status" -eq 0
expect "a client connected" test "$(field clients)" -ge 1
expect "pools were created" test "$(field pools_created)" -ge 1
expect "every pool reclaimed ($(field pools_reclaimed) of $(field pools_created))" \
    test "$(field pools_reclaimed)" -eq "$(field pools_created)"
expect "no teardown error" test "$(field teardown_errors)" -eq 0
expect "descriptors back to start ($(field fds_start) -> $(field fds_end))" test "$(field fds_start)" -eq "$(field fds_end)"
expect "file mappings back to start ($(field file_maps_start) -> $(field file_maps_end))" \
    test "$(field file_maps_start)" -eq "$(field file_maps_end)"

case $kind in
simple-shm)
    expect "at least 10 frames drawn and answered (buffers_read $(field buffers_read))" test "$(field buffers_read)" -ge 10
    expect "no protocol error" test "$(field protocol_errors_sigbus)" -eq 0
    expect "ended at --duration, the client still running" test "$(field ended_at_duration)" = true
    ;;
stress)
    expect "the stress client exited 0 (status $(field client_status))" test "$(field client_status)" = 0
    expect "no protocol error" test "$(field protocol_errors_sigbus)" -eq 0
    expect "drains ran" test "$(field drains)" -ge 1
    echo "drain p50 $(field drain_p50_us) us, p99 $(field drain_p99_us) us, max $(field drain_max_us) us;" \
        "worst frame $(field frame_time_max_us) us, $(field missed_frames) missed"
    ;;
shrink)
    expect "one read stopped by SIGBUS ($(field protocol_errors_sigbus))" test "$(field protocol_errors_sigbus)" -eq 1
    expect "the client saw the protocol error and drew on a new connection (status $(field client_status))" \
        test "$(field client_status)" = 0
    expect "two connections" test "$(field clients)" -eq 2
    ;;
*)
    echo "unknown kind $kind"
    exit 2
    ;;
esac
[ "$failures" -eq 0 ] && echo "PASS" || exit 1
