#!/usr/bin/env bash
# Traces pools.c under trace_teardown.bt and prints one table: where the pages
# of 40 dead 19.8 MiB memfd pools are freed, closed-first against unmapped-first.
# Then runs pools.c again untraced, for call durations without the per-folio
# probe's cost. Needs root, tracefs, bpftrace and a C compiler.
# Usage: tools/kernel-check/run.sh [pools-per-phase] [rounds]   (40 2 by default)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=${1:-40} rounds=${2:-2}

die() { echo "kernel-check: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (bpftrace attaches tracepoints)"
command -v bpftrace >/dev/null || die "bpftrace is missing (Debian: apt-get install bpftrace)"
cc=$(command -v cc || command -v gcc || true)
[ -n "$cc" ] || die "no C compiler (cc or gcc)"
tracefs=/sys/kernel/tracing
if [ ! -d "$tracefs/events" ]; then
    mount -t tracefs nodev "$tracefs" 2>/dev/null ||
        die "tracefs is not mounted at $tracefs and mounting it failed (mount -t tracefs nodev $tracefs)"
fi
for ev in filemap/mm_filemap_delete_from_page_cache mmap_lock/mmap_lock_acquire_returned \
          mmap_lock/mmap_lock_released syscalls/sys_enter_munmap syscalls/sys_enter_close; do
    [ -d "$tracefs/events/$ev" ] || die "this kernel has no tracepoint $ev"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cc" -O2 -Wall -o "$tmp/pools" "$here/pools.c"

echo "kernel $(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "$n pools of 20736000 bytes a phase, $rounds rounds; $(date -u +%Y-%m-%dT%H:%MZ)"
echo
# bpftrace warns about RLIMIT_MEMLOCK on some versions; harmless.
bpftrace -c "$tmp/pools $n $rounds" "$here/trace_teardown.bt" >"$tmp/trace.txt" 2>"$tmp/trace.err" ||
    { cat "$tmp/trace.err" >&2; die "bpftrace failed"; }
"$tmp/pools" "$n" "$rounds" >"$tmp/untraced.txt"

awk -v untraced="$tmp/untraced.txt" '
    # caller-timed lines, traced (from bpftrace -c) and untraced
    / caller-timed: / { traced_munmap[$1] = $4; traced_close[$1] = $7; if (!seen[$1]++) order[++np] = $1; next }
    match($0, /^@[a-z_]+\[[^]]+\]: [0-9]+$/) {
        name = substr($1, 2, index($1, "[") - 2)
        key = substr($1, index($1, "[") + 1); key = substr(key, 1, length(key) - 2)
        v[name, key] = $2
    }
    function ms(x) { return sprintf("%.1f", x / 1e6) }
    function row(label, name, conv,   i, p, s) {
        s = sprintf("%-44s", label)
        for (i = 1; i <= np; i++) { p = order[i]; s = s sprintf(" %12s", conv ? ms(v[name, p]) : v[name, p] + 0) }
        print s
    }
    END {
        while ((getline line < untraced) > 0) { split(line, f, " +"); un_munmap[f[1]] = f[4]; un_close[f[1]] = f[7] }
        s = sprintf("%-44s", "phase"); for (i = 1; i <= np; i++) s = s sprintf(" %12s", order[i]); print s
        row("munmap calls", "munmap_calls", 0)
        row("mmap_lock held in munmap, ms", "lock_held_in_munmap_ns", 1)
        row("  of which for write, ms", "lock_write_in_munmap_ns", 1)
        row("munmap syscall (enter to exit), ms", "munmap_syscall_ns", 1)
        row("munmap exit to next syscall, ms", "after_munmap_to_next_syscall_ns", 1)
        row("close syscall (enter to exit), ms", "close_syscall_ns", 1)
        row("mmap_lock acquires inside close", "lock_acquires_in_close", 0)
        row("mmap_lock acquires after munmap exit", "lock_acquires_after_munmap", 0)
        row("page-cache deletions (folios)", "deleted_folios", 0)
        row("  pages", "deleted_pages", 0)
        row("  inside munmap syscall", "del_in_munmap", 0)
        row("  inside close syscall", "del_in_close", 0)
        row("  after munmap exit (task work)", "del_after_munmap", 0)
        row("  after close exit (task work)", "del_after_close", 0)
        row("  elsewhere", "del_elsewhere", 0)
        row("  while mmap_lock held", "del_under_lock", 0)
        s = sprintf("%-44s", "munmap as the caller times it, ms (traced)"); for (i = 1; i <= np; i++) s = s sprintf(" %12s", traced_munmap[order[i]]); print s
        s = sprintf("%-44s", "close as the caller times it, ms (traced)"); for (i = 1; i <= np; i++) s = s sprintf(" %12s", traced_close[order[i]]); print s
        s = sprintf("%-44s", "munmap as the caller times it, ms (untraced)"); for (i = 1; i <= np; i++) s = s sprintf(" %12s", un_munmap[order[i]]); print s
        s = sprintf("%-44s", "close as the caller times it, ms (untraced)"); for (i = 1; i <= np; i++) s = s sprintf(" %12s", un_close[order[i]]); print s
    }' "$tmp/trace.txt"
