#!/usr/bin/env bash
# The Debian packages (debian/) built and tested in a fresh Debian root, made with debootstrap as
# 70-fresh-root.sh makes its own, from a clean clone of HEAD: README.md's build line verbatim (the
# build-dependencies debian/control names, then dpkg-buildpackage -us -uc -b), lintian with no error
# or warning, README.md's install line (both packages), then autopkgtest with the root as its testbed
# (the null runner), which runs debian/tests/: the C and C++ consumers, and the installed tracer
# against a memfd workload. Fails when any step fails. The packages, lintian's output and
# autopkgtest's logs are kept in build/debian-package/SUITE/.
#
# DU_DEBIAN_SUITE=trixie (default bookworm) does the same on another release.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "debian-package: needs root (debootstrap, mount, chroot)" >&2; exit 1; }

# Taken from README.md at run time, so the stage proves the lines a reader copies.
build_line="$(.ci/readme-line 'sudo apt-get build-dep \./ && dpkg-buildpackage .*')"
install_line="$(.ci/readme-line 'sudo apt-get install \.\./libdeferred-unmap-dev_.*\.deb')"

suite="${DU_DEBIAN_SUITE:-bookworm}"
logs="$PWD/build/debian-package/$suite"
rm -rf "$logs"
mkdir -p "$logs"
root="$(mktemp -d "${TMPDIR:-/tmp}/du-debian-package.XXXXXX")"
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
        echo "debian-package: something is still mounted under $root; left it in place" >&2
        status=1
    fi
    exit "$status"
}
trap cleanup EXIT

# Runs a command in the root with the environment a login there would have, not this shell's.
in_root() {
    chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

# Runs "$@" with its output in $logs/$1.log, printing the log's end if it fails.
quietly() {
    local log="$logs/$1.log"
    shift
    if ! "$@" >"$log" 2>&1; then
        echo "debian-package: failed: $*; the end of $log:" >&2
        tail -n 40 "$log" >&2
        return 1
    fi
}

# Times one step: "debian-package: WHAT: N s".
step() {
    local what=$1 start=$SECONDS
    shift
    "$@"
    echo "debian-package: $what: $((SECONDS - start)) s"
}

total_start=$SECONDS
step "debootstrap minbase $suite" quietly debootstrap debootstrap --variant=minbase "$suite" "$root"

# /proc and /sys for the builds and the tracer (BTF), /dev and /dev/pts for apt and dpkg, a /dev/shm of
# the root's own. The /dev bind is made a slave first: where the host's /dev is a shared mount
# (systemd), the tmpfs on $root/dev/shm would otherwise also cover the host's /dev/shm.
for fs in proc sys dev; do mkdir -p "$root/$fs"; done
# One statement each: a failing mount ends the script (set -e) before it is listed for unmounting.
mount -t proc proc "$root/proc"
mounted+=("$root/proc")
mount -t sysfs sysfs "$root/sys"
mounted+=("$root/sys")
mount --bind /dev "$root/dev"
mounted+=("$root/dev")
mount --make-slave "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mounted+=("$root/dev/pts")
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
mounted+=("$root/dev/shm")
# The tracer's autopkgtest needs tracefs; where the kernel has none it reports itself skipped, and
# only then is a skipped test accepted below.
tracefs=yes
if mount -t tracefs nodev "$root/sys/kernel/tracing" 2>/dev/null; then
    mounted+=("$root/sys/kernel/tracing")
else
    tracefs=no
    echo "debian-package: no tracefs on this kernel; the tracer's autopkgtest will be skipped" >&2
fi

# A clone holds what is committed and nothing a build here left behind.
src=/src/deferred-unmap
mkdir -p "$root/src"
git clone -q --no-hardlinks "$PWD" "$root$src"
git -C "$root$src" checkout -q --detach "$(git rev-parse HEAD)"

# sudo for the README's lines; lintian and autopkgtest for the checks. The root's apt answers yes
# (the README's lines ask) and takes no Recommends (fewer packages to fetch).
printf 'APT::Get::Assume-Yes "true";\nAPT::Install-Recommends "false";\n' >"$root/etc/apt/apt.conf.d/90ci"
step "apt-get install sudo lintian autopkgtest" quietly packages in_root sh -c \
    "apt-get update -qq && apt-get install -qq sudo lintian autopkgtest"

# The README's build line: build-dep installs what debian/control names (and build-essential), so a
# missing build-dependency fails here.
step "$build_line" quietly build in_root bash -c "cd $src && $build_line"
cp "$root/src/"*.deb "$root/src/"*.changes "$root/src/"*.buildinfo "$logs/"

# As nobody: lintian warns when run as root. --fail-on makes a warning fail the stage, not only an
# error; info and pedantic tags are shown and fail nothing.
step "lintian" quietly lintian in_root sh -c \
    "runuser -u nobody -- env HOME=/tmp \
        lintian --fail-on error,warning --display-info --pedantic /src/*.changes"
cat "$logs/lintian.log"

# The README's install line: both packages at once, their Depends resolved from the archive.
step "$install_line" quietly install in_root bash -c "cd $src && $install_line"

# The null runner makes this root the testbed: autopkgtest installs the built .debs and each test's
# Depends with apt, then runs debian/tests/ from a copy of the source tree. The tracer's test declares
# isolation-machine (it loads BPF programs into the running kernel), which trixie's null runner
# (autopkgtest 5.49) does not offer here: it skipped the test. This root is thrown away and runs on
# the kernel the test needs, the case autopkgtest(1) gives for --ignore-restrictions. Exit status 2
# means a test was skipped: accepted only without tracefs.
run_autopkgtest() {
    local status=0
    in_root sh -c "autopkgtest --ignore-restrictions=isolation-machine --output-dir /src/autopkgtest \
        /src/*.deb $src/ -- null" || status=$?
    cp -r "$root/src/autopkgtest" "$logs/" 2>/dev/null || true
    if [ "$status" -eq 2 ] && [ "$tracefs" = no ]; then
        return 0
    fi
    return "$status"
}
step "autopkgtest (null runner)" quietly autopkgtest run_autopkgtest
cat "$logs/autopkgtest/summary"
echo "debian-package: $suite: packages built, lintian clean, autopkgtest passed" \
    "in $((SECONDS - total_start)) s"
