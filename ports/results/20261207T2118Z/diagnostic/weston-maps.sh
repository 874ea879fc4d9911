#!/usr/bin/env bash
# weston 16 on BUILD's libwayland-server (the lab's /opt/lab/wayland-BUILD) with the lab's burst and churn
# clients, N times each; after each, the memfd mappings weston holds (name, size), to see whose a
# mapping left after a client is. Root; the sid root of ports/lab.sh.
#   weston-maps.sh [BUILD [N]]
set -u
build=${1:-ours} n=${2:-6} root=/srv/lab-sid rd=/run/lab/wm-$$
rm -rf $root$rd && mkdir -p $root$rd && chmod 700 $root$rd
chroot $root /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 XDG_RUNTIME_DIR=$rd \
    LD_LIBRARY_PATH=/opt/lab/wayland-$build weston --backend=headless --renderer=pixman --width=2880 --height=1800 \
    --socket=lab-weston --idle-time=0 > /tmp/weston-$build.log 2>&1 &
pid=$!
for i in $(seq 100); do [ -S $root$rd/lab-weston ] && break; sleep 0.1; done
sleep 2
maps() { python3 -c '
import sys, collections
c = collections.Counter()
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) > 5 and f[5].startswith("/memfd:"):
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        c[(" ".join(f[5:]), (hi - lo) // 1024, f[1])] += 1
for (name, kib, perm), n in sorted(c.items()): print(f"  {n} x {name} {kib} KiB {perm}")
' /proc/$pid/maps; }
echo "idle:"; maps
client=/src/du-build/examples/wayland/stress_client
for i in $(seq $n); do
  for kind in burst churn; do
    if [ $kind = burst ]; then args="--pool-mib 20 --burst 52 --resize-every 0 --frames 64"; else args="--pool-mib 30 --burst 1 --resize-every 4 --frames 150"; fi
    chroot $root /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR=$rd WAYLAND_DISPLAY=lab-weston \
        $client --width 2880 --height 1800 $args --linger 0 --prepare-ahead > /dev/null 2>&1
    sleep 3
    echo "after $kind $i: $(grep -c memfd: /proc/$pid/maps) memfd maps"; maps
  done
done
kill $pid; wait $pid 2>/dev/null; rm -rf $root$rd
