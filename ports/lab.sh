#!/usr/bin/env bash
# ports/lab.sh - build KWin 6.3.6 and wlroots 0.18.2 stock and patched with deferred_unmap inside a
# Debian trixie root, and measure them side by side with the project's stress client.
#
#   sudo ports/lab.sh setup   DIR        # trixie root, stock compositors, build deps, sources (~6 min)
#   sudo ports/lab.sh build   DIR        # stock + patched kwin_wayland, libwlroots, clients (~45 min first time)
#   sudo ports/lab.sh measure DIR [--reps N] [--variant NAME=PATCH[,PATCH...] ...] [--kwin-variant NAME=PATCH[,...] ...]
#                                 [--only kwin,sway,weston,shm_compositor]
#   (--variant: an extra wlroots build, e.g. a peer's patch; --kwin-variant: the KWin series plus more)
#   sudo ports/lab.sh umount  DIR        # undo the bind mounts (before rm -rf --one-file-system DIR)
#
# See ports/README.md for what each step does, how long it takes and what it prints.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

KWIN_VERSION=6.3.6
KWIN_DEP_VERSION=6.3.4   # what trixie ships of KDecoration3/KWayland/Plasma
WLROOTS_VERSION=0.18.2
JOBS=${JOBS:-$(nproc)}

die() { echo "lab.sh: $*" >&2; exit 1; }
log() { echo "lab.sh: $*" >&2; }

need_root() { [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, bind mounts)"; }

# ---- the root ----

mount_root() {
    local dir=$1
    for m in proc sys dev; do
        mountpoint -q "$dir/$m" || mount --bind "/$m" "$dir/$m"
    done
    mkdir -p "$dir/dev/shm"
    # A private tmpfs: memfd/shm of clients in the root must not land in the host's /dev/shm.
    if ! grep -q " $(readlink -f "$dir/dev/shm") tmpfs " /proc/mounts; then
        mount -t tmpfs -o mode=1777 tmpfs "$dir/dev/shm"
    fi
    mkdir -p "$dir/run/user/0" && chmod 700 "$dir/run/user/0"
}

umount_root() {
    local dir=$1
    for m in dev/shm dev sys proc; do
        mountpoint -q "$dir/$m" && umount -l "$dir/$m" || true
    done
}

in_root() {  # in_root DIR CMD... : run a shell command line inside the root
    local dir=$1; shift
    chroot "$dir" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive XDG_RUNTIME_DIR=/run/user/0 /bin/bash -c "$*"
}

add_deb_src() {
    local dir=$1
    local src="$dir/etc/apt/sources.list.d/debian.sources"
    local dst="$dir/etc/apt/sources.list.d/lab-src.sources"
    [ -e "$dst" ] || [ -e "$dir/etc/apt/sources.list.d/lab-src.list" ] && return 0
    if [ -e "$src" ]; then
        sed 's/^Types:.*/Types: deb-src/' "$src" > "$dst"
    elif [ -e "$dir/etc/apt/sources.list" ]; then
        # debootstrap writes a one-line sources.list: mirror the deb lines as deb-src.
        sed -n 's/^deb /deb-src /p' "$dir/etc/apt/sources.list" > "$dir/etc/apt/sources.list.d/lab-src.list"
    else
        die "no apt sources in $dir to derive a deb-src entry from"
    fi
}

cmd_setup() {
    need_root
    local dir=$1
    command -v debootstrap >/dev/null || die "install debootstrap first (apt-get install debootstrap)"
    if [ ! -e "$dir/etc/debian_version" ]; then
        log "debootstrap trixie into $dir (~1 min)"
        debootstrap --variant=minbase trixie "$dir"
    fi
    mount_root "$dir"
    cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
    add_deb_src "$dir"
    log "stock compositors (~1.5 min), build dependencies (~2 min), build tools"
    in_root "$dir" "apt-get update -q && apt-get install -y -q --no-install-recommends \
        kwin-wayland sway weston dbus dbus-daemon procps psmisc jq \
        && apt-get build-dep -y -q kwin wlroots \
        && apt-get install -y -q --no-install-recommends build-essential cmake ninja-build meson pkg-config git \
           libwayland-dev wayland-protocols xz-utils ca-certificates python3 patch"
    log "sources: kwin $KWIN_VERSION (upstream tarball), wlroots $WLROOTS_VERSION"
    in_root "$dir" "mkdir -p /src && cd /src && \
        { [ -d kwin-$KWIN_VERSION ] || { apt-get source -q --download-only kwin || true; tar xf kwin_$KWIN_VERSION.orig.tar.xz; }; } && \
        { [ -d wlroots-$WLROOTS_VERSION ] || { apt-get source -q --download-only wlroots && tar xf wlroots_$WLROOTS_VERSION.orig.tar.*; }; }"
    [ -d "$dir/src/kwin-$KWIN_VERSION" ] || die "kwin $KWIN_VERSION source did not unpack"
    [ -d "$dir/src/wlroots-$WLROOTS_VERSION" ] || die "wlroots $WLROOTS_VERSION source did not unpack"
    log "setup done: $dir"
}

# ---- build ----
# Inside the root:
#   /src/deferred_unmap          a copy of this checkout (git ls-files), installed to /usr/local
#   /src/du-build                its build: stress_client, shm_compositor
#   /src/kwin-6.3.6              KWin; stock first, then the series in ports/kwin/ applied with git am
#   /src/kwin-build              one build tree for both (the patched build is incremental, ~minutes)
#   /opt/lab/kwin-stock/         kwin_wayland + libkwin.so.6 of the stock build, run with LD_LIBRARY_PATH
#   /opt/lab/kwin-ours/          the same for the patched build
#   /src/wlroots-<variant>/      one pristine copy of wlroots 0.18.2 per variant (stock, ours, NAME...)
#   /opt/lab/wlroots-<variant>/  its libwlroots-0.18.so, preloaded into the stock sway via LD_LIBRARY_PATH

install_library() {
    local dir=$1
    log "deferred_unmap: copy of $repo into $dir/src/deferred_unmap, install to /usr/local"
    rm -rf "$dir/src/deferred_unmap" && mkdir -p "$dir/src/deferred_unmap"
    # Tracked and untracked files that exist (a file deleted but not yet committed is skipped).
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        xargs -0 cp --parents -t "$dir/src/deferred_unmap")
    in_root "$dir" "cd /src && cmake -S deferred_unmap -B du-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX=/usr/local -DDEFERRED_UNMAP_BUILD_TESTS=OFF -DDEFERRED_UNMAP_BUILD_EXAMPLES=ON >/src/du-configure.log 2>&1 \
        && ninja -C du-build -j$JOBS stress_client shm_compositor deferred_unmap_c >/src/du-build.log 2>&1 \
        && cmake --install du-build >/dev/null" || die "deferred_unmap build/install failed (see $dir/src/du-*.log)"
    [ -x "$dir/src/du-build/examples/wayland/stress_client" ] || die "stress_client did not build"
}

# digest DIR [FIND-TEST...]: one hash of the names and contents of the files under DIR (that pass
# the tests); fails when DIR is missing or a file cannot be read
digest() {
    local top=$1; shift
    [ -d "$top" ] || return 1
    (cd "$top" && find . "$@" -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum --) | sha256sum | cut -d' ' -f1
}

# kwin_stamp DIR NAME [PATCH...]: what kwin-NAME is built from, by content (a patch rewritten with an
# older mtime, or a library reinstalled unchanged, must not decide): the installed library's
# headers, this checkout's series and each extra patch in order; stock is built from neither.
kwin_stamp() {
    local dir=$1 name=$2 library series; shift 2
    [ "$name" != stock ] || { echo "stock kwin $KWIN_VERSION"; return 0; }
    library=$(digest "$dir/usr/local/include/deferred_unmap") || return 1
    series=$(digest "$here/kwin" -maxdepth 1 -name '*.patch') || return 1
    echo "library $library"
    echo "series $series"
    [ $# -eq 0 ] || sha256sum -- "$@" | cut -d' ' -f1 | sed 's/^/patch /'
}

# revert_kwin_tree DIR: the KWin tree back to the series (a variant's edits and new files gone)
revert_kwin_tree() {
    in_root "$1" "cd /src/kwin-$KWIN_VERSION && git checkout -q -- . && git clean -qfd"
}

# stage_kwin DIR NAME STAMP: the build tree's kwin_wayland and libkwin into /opt/lab/kwin-NAME, with
# STAMP in built-from. The stamp is taken before the build: a patch edited while ninja runs must
# make the next run rebuild, not be recorded as built.
stage_kwin() {
    local dir=$1 name=$2 stamp=$3
    in_root "$dir" "rm -rf /opt/lab/kwin-$name && mkdir -p /opt/lab/kwin-$name && \
        cp -a /src/kwin-build/bin/kwin_wayland /src/kwin-build/bin/libkwin.so* /opt/lab/kwin-$name/"
    printf '%s\n' "$stamp" >"$dir/opt/lab/kwin-$name/built-from"
}

build_kwin() {
    local dir=$1 stamp
    local src=/src/kwin-$KWIN_VERSION
    if [ ! -x "$dir/opt/lab/kwin-stock/kwin_wayland" ]; then
        log "kwin $KWIN_VERSION stock: configure + ninja kwin_wayland (1,230 steps, ~40 min on 2 cores)"
        in_root "$dir" "cd $src && sed -i 's/^set(PROJECT_DEP_VERSION \"[0-9.]*\")/set(PROJECT_DEP_VERSION \"$KWIN_DEP_VERSION\")/' CMakeLists.txt \
            && { [ -d .git ] || { git init -q && git add -A && git -c user.name=lab -c user.email=lab@localhost commit -qm 'kwin $KWIN_VERSION (PROJECT_DEP_VERSION $KWIN_DEP_VERSION)'; }; } \
            && git tag -f stock >/dev/null \
            && cmake -S . -B /src/kwin-build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF >/src/kwin-configure.log 2>&1 \
            && ninja -C /src/kwin-build -j$JOBS kwin_wayland" || die "kwin stock build failed"
        stage_kwin "$dir" stock "$(kwin_stamp "$dir" stock)"
    fi
    stamp=$(kwin_stamp "$dir" ours) || die "kwin: cannot hash the installed library or the series"
    log "kwin $KWIN_VERSION + ports/kwin/*.patch: incremental rebuild"
    # An interrupted variant leaves its patches in the tree: what is staged as kwin-ours must be
    # the series alone.
    in_root "$dir" "cd $src && git diff --quiet HEAD" \
        || log "kwin: reverting changes beyond the series (an interrupted variant?)"
    revert_kwin_tree "$dir" || die "kwin: cannot reset $src to the series"
    # Same series as last time: leave the tree alone (nothing to rebuild).
    if ! diff -rq "$here/kwin" "$dir/src/patches-kwin" -x README.md -x alternatives >/dev/null 2>&1; then
        rm -rf "$dir/src/patches-kwin" && mkdir -p "$dir/src/patches-kwin" && cp "$here"/kwin/*.patch "$dir/src/patches-kwin/"
        in_root "$dir" "cd $src && git reset -q --hard stock && git -c user.name=lab -c user.email=lab@localhost am -q /src/patches-kwin/*.patch \
            && cmake /src/kwin-build >/dev/null" || die "kwin: applying the series failed"
    fi
    in_root "$dir" "ninja -C /src/kwin-build -j$JOBS kwin_wayland" || die "kwin patched build failed"
    stage_kwin "$dir" ours "$stamp"
    # The build tree is left patched; `git -C $src reset --hard stock` before rebuilding stock.
}

# build_kwin_variant DIR NAME=PATCH[,PATCH...]: the series plus more patches, staged as kwin-NAME;
# rebuilt only when its stamp (built-from, see kwin_stamp) no longer matches. The extra patches are
# applied with `git apply` on top of the series and reverted after, so only the files they touch are
# rebuilt (resetting to `stock` and applying series and variant with `git am`, without re-running
# cmake, made ninja rebuild 247 steps here).
build_kwin_variant() {
    local dir=$1 spec=$2
    local name=${spec%%=*} list=${spec#*=} patches=() p ours ours_stamp stamp
    [ "$name" != "$spec" ] && [ -n "$name" ] && [ -n "$list" ] \
        || die "--kwin-variant wants NAME=PATCHFILE[,PATCHFILE...], got $spec"
    case $name in stock|ours) die "variant name $name is taken" ;; esac
    IFS=, read -r -a patches <<<"$list"
    [ -d "$dir/usr/local/include/deferred_unmap" ] || die "kwin variant $name: the library is not installed in $dir (run lab.sh build first)"
    for p in "${patches[@]}"; do [ -r "$p" ] || die "kwin variant $name: cannot read '$p'"; done
    # A variant must be built from the same library and series as the kwin-ours it is measured beside.
    ours=$dir/opt/lab/kwin-ours/built-from
    [ -e "$ours" ] || die "kwin variant $name: kwin-ours is not built, or was staged by a lab.sh without stamps (run lab.sh build DIR --only kwin)"
    ours_stamp=$(kwin_stamp "$dir" ours) || die "kwin variant $name: cannot hash the installed library or the series"
    [ "$(cat "$ours")" = "$ours_stamp" ] \
        || die "kwin variant $name: kwin-ours was built from another library or series (run lab.sh build DIR --only kwin)"
    stamp=$(kwin_stamp "$dir" "$name" "${patches[@]}") || die "kwin variant $name: cannot hash its patches"
    if [ -e "$dir/opt/lab/kwin-$name/libkwin.so.$KWIN_VERSION" ] \
        && [ "$(cat "$dir/opt/lab/kwin-$name/built-from" 2>/dev/null)" = "$stamp" ]; then
        log "kwin $name: up to date"
        return 0
    fi
    log "kwin $KWIN_VERSION + ports/kwin/*.patch + $list: incremental rebuild"
    rm -rf "$dir/src/patches-kwin-$name" && mkdir -p "$dir/src/patches-kwin-$name"
    local i=0
    for p in "${patches[@]}"; do i=$((i + 1)); cp "$p" "$dir/src/patches-kwin-$name/$(printf %02d $i)-$(basename "$p")"; done
    local src=/src/kwin-$KWIN_VERSION
    in_root "$dir" "cd $src && git diff --quiet HEAD && [ \"\$(git rev-list --count stock..HEAD)\" = \"\$(ls /src/patches-kwin/*.patch | wc -l)\" ]" \
        || die "kwin: $src is not at the series (run lab.sh build first)"
    # git apply is all or nothing; a variant that does not compile is reverted too, so the tree is
    # left at the series whichever way this ends.
    if ! in_root "$dir" "cd $src && git apply /src/patches-kwin-$name/*.patch && ninja -C /src/kwin-build -j$JOBS kwin_wayland"; then
        revert_kwin_tree "$dir"
        die "kwin $name build failed (reverted to the series)"
    fi
    stage_kwin "$dir" "$name" "$stamp"
    revert_kwin_tree "$dir" && in_root "$dir" "ninja -C /src/kwin-build -j$JOBS kwin_wayland >/dev/null" \
        || die "kwin: rebuilding the series after variant $name failed"
}

# build_wlroots DIR NAME [PATCH...]: wlroots 0.18.2 with the patches applied, staged as /opt/lab/wlroots-NAME
build_wlroots() {
    local dir=$1 name=$2; shift 2
    local src=/src/wlroots-$name
    log "wlroots $WLROOTS_VERSION $name: meson (~20 s)"
    rm -rf "$dir$src" "$dir/src/patches-wlroots-$name" && mkdir -p "$dir/src/patches-wlroots-$name"
    cp -a "$dir/src/wlroots-$WLROOTS_VERSION" "$dir$src"
    local p
    for p in "$@"; do cp "$p" "$dir/src/patches-wlroots-$name/"; done
    in_root "$dir" "cd $src && for p in \$(ls /src/patches-wlroots-$name/* 2>/dev/null | sort); do patch -p1 -s <\$p || exit 1; done \
        && meson setup build --buildtype=debugoptimized -Dexamples=false >/src/wlroots-$name.configure.log 2>&1 \
        && ninja -C build -j$JOBS >/src/wlroots-$name.build.log 2>&1 \
        && rm -rf /opt/lab/wlroots-$name && mkdir -p /opt/lab/wlroots-$name && cp build/libwlroots-0.18.so /opt/lab/wlroots-$name/" \
        || die "wlroots $name build failed (see $dir/src/wlroots-$name.*.log)"
}

# build_variant DIR NAME=PATCH[,PATCH...]: an extra wlroots variant (a peer's patch, one of ours alone)
build_variant() {
    local dir=$1 spec=$2
    local name=${spec%%=*} list=${spec#*=}
    [ "$name" != "$spec" ] && [ -n "$name" ] || die "--variant wants NAME=PATCHFILE[,PATCHFILE...], got $spec"
    case $name in stock|ours) die "variant name $name is taken" ;; esac
    local patches=() p
    IFS=, read -r -a patches <<<"$list"
    for p in "${patches[@]}"; do [ -r "$p" ] || die "variant $name: cannot read $p"; done
    build_wlroots "$dir" "$name" "${patches[@]}"
}

cmd_build() {
    need_root
    local dir=$1; shift
    local only=all variants=() kwin_variants=()
    while [ $# -gt 0 ]; do
        case $1 in
        --only) only=$2; shift 2 ;;
        --variant) variants+=("$2"); shift 2 ;;
        --kwin-variant) kwin_variants+=("$2"); shift 2 ;;
        *) die "build: unknown option $1" ;;
        esac
    done
    local v
    mount_root "$dir"
    # The sources are owned by whoever unpacked them; git in the root must not refuse them.
    in_root "$dir" "git config --global --get safe.directory >/dev/null || git config --global --add safe.directory '*'"
    install_library "$dir"
    if [ "$only" = all ] || [ "$only" = wlroots ]; then
        build_wlroots "$dir" stock
        build_wlroots "$dir" ours "$here"/wlroots/*.patch
        for v in "${variants[@]}"; do build_variant "$dir" "$v"; done
    fi
    if [ "$only" = all ] || [ "$only" = kwin ]; then
        build_kwin "$dir"
        for v in "${kwin_variants[@]}"; do build_kwin_variant "$dir" "$v"; done
    fi
    log "build done"
}

# ---- measure ----
# Every process runs chrooted in DIR, as root, with a fresh XDG_RUNTIME_DIR per compositor start.
CLIENT=/src/du-build/examples/wayland/stress_client
SHM_COMPOSITOR=/src/du-build/examples/wayland/shm_compositor
# 52 pools of 2880x1800 XRGB (19.8 MiB buffers in 20 MiB pools) committed one per frame, then all
# destroyed at once: one 1 GB burst at frame ~53. --prepare-ahead draws every frame's memory before
# the first frame: on VMs whose balloon hands freed pages back to the host, first-touching a fresh
# pool costs the client itself up to ~80 ms, which would land in its gaps whatever the compositor did
# (client_work_max_ms in the results says how long the client's own frames took).
BURST_ARGS=(--width 2880 --height 1800 --pool-mib 20 --burst 52 --resize-every 0 --frames 64 --prepare-ahead)
# A fresh 30 MiB pool every frame (announced at half size, grown by wl_shm_pool.resize every 4th).
CHURN_ARGS=(--width 2880 --height 1800 --pool-mib 30 --burst 1 --resize-every 4 --frames 150 --prepare-ahead)
SIMPLE_SHM_SECONDS=3

comp_pid=        # the compositor process itself
wrapper_pid=     # what we started (dbus-run-session for KWin, else the compositor)
run_dir=         # its XDG_RUNTIME_DIR inside the root
socket=

# Processes whose root is DIR: compositors left over from an interrupted run skew every later one.
stale_pids() {
    local dir=$1 p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$dir" ] || continue
        case $(cat "$p/comm" 2>/dev/null) in
        kwin_wayland|sway|weston|dbus-daemon|dbus-run-sessio|shm_compositor|stress_client|weston-simple-s) echo "${p#/proc/}" ;;
        esac
    done
}

kill_stale() {
    local dir=$1 pids
    pids=$(stale_pids "$dir")
    [ -z "$pids" ] && return 0
    log "stopping processes left in $dir by an earlier run: $pids"
    kill $pids 2>/dev/null || true
    sleep 1
    pids=$(stale_pids "$dir")
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
}

fd_count() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
fd_list() { local f; for f in /proc/$1/fd/*; do readlink "$f"; done 2>/dev/null | sed 's/[0-9]\{3,\}/N/g' | sort; }
memfd_maps() { grep -c 'memfd:' "/proc/$1/maps" 2>/dev/null || true; }

# start_compositor DIR KIND BUILD: sets comp_pid, wrapper_pid, socket, run_dir
start_compositor() {
    local dir=$1 kind=$2 build=$3
    run_dir=/run/lab/$kind-$build-$$
    rm -rf "$dir$run_dir" && mkdir -p "$dir$run_dir" && chmod 700 "$dir$run_dir"
    local envs=(HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 XDG_RUNTIME_DIR=$run_dir)
    local log=$dir$run_dir.log
    case $kind in
    kwin)
        socket=lab-kwin
        chroot "$dir" /usr/bin/env -i "${envs[@]}" LD_LIBRARY_PATH=/opt/lab/kwin-$build KWIN_COMPOSE=Q \
            QT_LOGGING_RULES='kwin_shm.debug=true' \
            dbus-run-session -- /opt/lab/kwin-$build/kwin_wayland --virtual --socket $socket \
            --width 2880 --height 1800 --no-lockscreen --no-global-shortcuts >"$log" 2>&1 &
        wrapper_pid=$!
        ;;
    sway)
        socket=
        printf 'output HEADLESS-1 mode --custom 2880x1800@60Hz\nxwayland disable\n' >"$dir$run_dir.sway.conf"
        local ld=
        [ "$build" = debian ] || ld=LD_LIBRARY_PATH=/opt/lab/wlroots-$build
        chroot "$dir" /usr/bin/env -i "${envs[@]}" $ld WLR_BACKENDS=headless WLR_RENDERER=pixman \
            WLR_LIBINPUT_NO_DEVICES=1 sway -d -c "$run_dir.sway.conf" >"$log" 2>&1 &
        wrapper_pid=$!
        ;;
    weston)
        socket=lab-weston
        chroot "$dir" /usr/bin/env -i "${envs[@]}" weston --backend=headless --renderer=pixman \
            --width=2880 --height=1800 --socket=$socket --idle-time=0 >"$log" 2>&1 &
        wrapper_pid=$!
        ;;
    *) die "unknown compositor $kind" ;;
    esac
    local i
    for i in $(seq 200); do
        if [ "$kind" = sway ]; then  # sway takes the first free wayland-N of its own runtime dir
            socket=$(cd "$dir$run_dir" 2>/dev/null && ls wayland-[0-9] 2>/dev/null | head -1 || true)
        fi
        [ -n "$socket" ] && [ -S "$dir$run_dir/$socket" ] && break
        kill -0 "$wrapper_pid" 2>/dev/null || { tail -20 "$log" >&2; die "$kind $build exited at start (log: $log)"; }
        sleep 0.1
    done
    [ -S "$dir$run_dir/$socket" ] || { tail -20 "$log" >&2; die "$kind $build: no socket after 20 s (log: $log)"; }
    if [ "$kind" = kwin ]; then
        comp_pid=$(pgrep -P "$wrapper_pid" -x kwin_wayland | head -1)
        [ -n "$comp_pid" ] || die "kwin $build: no kwin_wayland under dbus-run-session $wrapper_pid"
    else
        comp_pid=$wrapper_pid
    fi
    sleep 2  # let it settle (KWin loads its plugins, weston its shell)
}

stop_compositor() {
    [ -n "$comp_pid" ] && kill "$comp_pid" 2>/dev/null || true
    local i
    for i in $(seq 50); do
        kill -0 "$comp_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$comp_pid" 2>/dev/null || true
    if [ "$wrapper_pid" != "$comp_pid" ]; then
        kill "$wrapper_pid" 2>/dev/null || true
        # dbus-run-session's own dbus-daemon
        pkill -P "$wrapper_pid" 2>/dev/null || true
    fi
    wait "$wrapper_pid" 2>/dev/null || true
    comp_pid= wrapper_pid=
}

# The library the compositor really loaded (LD_LIBRARY_PATH must have won over the system copy).
loaded_lib() {
    local pid=$1 pattern=$2 path
    path=$(grep -o "/[^ ]*$pattern[^ ]*" "/proc/$pid/maps" 2>/dev/null | sort -u | head -1)
    echo "${path#"$root_dir"}"  # maps shows paths as the host sees them
}

# record FILE KEY=VALUE... : one JSON object per line
record() {
    local file=$1; shift
    local kv first=1
    printf '{' >>"$file"
    for kv in "$@"; do
        local k=${kv%%=*} v=${kv#*=}
        [ $first = 1 ] || printf ', ' >>"$file"
        first=0
        if [[ $v =~ ^-?[0-9]+(\.[0-9]+)?$ ]] || [ "$v" = true ] || [ "$v" = false ] || [ "$v" = null ]; then
            printf '"%s": %s' "$k" "$v" >>"$file"
        else
            printf '"%s": "%s"' "$k" "${v//\"/\\\"}" >>"$file"
        fi
    done
    printf '}\n' >>"$file"
}

json_field() { sed -n "s/^  \"$2\": \([^,]*\),\{0,1\}$/\1/p" "$1"; }

# After a client: wait for the compositor to give back what it held (deferred queues included).
settle_leaks() {
    local pid=$1 fd0=$2 memfd0=$3 i
    for i in $(seq 30); do
        [ "$(fd_count "$pid")" -le "$fd0" ] && [ "$(memfd_maps "$pid")" -le "$memfd0" ] && break
        sleep 0.1
    done
    echo "$(fd_count "$pid") $(memfd_maps "$pid")"
}

# run_client DIR OUT KIND BUILD REP SHAPE ARGS...
run_client() {
    local dir=$1 out=$2 kind=$3 build=$4 rep=$5 shape=$6; shift 6
    local fd0 memfd0 json=$run_dir.$shape.json after
    fd0=$(fd_count "$comp_pid"); memfd0=$(memfd_maps "$comp_pid")
    fd_list "$comp_pid" >"$dir$run_dir.fds-before"
    chroot "$dir" /usr/bin/env -i HOME=/root XDG_RUNTIME_DIR=$run_dir WAYLAND_DISPLAY=$socket \
        timeout 120 $CLIENT "$@" --json "$json" >>"$dir$run_dir.clients.log" 2>&1 || true
    after=$(settle_leaks "$comp_pid" "$fd0" "$memfd0")
    if [ "${after% *}" -gt "$fd0" ]; then  # say what was left, for the log
        fd_list "$comp_pid" | diff "$dir$run_dir.fds-before" - | sed "s/^/$kind $build rep$rep $shape: fd /" >>"$logs/leftovers.txt" || true
    fi
    local f=$dir$json
    if [ -s "$f" ]; then
        record "$out" compositor=$kind build=$build rep=$rep client=$shape \
            gap_p50_ms="$(json_field "$f" gap_p50_ms)" gap_p99_ms="$(json_field "$f" gap_p99_ms)" \
            gap_max_ms="$(json_field "$f" gap_max_ms)" frames="$(json_field "$f" frames)" \
            client_work_max_ms="$(json_field "$f" client_work_max_ms)" \
            protocol_error="$(json_field "$f" protocol_error)" missed_frames=null \
            fds_before="$fd0" fds_after="${after% *}" memfd_maps_before="$memfd0" memfd_maps_after="${after#* }" \
            loaded="$lib"
    else
        record "$out" compositor=$kind build=$build rep=$rep client=$shape error="no client report" loaded="$lib"
    fi
}

run_simple_shm() {
    local dir=$1 out=$2 kind=$3 build=$4 rep=$5
    local fd0 memfd0 after status log=$dir$run_dir.simple-shm.log
    fd0=$(fd_count "$comp_pid"); memfd0=$(memfd_maps "$comp_pid")
    status=0
    chroot "$dir" /usr/bin/env -i HOME=/root XDG_RUNTIME_DIR=$run_dir WAYLAND_DISPLAY=$socket \
        timeout -s INT $SIMPLE_SHM_SECONDS weston-simple-shm >"$log" 2>&1 || status=$?
    after=$(settle_leaks "$comp_pid" "$fd0" "$memfd0")
    local perr=false
    # timeout's SIGINT is the normal end (weston-simple-shm exits 0 on it); anything else is a failure
    if grep -qi 'protocol error\|error ' "$log" || { [ "$status" != 0 ] && [ "$status" != 124 ] && [ "$status" != 130 ]; }; then perr=true; fi
    record "$out" compositor=$kind build=$build rep=$rep client=simple-shm exit_status=$status protocol_error=$perr \
        fds_before="$fd0" fds_after="${after% *}" memfd_maps_before="$memfd0" memfd_maps_after="${after#* }" loaded="$lib"
}

# measure_one DIR OUT KIND BUILD REP
measure_one() {
    local dir=$1 out=$2 kind=$3 build=$4 rep=$5
    log "rep $rep: $kind $build"
    start_compositor "$dir" "$kind" "$build"
    lib=-
    case $kind in
    kwin) lib=$(loaded_lib "$comp_pid" 'libkwin\.so') ;;
    sway) lib=$(loaded_lib "$comp_pid" 'libwlroots-0\.18\.so') ;;
    esac
    if [ "$kind" = kwin ] && [[ $lib != /opt/lab/kwin-$build/* ]]; then
        stop_compositor; die "kwin $build loaded $lib, not /opt/lab/kwin-$build/"
    fi
    if [ "$kind" = sway ] && [ "$build" != debian ] && [[ $lib != /opt/lab/wlroots-$build/* ]]; then
        stop_compositor; die "sway $build loaded $lib, not /opt/lab/wlroots-$build/"
    fi
    # A short first client: compositors create some things on their first client only (sway
    # keeps one more descriptor from then on); the baselines are taken after it.
    chroot "$dir" /usr/bin/env -i HOME=/root XDG_RUNTIME_DIR=$run_dir WAYLAND_DISPLAY=$socket \
        timeout 30 $CLIENT --frames 5 >/dev/null 2>&1 || true
    sleep 0.5
    run_client "$dir" "$out" "$kind" "$build" "$rep" burst "${BURST_ARGS[@]}"
    run_client "$dir" "$out" "$kind" "$build" "$rep" churn "${CHURN_ARGS[@]}"
    run_simple_shm "$dir" "$out" "$kind" "$build" "$rep"
    stop_compositor
    cp "$dir$run_dir.log" "$logs/$kind-$build-rep$rep.log" 2>/dev/null || true
    rm -rf "$dir$run_dir" "$dir$run_dir".*
}

# The project's own compositor in its recommended mode: the library's best case on this machine.
measure_shm_compositor() {
    local dir=$1 out=$2 rep=$3 shape mode=queue+worker-unmap
    log "rep $rep: shm_compositor $mode"
    for shape in burst churn; do
        local args
        if [ $shape = burst ]; then args=("${BURST_ARGS[@]}"); else args=("${CHURN_ARGS[@]}"); fi
        local rd=/run/lab/shm-$$
        rm -rf "$dir$rd" && mkdir -p "$dir$rd" && chmod 700 "$dir$rd"
        chroot "$dir" /usr/bin/env -i HOME=/root XDG_RUNTIME_DIR=$rd timeout 120 $SHM_COMPOSITOR --mode $mode \
            --socket lab-shm --json $rd/server.json -- $CLIENT "${args[@]}" --json $rd/client.json \
            >"$logs/shm_compositor-$shape-rep$rep.log" 2>&1 || true
        local c=$dir$rd/client.json s=$dir$rd/server.json
        if [ -s "$c" ]; then
            record "$out" compositor=shm_compositor build=$mode rep=$rep client=$shape \
                gap_p50_ms="$(json_field "$c" gap_p50_ms)" gap_p99_ms="$(json_field "$c" gap_p99_ms)" \
                gap_max_ms="$(json_field "$c" gap_max_ms)" frames="$(json_field "$c" frames)" \
                client_work_max_ms="$(json_field "$c" client_work_max_ms)" \
                protocol_error="$(json_field "$c" protocol_error)" missed_frames="$(json_field "$s" missed_frames)" \
                loaded=-
        else
            record "$out" compositor=shm_compositor build=$mode rep=$rep client=$shape error="no client report" loaded=-
        fi
        rm -rf "$dir$rd"
    done
}

# wants LIST NAME: LIST is "all" or a comma-separated list of names
wants() { [ "$1" = all ] || [[ ",$1," == *",$2,"* ]]; }

cmd_measure() {
    need_root
    local dir=$1; shift
    local reps=3 variants=() kwin_variants=() only=all
    while [ $# -gt 0 ]; do
        case $1 in
        --reps) reps=$2; shift 2 ;;
        --variant) variants+=("$2"); shift 2 ;;
        --kwin-variant) kwin_variants+=("$2"); shift 2 ;;
        --only) only=$2; shift 2 ;;
        *) die "measure: unknown option $1" ;;
        esac
    done
    mount_root "$dir"
    [ -x "$dir$CLIENT" ] || die "run lab.sh build first"
    local v names=() kwin_names=()
    for v in "${variants[@]}"; do
        build_variant "$dir" "$v" >&2
        names+=("${v%%=*}")
    done
    for v in "${kwin_variants[@]}"; do
        build_kwin_variant "$dir" "$v" >&2
        kwin_names+=("${v%%=*}")
    done
    kill_stale "$dir"
    local stamp
    stamp=$(date -u +%Y%m%dT%H%MZ)
    logs=${LAB_OUT:-$PWD/lab-results}/$stamp
    mkdir -p "$logs"
    local out=$logs/results.jsonl
    : >"$out"
    trap 'stop_compositor; kill_stale "'"$dir"'"' EXIT
    local machine
    machine="$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(uname -r)"
    log "results in $logs ($machine)"
    local rep b
    for rep in $(seq "$reps"); do
        # Interleaved, so a host that gets slower during the run hurts every build alike.
        if wants "$only" shm_compositor; then measure_shm_compositor "$dir" "$out" "$rep"; fi
        if wants "$only" kwin; then
            for b in stock ours "${kwin_names[@]}"; do measure_one "$dir" "$out" kwin "$b" "$rep"; done
        fi
        if wants "$only" sway; then
            for b in stock ours "${names[@]}"; do measure_one "$dir" "$out" sway "$b" "$rep"; done
        fi
        if wants "$only" weston; then measure_one "$dir" "$out" weston debian "$rep"; fi
    done
    trap - EXIT
    kill_stale "$dir"
    # Which library the root holds: `build` installed it from this checkout (the lab records no more).
    local source
    source="deferred_unmap $(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)"
    python3 "$here/lab_report.py" "$out" --machine "$machine" --date "$stamp" --source "$source" \
        --json "$logs/results.json" | tee "$logs/report.txt"
}

# ---- main ----
[ $# -ge 2 ] || die "usage: lab.sh setup|build|measure|umount DIR [options]"
sub=$1; shift
root_dir=$(readlink -f "$1"); shift
case $sub in
setup) cmd_setup "$root_dir" "$@" ;;
build) cmd_build "$root_dir" "$@" ;;
measure) cmd_measure "$root_dir" "$@" ;;
umount) umount_root "$root_dir" ;;
*) die "unknown subcommand $sub" ;;
esac
