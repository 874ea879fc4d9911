#!/usr/bin/env bash
# The README's two lines, verbatim, on a fresh machine: a minimal Debian bookworm made with
# debootstrap, given only what a new machine starts with (build-essential, cmake, git, python3) and a
# clean clone of this checkout's HEAD, then entered with chroot. The demo line must work with those
# alone; the test line must install the rest itself. Fails when either line fails.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "fresh-root: needs root (debootstrap, mount, chroot)" >&2; exit 1; }

# Taken from README.md at run time, so the stage proves the lines a reader copies.
demo_line="$(.ci/readme-line 'cmake -S \. -B build/example .*/01_deferred_pools')"
test_line="$(.ci/readme-line '.*cmake --workflow --preset test')"

logs="$PWD/build/fresh-root"
mkdir -p "$logs"
root="$(mktemp -d "${TMPDIR:-/tmp}/du-fresh-root.XXXXXX")"
chmod 755 "$root"  # it becomes /: apt's _apt user must be able to walk into it
mounted=()

# Unmounts before deleting, newest first, and deletes only when nothing is left mounted: a delete that
# crossed into a bind mount would empty the host's /dev. --one-file-system guards the same again.
cleanup() {
    local status=$? busy=0 i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount --lazy "${mounted[i]}" || busy=1
    done
    if [ "$busy" -eq 0 ] && ! grep -qF " $root/" /proc/mounts; then
        rm -rf --one-file-system "$root"
    else
        echo "fresh-root: something is still mounted under $root; left it in place" >&2
        status=1
    fi
    exit "$status"
}
trap cleanup EXIT

# Runs a command in the root with the environment a login there would have, not this shell's.
in_root() {
    chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

# Runs "$@" with its output in $logs/$1.log, printing the log's end if it fails.
quietly() {
    local log="$logs/$1.log"
    shift
    if ! "$@" >"$log" 2>&1; then
        echo "fresh-root: failed: $*; the end of $log:" >&2
        tail -n 40 "$log" >&2
        return 1
    fi
}

SECONDS=0
quietly debootstrap debootstrap --variant=minbase bookworm "$root"
echo "fresh-root: debootstrap minbase bookworm: ${SECONDS} s"

# /proc for the tests (they compare /proc/self/maps and /proc/self/fd), /sys for the benchmarks' THP
# policy, /dev and /dev/pts for apt and dpkg.
for fs in proc sys dev; do mkdir -p "$root/$fs"; done
# One statement each: a failing mount ends the script (set -e) before it is listed for unmounting.
mount -t proc proc "$root/proc"
mounted+=("$root/proc")
mount -t sysfs sysfs "$root/sys"
mounted+=("$root/sys")
mount --bind /dev "$root/dev"
mounted+=("$root/dev")
mount --bind /dev/pts "$root/dev/pts"
mounted+=("$root/dev/pts")

SECONDS=0
quietly packages in_root env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update -qq && apt-get install -y -qq --no-install-recommends build-essential cmake git python3'
echo "fresh-root: build-essential, cmake, git, python3: ${SECONDS} s"

# A clone holds what is committed and nothing a build here left behind.
mkdir -p "$root/src"
git clone -q --no-hardlinks "$PWD" "$root/src/deferred_unmap"
git -C "$root/src/deferred_unmap" checkout -q --detach "$(git rev-parse HEAD)"

for line in "$demo_line" "$test_line"; do
    echo "== in the fresh root: $line"
    SECONDS=0
    in_root bash -c "cd /src/deferred_unmap && $line" || {
        status=$?
        echo "fresh-root: this README line failed (exit $status) in a fresh root: $line" >&2
        exit "$status"
    }
    echo "fresh-root: ${SECONDS} s"
done
echo "fresh-root: both README lines passed"
