#!/usr/bin/env bash
# ports/lab.sh - build KWin 6.3.6 and wlroots 0.18.2 stock and patched with deferred_unmap inside a
# Debian trixie root, and measure them side by side with the project's stress client.
#
#   sudo ports/lab.sh setup   DIR        # trixie root, stock compositors, build deps, sources (~6 min)
#   sudo ports/lab.sh build   DIR        # stock + patched kwin_wayland, libwlroots, clients (~45 min first time)
#   sudo ports/lab.sh measure DIR [--reps N] [--variant NAME=PATCHFILE ...] [--only kwin|sway|weston|shm_compositor]
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
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$dir/src/deferred_unmap")
    in_root "$dir" "cd /src && cmake -S deferred_unmap -B du-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX=/usr/local -DDEFERRED_UNMAP_BUILD_TESTS=OFF -DDEFERRED_UNMAP_BUILD_EXAMPLES=ON \
        -DCMAKE_CXX_FLAGS=-Wno-error=missing-field-initializers >/src/du-configure.log 2>&1 \
        && ninja -C du-build -j$JOBS stress_client shm_compositor deferred_unmap_c >/src/du-build.log 2>&1 \
        && cmake --install du-build >/dev/null" || die "deferred_unmap build/install failed (see $dir/src/du-*.log)"
    [ -x "$dir/src/du-build/examples/wayland/stress_client" ] || die "stress_client did not build"
}

# stage_kwin DIR NAME: the build tree's kwin_wayland and libkwin into /opt/lab/kwin-NAME
stage_kwin() {
    local dir=$1 name=$2
    in_root "$dir" "rm -rf /opt/lab/kwin-$name && mkdir -p /opt/lab/kwin-$name && \
        cp -a /src/kwin-build/bin/kwin_wayland /src/kwin-build/bin/libkwin.so* /opt/lab/kwin-$name/"
}

build_kwin() {
    local dir=$1
    local src=/src/kwin-$KWIN_VERSION
    if [ ! -x "$dir/opt/lab/kwin-stock/kwin_wayland" ]; then
        log "kwin $KWIN_VERSION stock: configure + ninja kwin_wayland (1,230 steps, ~40 min on 2 cores)"
        in_root "$dir" "cd $src && sed -i 's/^set(PROJECT_DEP_VERSION \"[0-9.]*\")/set(PROJECT_DEP_VERSION \"$KWIN_DEP_VERSION\")/' CMakeLists.txt \
            && { [ -d .git ] || { git init -q && git add -A && git -c user.name=lab -c user.email=lab@localhost commit -qm 'kwin $KWIN_VERSION (PROJECT_DEP_VERSION $KWIN_DEP_VERSION)'; }; } \
            && git tag -f stock >/dev/null \
            && cmake -S . -B /src/kwin-build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF >/src/kwin-configure.log 2>&1 \
            && ninja -C /src/kwin-build -j$JOBS kwin_wayland" || die "kwin stock build failed"
        stage_kwin "$dir" stock
    fi
    log "kwin $KWIN_VERSION + ports/kwin/*.patch: incremental rebuild"
    rm -rf "$dir/src/patches-kwin" && mkdir -p "$dir/src/patches-kwin" && cp "$here"/kwin/*.patch "$dir/src/patches-kwin/"
    in_root "$dir" "cd $src && git reset -q --hard stock && git -c user.name=lab -c user.email=lab@localhost am -q /src/patches-kwin/*.patch \
        && cmake /src/kwin-build >/dev/null && ninja -C /src/kwin-build -j$JOBS kwin_wayland" || die "kwin patched build failed"
    stage_kwin "$dir" ours
    # The build tree is left patched; `git -C $src reset --hard stock` before rebuilding stock.
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
        && meson setup build --buildtype=debugoptimized -Dexamples=false -Dxwayland=disabled >/src/wlroots-$name.configure.log 2>&1 \
        && ninja -C build -j$JOBS >/src/wlroots-$name.build.log 2>&1 \
        && rm -rf /opt/lab/wlroots-$name && mkdir -p /opt/lab/wlroots-$name && cp -a build/libwlroots-0.18.so* /opt/lab/wlroots-$name/" \
        || die "wlroots $name build failed (see $dir/src/wlroots-$name.*.log)"
}

cmd_build() {
    need_root
    local dir=$1; shift
    local only=all
    while [ $# -gt 0 ]; do
        case $1 in
        --only) only=$2; shift 2 ;;
        *) die "build: unknown option $1" ;;
        esac
    done
    mount_root "$dir"
    # The sources are owned by whoever unpacked them; git in the root must not refuse them.
    in_root "$dir" "git config --global --get safe.directory >/dev/null || git config --global --add safe.directory '*'"
    install_library "$dir"
    if [ "$only" = all ] || [ "$only" = wlroots ]; then
        build_wlroots "$dir" stock
        build_wlroots "$dir" ours "$here"/wlroots/*.patch
    fi
    if [ "$only" = all ] || [ "$only" = kwin ]; then build_kwin "$dir"; fi
    log "build done"
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
