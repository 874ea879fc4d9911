#!/usr/bin/env bash
# Mutter 51 on BUILD's libwayland-server (the lab's /opt/lab/wayland-BUILD) with the lab's burst
# client in the sid root, gap.bt on it. Root; the sid root of ports/lab.sh, tracefs mounted.
#   [OUT=DIR] run.sh BUILD
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-ours} root=/srv/lab-sid rd=/run/lab/md-$$ out=${OUT:-/tmp/mutter-diag}; mkdir -p "$out"
rm -rf $root$rd && mkdir -p $root$rd && chmod 700 $root$rd
client=(/src/du-build/examples/wayland/stress_client --width 2880 --height 1800 --pool-mib 20 --burst 52 --resize-every 0 --frames 64 --linger 3 --prepare-ahead --json $rd/client.json)
chroot $root /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 XDG_RUNTIME_DIR=$rd \
    LD_LIBRARY_PATH=/opt/lab/wayland-$build dbus-run-session -- mutter --headless --wayland --no-x11 \
    --virtual-monitor 2880x1800 --wayland-display=lab-mutter > $out/mutter-$build.log 2>&1 &
wrapper=$!
for i in $(seq 200); do [ -S $root$rd/lab-mutter ] && break; sleep 0.1; done
pid=$(pgrep -P $wrapper -x mutter | head -1)
grep -c "wayland-$build/libwayland-server" /proc/$pid/maps | sed "s/^/maps naming wayland-$build: /"
sleep 2
bpftrace "$here/gap.bt" $pid > $out/trace-$build.txt 2>&1 &
bt=$!; sleep 3
chroot $root /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR=$rd WAYLAND_DISPLAY=lab-mutter \
    "${client[@]}" > $out/client-$build.log 2>&1
cp $root$rd/client.json $out/client-$build.json
cp /proc/$pid/maps $out/maps-$build.txt
kill -INT $bt; wait $bt
kill $pid; sleep 1; kill $wrapper 2>/dev/null; pkill -P $wrapper 2>/dev/null; wait $wrapper 2>/dev/null
rm -rf $root$rd
