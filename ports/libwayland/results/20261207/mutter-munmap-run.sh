#!/usr/bin/env bash
# One burst against Mutter (libwayland BUILD), every munmap of >= 1 MiB in Mutter traced by thread.
set -euo pipefail
build=$1 root=${ROOT:-/srv/lab-sid} rd=/run/lab/mm-$$ out=${OUT:-/tmp/mutter-diag}
mkdir -p "$out"
client=/src/du-build/examples/wayland/stress_client
rm -rf "$root$rd" && mkdir -p "$root$rd" && chmod 700 "$root$rd"
chroot $root /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin LANG=C.UTF-8 XDG_RUNTIME_DIR=$rd LD_LIBRARY_PATH=/opt/lab/wayland-$build \
    dbus-run-session -- mutter --headless --wayland --no-x11 --virtual-monitor 2880x1800 --wayland-display=lab-mutter >$out/mm-$build.log 2>&1 &
wrapper=$!
for i in $(seq 200); do [ -S "$root$rd/lab-mutter" ] && break; sleep 0.1; done
comp=$(pgrep -P $wrapper -x mutter | head -1); sleep 2
chroot $root /usr/bin/env -i XDG_RUNTIME_DIR=$rd WAYLAND_DISPLAY=lab-mutter timeout 30 $client --frames 5 >/dev/null 2>&1 || true
bpftrace "$(dirname "$0")/mutter-munmap.bt" $comp > $out/mm-$build.trace 2>&1 &
bt=$!; sleep 3
chroot $root /usr/bin/env -i XDG_RUNTIME_DIR=$rd WAYLAND_DISPLAY=lab-mutter timeout 120 $client --width 2880 --height 1800 --pool-mib 20 --burst 52 --resize-every 0 --frames 64 --linger 3 --prepare-ahead --json $rd/c.json >/dev/null 2>&1 || true
kill -INT $bt; wait $bt || true
echo "$build gap_max $(sed -n 's/^  "gap_max_ms": \([^,]*\),*$/\1/p' $root$rd/c.json)" | tee -a $out/mm-summary.txt
cat $out/mm-$build.trace | grep -v "^Attaching\|WARNING" | tee -a $out/mm-summary.txt
kill $comp; sleep 1; kill -9 $comp 2>/dev/null || true; pkill -P $wrapper 2>/dev/null || true; kill $wrapper 2>/dev/null || true; wait $wrapper 2>/dev/null || true
rm -rf "$root$rd"
