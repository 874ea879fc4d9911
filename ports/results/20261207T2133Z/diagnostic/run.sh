#!/usr/bin/env bash
# KWin 6.7.4 with the series (the lab's /opt/lab/kwin-ours) and the lab's burst client in the sid
# root, drain.bt on its main thread, REPS times, with the system's CPU times (/proc/stat) every 50 ms.
# Root; the sid root of ports/lab.sh with KWin built (lab.sh build), tracefs mounted.
#   [OUT=DIR] run.sh [REPS]
set -u
here=$(cd "$(dirname "$0")" && pwd)
reps=${1:-3} root=/srv/lab-sid out=${OUT:-/tmp/kwin-diag}; mkdir -p "$out"
# A kernel without page_reporting_process leaves "0x" there, which bpftrace refuses to parse.
sed "s/PAGE_REPORTING_PROCESS/0x$(awk '$3 == "page_reporting_process" {print $1}' /proc/kallsyms)/" "$here/drain.bt" >"$out/drain.bt"
client=(/src/du-build/examples/wayland/stress_client --width 2880 --height 1800 --pool-mib 20 --burst 52 --resize-every 0 --frames 64 --linger 3 --prepare-ahead)
for rep in $(seq $reps); do
  rd=/run/lab/kd-$$-$rep; rm -rf $root$rd && mkdir -p $root$rd && chmod 700 $root$rd
  chroot $root /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 XDG_RUNTIME_DIR=$rd \
      LD_LIBRARY_PATH=/opt/lab/kwin-ours KWIN_COMPOSE=Q QT_LOGGING_RULES=kwin_shm.debug=true dbus-run-session -- \
      /opt/lab/kwin-ours/kwin_wayland --virtual --socket lab-kwin --width 2880 --height 1800 --no-lockscreen \
      --no-global-shortcuts > $out/kwin-$rep.log 2>&1 &
  wrapper=$!
  for i in $(seq 200); do [ -S $root$rd/lab-kwin ] && break; sleep 0.1; done
  pid=$(pgrep -P $wrapper -x kwin_wayland | head -1)
  sleep 2
  bpftrace "$out/drain.bt" $pid > $out/trace-$rep.txt 2>&1 &
  bt=$!; sleep 3
  (while :; do echo "$(cut -d' ' -f1 /proc/uptime) $(grep '^cpu ' /proc/stat)"; sleep 0.05; done > $out/stat-$rep.txt) &
  stat=$!
  chroot $root /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR=$rd WAYLAND_DISPLAY=lab-kwin \
      "${client[@]}" --json $rd/client.json > $out/client-$rep.log 2>&1
  cp $root$rd/client.json $out/client-$rep.json
  kill $stat; kill -INT $bt; wait $bt
  kill $pid; sleep 1; kill $wrapper 2>/dev/null; pkill -P $wrapper 2>/dev/null; wait $wrapper 2>/dev/null
  echo "== rep $rep"; grep -h "drain \|held mmap" $out/trace-$rep.txt | head -40
  grep -o "Reclaimed.*" $out/kwin-$rep.log
  rm -rf $root$rd
done
