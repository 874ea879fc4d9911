#!/bin/bash
# fd-check.sh: the compositor's open descriptors while a client holds many small wl_shm pools.
#
#   fd-check.sh [--pools N] [--bytes B] NAME=LIBDIR [NAME=LIBDIR ...]
#
# For each LIBDIR (a directory holding a libwayland-server.so.0), starts shm-pool-server with it
# through LD_LIBRARY_PATH, checks in /proc/PID/maps that it loaded that one, and counts
# /proc/PID/fd and the memfd mappings in /proc/PID/maps: before the client, while
# `shm-pool-client hold N B` holds its pools (5,000 of 4 KiB by default: Xwayland's pixmaps are a
# pool each), and 3 s after it left. The tools are built next to this script, in $TOOLS_DIR
# (default: ./build), by `make -C ports/libwayland/tools` or by hand.
set -euo pipefail

pools=5000
bytes=4096
tools=${TOOLS_DIR:-$(dirname "$0")/build}
while [[ $# -gt 0 && $1 == --* ]]; do
	case $1 in
	--pools) pools=$2; shift 2 ;;
	--bytes) bytes=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
[[ $# -gt 0 ]] || { echo "usage: $0 [--pools N] [--bytes B] NAME=LIBDIR..." >&2; exit 2; }

count_fds() { ls "/proc/$1/fd" | wc -l; }
count_memfd_maps() { grep -c 'memfd:shm-pool-client' "/proc/$1/maps" || true; }

runtime=$(mktemp -d)
server_pid= client_pid=
# A client the compositor refused (out of descriptors) leaves both behind otherwise.
cleanup() {
	[[ -z $client_pid ]] || kill "$client_pid" 2>/dev/null || true
	[[ -z $server_pid ]] || kill "$server_pid" 2>/dev/null || true
	rm -rf "$runtime"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR=$runtime

printf '%-18s %8s %8s %8s %8s %8s %12s\n' build fds_idle fds_held fds_after maps_held maps_after fds_held-idle
# Waits up to 10 s for a line in a file, then prints its last field.
wait_for_line() {
	for _ in $(seq 100); do
		if [[ -s $1 ]]; then awk '{ print $NF; exit }' "$1"; return; fi
		sleep 0.1
	done
	echo "no output in $1" >&2; exit 1
}

for spec in "$@"; do
	name=${spec%%=*}
	libdir=$(realpath "${spec#*=}")
	LD_LIBRARY_PATH=$libdir "$tools/shm-pool-server" "fd-check-$name" > "$runtime/server.out" &
	server_pid=$!
	pid=$(wait_for_line "$runtime/server.out")
	if ! grep -q "$libdir/libwayland-server.so" "/proc/$pid/maps"; then
		echo "$name: the server did not load $libdir/libwayland-server.so.0" >&2
		kill "$pid"; exit 1
	fi
	idle=$(count_fds "$pid")

	rm -f "$runtime/client.in" && mkfifo "$runtime/client.in"
	WAYLAND_DISPLAY=fd-check-$name "$tools/shm-pool-client" hold "$pools" "$bytes" \
		< "$runtime/client.in" > "$runtime/client.out" &
	client_pid=$!
	exec {client_in}> "$runtime/client.in"
	held_pools=$(wait_for_line "$runtime/client.out")
	held=$(count_fds "$pid")
	maps_held=$(count_memfd_maps "$pid")
	exec {client_in}>&-
	wait "$client_pid"
	client_pid=
	sleep 3
	after=$(count_fds "$pid")
	maps_after=$(count_memfd_maps "$pid")

	kill -TERM "$pid"
	wait "$server_pid"
	server_pid=
	rm -f "$runtime/server.out" "$runtime/client.out"
	printf '%-18s %8s %8s %8s %8s %8s %12s\n' "$name" "$idle" "$held" "$after" "$maps_held" "$maps_after" \
		$((held - idle))
	[[ $held_pools == "$pools" ]] || { echo "$name: the client held $held_pools pools" >&2; exit 1; }
done
