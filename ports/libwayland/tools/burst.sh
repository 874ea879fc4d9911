#!/bin/bash
# burst.sh: how long the compositor's thread stops when a client destroys many big pools at once.
#
#   burst.sh [--reps N] [--pools P] NAME=LIBDIR [NAME=LIBDIR ...]
#
# N times (default 3), for each LIBDIR in turn (interleaved, so a host that slows down during the
# run hurts every build alike): shm-pool-server with that libwayland-server.so.0 (checked in
# /proc/PID/maps), and `shm-pool-client burst P 2880 1800` (52 pools of 19.8 MiB by default, one
# read per frame, then all destroyed in one flush). Prints the server's report per run:
# the median time between its 60 Hz frames, the longest from the first dead pool on, and the
# longest dispatch that destroyed pools (from its first dead pool until its idle sources ran), the
# pools still mapped when the client exits (2 s after its burst) and how long after that the last
# went (polled every 0.1 s, up to 10 s).
# Tools as in fd-check.sh ($TOOLS_DIR, default ./build next to this script).
set -euo pipefail

reps=3
pools=52
tools=${TOOLS_DIR:-$(dirname "$0")/build}
while [[ $# -gt 0 && $1 == --* ]]; do
	case $1 in
	--reps) reps=$2; shift 2 ;;
	--pools) pools=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
[[ $# -gt 0 ]] || { echo "usage: $0 [--reps N] [--pools P] NAME=LIBDIR..." >&2; exit 2; }

runtime=$(mktemp -d)
server_pid=
cleanup() {
	[[ -z $server_pid ]] || kill "$server_pid" 2>/dev/null || true
	rm -rf "$runtime"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR=$runtime

for rep in $(seq "$reps"); do
	for spec in "$@"; do
		name=${spec%%=*}
		libdir=$(realpath "${spec#*=}")
		rm -f "$runtime/server.out"
		LD_LIBRARY_PATH=$libdir "$tools/shm-pool-server" "burst-$name" > "$runtime/server.out" &
		server_pid=$!
		for _ in $(seq 100); do grep -q '^ready' "$runtime/server.out" 2>/dev/null && break; sleep 0.1; done
		if ! grep -q "$libdir/libwayland-server.so" "/proc/$server_pid/maps"; then
			echo "$name: the server did not load $libdir/libwayland-server.so.0" >&2
			exit 1
		fi
		WAYLAND_DISPLAY=burst-$name "$tools/shm-pool-client" burst "$pools" 2880 1800
		# The client left 2 s after its burst: how much longer until every pool is unmapped
		maps=$(grep -c 'memfd:shm-pool-client' "/proc/$server_pid/maps" || true)
		waited=0
		while [[ $waited -lt 100 ]] && grep -q 'memfd:shm-pool-client' "/proc/$server_pid/maps"; do
			sleep 0.1
			waited=$((waited + 1))
		done
		kill -TERM "$server_pid"
		wait "$server_pid"
		server_pid=
		echo "rep $rep $name $(tail -n 1 "$runtime/server.out") memfd_maps_at_exit $maps" \
			"unmapped_within_s $(printf '%d.%d' $((waited / 10)) $((waited % 10)))"
	done
done
