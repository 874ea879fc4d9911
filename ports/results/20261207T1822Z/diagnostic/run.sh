#!/usr/bin/env bash
# shm_compositor MODE with the lab's burst client in the sid root, drain.bt on its main thread: each
# drain over 1.5 ms and where its time went. NICE=N renices the du-reclaim worker first. Root; the
# sid root of ports/lab.sh with the library built (lab.sh build) and tracefs mounted.
#   [NICE=N] [OUT=DIR] run.sh [MODE]
set -u
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-queue+worker} root=/srv/lab-sid rd=/run/lab/sd-$$ out=${OUT:-/tmp/drain-diag}; mkdir -p "$out"
rm -rf $root$rd && mkdir -p $root$rd && chmod 700 $root$rd
client=(/src/du-build/examples/wayland/stress_client --width 2880 --height 1800 --pool-mib 20 --burst 52 --resize-every 0 --frames 64 --linger 3 --prepare-ahead)
chroot $root /usr/bin/env -i HOME=/root XDG_RUNTIME_DIR=$rd timeout 120 /src/du-build/examples/wayland/shm_compositor --mode $mode \
    --socket lab-shm --json $rd/server.json -- /bin/sh -c "while [ ! -e $rd/go ]; do sleep 0.05; done; exec \"\$0\" \"\$@\"" "${client[@]}" > $out/comp-$mode.log 2>&1 &
started=$!
for i in $(seq 100); do pid=$(pgrep -P $started -x shm_compositor); [ -n "$pid" ] && break; sleep 0.1; done
[ -n "${NICE:-}" ] && for t in /proc/$pid/task/*; do [ "$(cat $t/comm)" = du-reclaim ] && renice -n $NICE -p ${t##*/} >/dev/null && echo "reniced ${t##*/} to $NICE"; done
bpftrace "$here/drain.bt" $pid > $out/trace-$mode.txt 2>&1 &
bt=$!; sleep 4; touch $root$rd/go
wait $started
kill -INT $bt; wait $bt
grep -o "drain_max_us=[0-9.]* .*step_max_us=[0-9.]*" $out/comp-$mode.log
grep -v "^Attaching\|RLIMIT" $out/trace-$mode.txt | head -80
rm -rf $root$rd
