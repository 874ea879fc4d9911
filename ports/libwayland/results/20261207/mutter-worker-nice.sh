#!/usr/bin/env bash
# Diagnostic, not a lab target: is Mutter's remaining burst gap on the libwayland series the worker's
# CPU share? Mutter 51 + libwayland stock / ours / ours with its du-reclaim worker reniced to 19
# (after a warm-up client made it), the lab's burst client, interleaved, REPS repetitions.
set -euo pipefail
mkdir -p "${OUT:-/tmp/mutter-diag}"
root=${ROOT:-/srv/lab-sid} reps=${REPS:-3} out=${OUT:-/tmp/mutter-diag}
client=/src/du-build/examples/wayland/stress_client
burst=(--width 2880 --height 1800 --pool-mib 20 --burst 52 --resize-every 0 --frames 64 --linger 3 --prepare-ahead)
run() {  # build nice rep
    local build=$1 nice=$2 rep=$3 rd=/run/lab/mn-$$ wrapper comp tid=
    rm -rf "$root$rd" && mkdir -p "$root$rd" && chmod 700 "$root$rd"
    chroot $root /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin LANG=C.UTF-8 XDG_RUNTIME_DIR=$rd \
        LD_LIBRARY_PATH=/opt/lab/wayland-$build dbus-run-session -- mutter --headless --wayland --no-x11 \
        --virtual-monitor 2880x1800 --wayland-display=lab-mutter >"$out/mutter-$build-$nice-$rep.log" 2>&1 &
    wrapper=$!
    for i in $(seq 200); do [ -S "$root$rd/lab-mutter" ] && break; sleep 0.1; done
    comp=$(pgrep -P $wrapper -x mutter | head -1)
    sleep 2
    grep -q "/opt/lab/wayland-$build/" /proc/$comp/maps || { echo "$build: not loaded"; }
    chroot $root /usr/bin/env -i XDG_RUNTIME_DIR=$rd WAYLAND_DISPLAY=lab-mutter timeout 30 $client --frames 5 >/dev/null 2>&1 || true
    sleep 0.5
    for t in /proc/$comp/task/*; do [ "$(cat $t/comm)" = du-reclaim ] && tid=${t##*/}; done
    if [ "$nice" = nice19 ]; then
        [ -n "$tid" ] && renice -n 19 -p "$tid" >/dev/null || echo "no du-reclaim thread in $comp"
    fi
    rm -f "$root$rd/c.json"
    chroot $root /usr/bin/env -i XDG_RUNTIME_DIR=$rd WAYLAND_DISPLAY=lab-mutter timeout 120 $client "${burst[@]}" \
        --json $rd/c.json >/dev/null 2>&1 || true
    local max p50
    max=$(sed -n 's/^  "gap_max_ms": \([^,]*\),*$/\1/p' "$root$rd/c.json")
    p50=$(sed -n 's/^  "gap_p50_ms": \([^,]*\),*$/\1/p' "$root$rd/c.json")
    echo "rep $rep $build $nice worker=${tid:-none} nice=$( [ -n "$tid" ] && ps -o ni= -p $tid 2>/dev/null || echo -) gap_max_ms $max p50 $p50" | tee -a "$out/summary.txt"
    kill $comp 2>/dev/null || true; sleep 1; kill -9 $comp 2>/dev/null || true
    pkill -P $wrapper 2>/dev/null || true; kill $wrapper 2>/dev/null || true; wait $wrapper 2>/dev/null || true
    rm -rf "$root$rd"
}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(uname -r), $(date -u +%FT%TZ)" | tee -a "$out/summary.txt"
for rep in $(seq $reps); do
    run stock plain $rep
    run ours plain $rep
    run ours nice19 $rep
done
