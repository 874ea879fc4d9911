#!/usr/bin/env bash
# ports/lab.sh - build KWin, wlroots and libwayland stock and patched with deferred_unmap inside a
# Debian root (trixie or sid), and measure them side by side with the project's stress client and,
# on the compositor, tools/shm-teardown-trace.
#
#   sudo ports/lab.sh setup   DIR [--suite trixie|sid]     # root, stock compositors, build deps, sources
#   sudo ports/lab.sh build   DIR [--only kwin|wlroots|wayland] [--builds LIST]
#                                 [--variant NAME=PATCH[,PATCH...] ...] [--kwin-variant NAME=PATCH[,...] ...]
#   sudo ports/lab.sh measure DIR [--reps N] [--only LIST] [--builds LIST] [--no-tracer | --tracer on|off|both]
#                                 [--shm-baseline REF]
#                                 [--variant NAME=PATCH[,...] ...] [--kwin-variant NAME=PATCH[,...] ...]
#   sudo ports/lab.sh umount  DIR                            # before rm -rf --one-file-system DIR
#
#   --suite:        trixie (default) or sid; remembered in DIR/etc/lab-suite, so build and measure
#                   take no flag. sid needs git clones holding wayland's and wlroots' release tags
#                   (the archive has no tarball of either): WAYLAND_GIT=PATH WLROOTS_GIT=PATH, or
#                   --wayland-git PATH --wlroots-git PATH.
#   --only:         build: one of kwin, wlroots, wayland; measure: a comma-separated list of
#                   kwin, sway, labwc, weston, mutter, shm_compositor
#   --builds:       a comma-separated list of build names (stock, ours, a variant's NAME)
#   --variant:      an extra wlroots build (a peer's patch, one of ours alone)
#   --kwin-variant: the KWin series plus more patches
#   --tracer both:  every burst and churn client once without the tracer and once with it (its overhead)
#   --shm-baseline REF: shm_compositor's queue modes also built from this repository at REF
#
# Several lab.sh may run at once on one root (a helper rebuilding kwin-ours while the stock wlroots
# builds): they wait for each other through flock on DIR/.lab-build.lock (the one KWin tree),
# DIR/.lab-build-wlroots.lock, DIR/.lab-build-wayland.lock and DIR/.lab-library.lock (exclusive to
# install the library, shared by every build but stock, which compile against it). measure takes
# all four, so no build runs during a measurement.
#
# See ports/README.md for what each step does, how long it takes and what it prints.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
JOBS=${JOBS:-$(nproc)}

# Per suite, in one place: the releases the suite ships (the lab builds the same ones, so that the
# suite's own compositor binaries load them), and the series for them under ports/.
suite_config() {
    SUITE=$1
    case $SUITE in
    trixie)
        KWIN_VERSION=6.3.6
        KWIN_DEP_VERSION=6.3.4   # 6.3.6 asks for KDecoration3/KWayland/Plasma 6.3.6; trixie ships 6.3.4
        KWIN_TESTING=OFF         # the backport series has no autotest
        WLROOTS_VERSION=0.18.2   # from the archive (apt-get source)
        WAYLAND_VERSION=         # not built: weston runs on Debian's libwayland
        KWIN_SERIES=kwin/backport-6.3
        WLROOTS_SERIES=wlroots/backport-0.18
        WAYLAND_SERIES=
        PACKAGES="kwin-wayland sway weston"
        BUILD_DEPS="kwin wlroots"
        ;;
    sid)
        KWIN_VERSION=6.7.4
        KWIN_DEP_VERSION=        # sid ships the KDecoration3/KWayland/Plasma 6.7.4 asks for
        KWIN_TESTING=ON          # the series adds an autotest, built from the same tree
        WLROOTS_VERSION=0.20.2   # from WLROOTS_GIT (no tarball in the archive)
        WAYLAND_VERSION=1.26.0   # from WAYLAND_GIT; Mutter 51 and weston 16 run on it
        KWIN_SERIES=kwin
        WLROOTS_SERIES=wlroots
        WAYLAND_SERIES=libwayland
        # wlr-randr gives labwc's headless output the 2880x1800 mode sway gets from its config.
        PACKAGES="kwin-wayland sway labwc weston mutter dbus-user-session gsettings-desktop-schemas bpftrace wlr-randr"
        # build-dep of a binary package picks its source: sid holds wlroots 0.19 and 0.20 sources.
        # libei-dev: KWin's autotests need it (BUILD_TESTING=ON); Debian's build of kwin does not.
        BUILD_DEPS="kwin libwlroots-0.20-dev wayland"
        PACKAGES="$PACKAGES libei-dev"
        ;;
    *) die "unknown suite '$SUITE' (trixie or sid)" ;;
    esac
    WLROOTS_LIB=libwlroots-${WLROOTS_VERSION%.*}.so
}

die() { echo "lab.sh: $*" >&2; exit 1; }
log() { echo "lab.sh: $*" >&2; }

need_root() { [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, bind mounts)"; }

# load_suite DIR: the suite setup recorded in the root (roots made before suites existed are trixie)
load_suite() {
    local suite=trixie
    [ -r "$1/etc/lab-suite" ] && suite=$(cat "$1/etc/lab-suite")
    suite_config "$suite"
}

# lock VAR FILE -s|-x: flock FILE on a new descriptor (stored in VAR), saying so when it has to wait
# (its own variable has a name no caller uses: bash's locals are dynamically scoped)
lock() {
    local _lock_var=$1 _lock_file=$2 _lock_mode=$3 _lock_fd
    exec {_lock_fd}>>"$_lock_file"
    printf -v "$_lock_var" %s "$_lock_fd"
    flock -n "$_lock_mode" "$_lock_fd" \
        || { log "waiting for $_lock_file (another lab.sh holds it)"; flock "$_lock_mode" "$_lock_fd"; }
}

# series_patches KIND-DIR: the *.patch files of ports/KIND-DIR in order (none when it does not exist)
series_patches() {
    local d=$here/$1
    [ -d "$d" ] || return 0
    find "$d" -maxdepth 1 -name '*.patch' | LC_ALL=C sort
}

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

# check_git_tag VAR PATH TAG: PATH (from VAR) is a git repository holding TAG
check_git_tag() {
    local var=$1 path=$2 tag=$3
    [ -n "$path" ] || die "$SUITE needs a git clone holding tag $tag (no tarball in the archive): give its path as $var=PATH or --$(echo "${var%_GIT}" | tr 'A-Z' 'a-z')-git PATH"
    git -c safe.directory='*' -C "$path" rev-parse -q --verify "refs/tags/$tag^{commit}" >/dev/null \
        || die "$var=$path: not a git repository with tag $tag"
}

# git_source PATH TAG NAME DIR: `git archive` of TAG from the clone at PATH into DIR/src/NAME
git_source() {
    local path=$1 tag=$2 name=$3 dir=$4
    [ -d "$dir/src/$name" ] && return 0
    git -c safe.directory='*' -C "$path" archive --prefix="$name/" "refs/tags/$tag" | tar -x -C "$dir/src"
}

install_packages() {
    local dir=$1
    log "stock compositors, build dependencies of $BUILD_DEPS, build tools (trixie ~4 min)"
    in_root "$dir" "apt-get update -q && apt-get install -y -q --no-install-recommends \
        $PACKAGES dbus dbus-daemon procps psmisc jq \
        && apt-get build-dep -y -q $BUILD_DEPS \
        && apt-get install -y -q --no-install-recommends build-essential cmake ninja-build meson pkg-config git \
           libwayland-dev wayland-protocols xz-utils ca-certificates python3 patch"
}

# fetch_sources DIR: KWin from the archive, wlroots and libwayland from the archive (trixie) or the
# git clones (sid), each unpacked to DIR/src/NAME-VERSION
fetch_sources() {
    local dir=$1
    log "sources: kwin $KWIN_VERSION, wlroots $WLROOTS_VERSION${WAYLAND_VERSION:+, wayland $WAYLAND_VERSION}"
    mkdir -p "$dir/src"
    in_root "$dir" "cd /src && { [ -d kwin-$KWIN_VERSION ] || { apt-get source -q --download-only kwin || true; \
        tar xf kwin_$KWIN_VERSION.orig.tar.xz; }; }"
    [ -d "$dir/src/kwin-$KWIN_VERSION" ] || die "kwin $KWIN_VERSION source did not unpack"
    if [ "$SUITE" = trixie ]; then
        in_root "$dir" "cd /src && { [ -d wlroots-$WLROOTS_VERSION ] || { apt-get source -q --download-only wlroots \
            && tar xf wlroots_$WLROOTS_VERSION.orig.tar.*; }; }"
    else
        git_source "$WLROOTS_GIT" "$WLROOTS_VERSION" "wlroots-$WLROOTS_VERSION" "$dir"
        git_source "$WAYLAND_GIT" "$WAYLAND_VERSION" "wayland-$WAYLAND_VERSION" "$dir"
        [ -d "$dir/src/wayland-$WAYLAND_VERSION" ] || die "wayland $WAYLAND_VERSION source did not unpack"
    fi
    [ -d "$dir/src/wlroots-$WLROOTS_VERSION" ] || die "wlroots $WLROOTS_VERSION source did not unpack"
}

cmd_setup() {
    need_root
    local dir=$1 suite=trixie; shift
    while [ $# -gt 0 ]; do
        case $1 in
        --suite) suite=$2; shift 2 ;;
        --wayland-git) WAYLAND_GIT=$2; shift 2 ;;
        --wlroots-git) WLROOTS_GIT=$2; shift 2 ;;
        *) die "setup: unknown option $1" ;;
        esac
    done
    suite_config "$suite"
    if [ -r "$dir/etc/lab-suite" ] && [ "$(cat "$dir/etc/lab-suite")" != "$suite" ]; then
        die "$dir is a $(cat "$dir/etc/lab-suite") root, not $suite"
    fi
    if [ "$suite" = sid ]; then  # before minutes of apt, not after
        check_git_tag WLROOTS_GIT "${WLROOTS_GIT:-}" "$WLROOTS_VERSION"
        check_git_tag WAYLAND_GIT "${WAYLAND_GIT:-}" "$WAYLAND_VERSION"
    fi
    command -v debootstrap >/dev/null || die "install debootstrap first (apt-get install debootstrap)"
    if [ ! -e "$dir/etc/debian_version" ]; then
        log "debootstrap $suite into $dir (trixie ~1 min)"
        debootstrap --variant=minbase "$suite" "$dir"
    fi
    echo "$suite" >"$dir/etc/lab-suite"
    mount_root "$dir"
    cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
    add_deb_src "$dir"
    # sid's Release file outlives its Valid-Until on mirrors that lag; apt would refuse it.
    [ "$suite" != sid ] || echo 'Acquire::Check-Valid-Until "false";' >"$dir/etc/apt/apt.conf.d/80lab-valid-until"
    install_packages "$dir"
    fetch_sources "$dir"
    log "setup done: $dir ($suite)"
}

# ---- build ----
# Inside the root:
#   /src/deferred_unmap          a copy of this checkout (git ls-files); its Debian packages installed
#                                (or, when they do not build, cmake --install to /usr/local)
#   /src/du-build                its CMake build: stress_client, shm_compositor
#   /src/kwin-VERSION            KWin; stock first, then the series in ports/KWIN_SERIES applied with git am
#   /src/kwin-build              one build tree for both (the patched build is incremental, ~minutes)
#   /opt/lab/kwin-NAME/          kwin_wayland + libkwin.so.6 of build NAME, run with LD_LIBRARY_PATH
#   /src/wlroots-NAME/           one pristine copy of wlroots per build (stock, ours, NAME...)
#   /opt/lab/wlroots-NAME/       its libwlroots-X.Y.so, loaded by the suite's sway (and labwc) via LD_LIBRARY_PATH
#   /src/wayland-NAME/           (sid) one copy of libwayland per build
#   /opt/lab/wayland-NAME/       its libwayland-server.so.0*, loaded by weston and Mutter via LD_LIBRARY_PATH

# library_files: NUL-separated, this checkout's tracked and untracked files that exist (a file
# deleted but not yet committed is skipped) and that the library, its packages or the lab's clients
# are built from: not ports/, docs/, tests/, .ci/ or README.md, so that an edit there (a result, this script)
# does not rebuild and reinstall the packages
library_files() {
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard -- . ':!ports' ':!docs' ':!README.md' ':!tests' ':!.ci' |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done)
}

# copy_checkout DIR: library_files into DIR/src/deferred_unmap
copy_checkout() {
    local dir=$1
    rm -rf "$dir/src/deferred_unmap" && mkdir -p "$dir/src/deferred_unmap"
    library_files | (cd "$repo" && xargs -0 cp --parents -t "$dir/src/deferred_unmap")
}

# The include directory of the installed library: /usr/local when it came from cmake --install.
library_headers() {
    if [ -d "$1/usr/local/include/deferred_unmap" ]; then echo "$1/usr/local/include/deferred_unmap"
    else echo "$1/usr/include/deferred_unmap"; fi
}

# package_library DIR: the project's Debian packages built in the root and installed (issue 34:
# compositors build against what distributions ship). A /usr/local copy from an earlier fallback
# would shadow the package's headers, so it goes.
package_library() {
    in_root "$1" "cd /src/deferred_unmap && rm -f /src/*.deb /src/*.changes /src/*.buildinfo \
        && apt-get build-dep -y -q ./ && dpkg-buildpackage -us -uc -b \
        && apt-get install -y -q --reinstall --allow-downgrades /src/libdeferred-unmap-dev_*.deb /src/deferred-unmap-tools_*_all.deb \
        && rm -rf /usr/local/include/deferred_unmap /usr/local/lib/cmake/deferred_unmap \
           /usr/local/lib/pkgconfig/deferred_unmap*.pc /usr/local/lib/libdeferred_unmap_c.a" >"$1/src/du-package.log" 2>&1
}

cmake_install_library() {
    in_root "$1" "cmake --install /src/du-build >/dev/null"
}

# checkout_digest: one hash of the names and contents of the files copy_checkout copies
checkout_digest() {
    library_files | LC_ALL=C sort -z | (cd "$repo" && xargs -0 -r sha256sum --) | sha256sum | cut -d' ' -f1
}

# install_library DIR: the library and the lab's clients from this checkout into the root, unless
# the root has them from this very content already (the packages take minutes to build). Installing
# waits, on DIR/.lab-library.lock, for the builds that compile against the installed headers.
install_library() {
    local dir=$1 sum fd
    sum=$(checkout_digest)
    if [ "$(cat "$dir/src/du-installed.sum" 2>/dev/null)" = "$sum" ] && [ -x "$dir$CLIENT" ]; then
        log "deferred_unmap: installed already from this content ($(cat "$dir/src/du-installed.how"))"
        return 0
    fi
    lock fd "$dir/.lab-library.lock" -x
    log "deferred_unmap: copy of $repo, CMake build of stress_client and shm_compositor (~1 min)"
    copy_checkout "$dir"
    in_root "$dir" "cd /src && cmake -S deferred_unmap -B du-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX=/usr/local -DDEFERRED_UNMAP_BUILD_TESTS=OFF -DDEFERRED_UNMAP_BUILD_EXAMPLES=ON >/src/du-configure.log 2>&1 \
        && ninja -C du-build -j$JOBS stress_client shm_compositor deferred_unmap_c >/src/du-build.log 2>&1" \
        || die "deferred_unmap build failed (see $dir/src/du-*.log)"
    [ -x "$dir$CLIENT" ] || die "stress_client did not build"
    log "deferred_unmap: Debian packages (dpkg-buildpackage -b in the root), then apt install"
    if package_library "$dir"; then
        echo "Debian packages $(in_root "$dir" "dpkg-query -W -f '\${Version}' libdeferred-unmap-dev")" >"$dir/src/du-installed.how"
    else
        log "deferred_unmap: the Debian packages did not build or install (end of $dir/src/du-package.log below); cmake --install to /usr/local instead"
        tail -5 "$dir/src/du-package.log" >&2
        cmake_install_library "$dir" || die "deferred_unmap: cmake --install failed too"
        echo "cmake --install (packages failed: see /src/du-package.log)" >"$dir/src/du-installed.how"
    fi
    echo "$sum" >"$dir/src/du-installed.sum"
    exec {fd}>&-
}

# digest DIR [FIND-TEST...]: one hash of the names and contents of the files under DIR (that pass
# the tests); fails when DIR is missing or a file cannot be read
digest() {
    local top=$1; shift
    [ -d "$top" ] || return 1
    (cd "$top" && find . "$@" -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum --) | sha256sum | cut -d' ' -f1
}

# meson_feature SRC: -DNAME=enabled for the series' deferred_unmap feature option (auto by default,
# so a build that silently missed the library would be measured as stock); nothing when there is none
meson_feature() {
    local opt
    opt=$(cat "$1"/meson.options "$1"/meson_options.txt 2>/dev/null | grep -o "option('[^']*deferred[^']*'" | head -1 | cut -d"'" -f2 || true)
    [ -z "$opt" ] || echo "-D$opt=enabled"
}

# ---- KWin ----

# kwin_stamp DIR NAME [PATCH...]: what kwin-NAME is built from, by content (a patch rewritten with an
# older mtime, or a library reinstalled unchanged, must not decide): the installed library's
# headers, this checkout's series and each extra patch in order; stock is built from neither.
kwin_stamp() {
    local dir=$1 name=$2 library series; shift 2
    [ "$name" != stock ] || { echo "stock kwin $KWIN_VERSION"; return 0; }
    library=$(digest "$(library_headers "$dir")") || return 1
    series=$(digest "$here/$KWIN_SERIES" -maxdepth 1 -name '*.patch') || return 1
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

build_kwin_stock() {
    local dir=$1 src=/src/kwin-$KWIN_VERSION dep_sed=:
    [ ! -x "$dir/opt/lab/kwin-stock/kwin_wayland" ] || { log "kwin stock: staged already"; return 0; }
    [ -z "$KWIN_DEP_VERSION" ] \
        || dep_sed="sed -i 's/^set(PROJECT_DEP_VERSION \"[0-9.]*\")/set(PROJECT_DEP_VERSION \"$KWIN_DEP_VERSION\")/' CMakeLists.txt"
    log "kwin $KWIN_VERSION stock: configure (BUILD_TESTING=$KWIN_TESTING) + ninja kwin_wayland (6.3.6: ~40 min on 2 cores)"
    in_root "$dir" "cd $src && $dep_sed \
        && { [ -d .git ] || { git init -q && git add -A && git -c user.name=lab -c user.email=lab@localhost commit -qm 'kwin $KWIN_VERSION${KWIN_DEP_VERSION:+ (PROJECT_DEP_VERSION $KWIN_DEP_VERSION)}'; }; } \
        && git tag -f stock >/dev/null \
        && cmake -S . -B /src/kwin-build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=$KWIN_TESTING >/src/kwin-configure.log 2>&1 \
        && ninja -C /src/kwin-build -j$JOBS kwin_wayland" || die "kwin stock build failed (configure log: $dir/src/kwin-configure.log)"
    stage_kwin "$dir" stock "$(kwin_stamp "$dir" stock)"
}

# apply_kwin_series DIR: the tree reset to stock and the series applied with git am; a series that
# does not apply leaves the tree at stock and is tried again next time
apply_kwin_series() {
    local dir=$1 src=/src/kwin-$KWIN_VERSION
    rm -rf "$dir/src/patches-kwin" && mkdir -p "$dir/src/patches-kwin"
    local patches
    mapfile -t patches < <(series_patches "$KWIN_SERIES")
    cp "${patches[@]}" "$dir/src/patches-kwin/"
    if ! in_root "$dir" "cd $src && git reset -q --hard stock && git -c user.name=lab -c user.email=lab@localhost am -q /src/patches-kwin/*.patch"; then
        in_root "$dir" "cd $src && git am --abort; git reset -q --hard stock" || true
        rm -rf "$dir/src/patches-kwin"
        die "kwin ours: ports/$KWIN_SERIES does not apply to kwin $KWIN_VERSION (tree left at stock)"
    fi
    # The series makes the library optional: a configure that did not find it would build stock.
    in_root "$dir" "cmake /src/kwin-build >/src/kwin-configure-ours.log 2>&1 && grep -q '^deferred_unmap_DIR:PATH=/' /src/kwin-build/CMakeCache.txt" \
        || die "kwin ours: configure failed or did not find deferred_unmap (see $dir/src/kwin-configure-ours.log)"
}

build_kwin_ours() {
    local dir=$1 stamp src=/src/kwin-$KWIN_VERSION
    [ -n "$(series_patches "$KWIN_SERIES")" ] || { log "kwin ours: no series in ports/$KWIN_SERIES yet: skipped"; return 0; }
    [ -x "$dir/opt/lab/kwin-stock/kwin_wayland" ] || die "kwin ours: build stock first (it tags the tree)"
    stamp=$(kwin_stamp "$dir" ours) || die "kwin: cannot hash the installed library or the series"
    log "kwin $KWIN_VERSION + ports/$KWIN_SERIES/*.patch: incremental rebuild"
    # An interrupted variant leaves its patches in the tree: what is staged as kwin-ours must be
    # the series alone.
    in_root "$dir" "cd $src && git diff --quiet HEAD" \
        || log "kwin: reverting changes beyond the series (an interrupted variant?)"
    revert_kwin_tree "$dir" || die "kwin: cannot reset $src to the series"
    # Same series as last time: leave the tree alone (nothing to rebuild).
    if ! diff -rq "$here/$KWIN_SERIES" "$dir/src/patches-kwin" -x README.md -x alternatives >/dev/null 2>&1; then
        apply_kwin_series "$dir"
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
    [ -d "$(library_headers "$dir")" ] || die "kwin variant $name: the library is not installed in $dir (run lab.sh build first)"
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
    log "kwin $KWIN_VERSION + ports/$KWIN_SERIES/*.patch + $list: incremental rebuild"
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

# ---- wlroots and libwayland: one pristine copy per build ----

# build_meson DIR PROJECT VERSION NAME MESON-OPTIONS STAGE-GLOB [PATCH...]: /src/PROJECT-VERSION
# copied to /src/PROJECT-NAME, the patches applied in order, built, STAGE-GLOB (relative to the
# build tree) copied to /opt/lab/PROJECT-NAME/
build_meson() {
    local dir=$1 project=$2 version=$3 name=$4 options=$5 stage=$6; shift 6
    local src=/src/$project-$name p
    log "$project $version $name: meson (~1 min)"
    rm -rf "$dir$src" "$dir/src/patches-$project-$name" && mkdir -p "$dir/src/patches-$project-$name"
    cp -a "$dir/src/$project-$version" "$dir$src"
    local i=0  # numbered in the order given: a variant's own patch may sort before the series
    for p in "$@"; do i=$((i + 1)); cp "$p" "$dir/src/patches-$project-$name/$(printf %02d $i)-$(basename "$p")"; done
    apply_patches "$dir" "$src" "$project" "$name" || die "$project $name: the patches do not apply to $project $version"
    [ $# -eq 0 ] || options="$options $(meson_feature "$dir$src")"
    in_root "$dir" "cd $src && meson setup build --buildtype=debugoptimized $options >/src/$project-$name.configure.log 2>&1 \
        && ninja -C build -j$JOBS >/src/$project-$name.build.log 2>&1 \
        && rm -rf /opt/lab/$project-$name && mkdir -p /opt/lab/$project-$name && cp -a build/$stage /opt/lab/$project-$name/ \
        && { [ ! -e /src/$project-$name.fuzz ] || cp /src/$project-$name.fuzz /opt/lab/$project-$name/applied-with-fuzz; }" \
        || die "$project $name build failed (see $dir/src/$project-$name.*.log)"
}

# apply_patches DIR SRC PROJECT NAME: /src/patches-PROJECT-NAME/* applied to SRC in order. Our series
# must apply as it is; a variant (a peer's patch written for another release) may apply with fuzz 3,
# said in the log and in /opt/lab/PROJECT-NAME/applied-with-fuzz (MR !4755 on wlroots 0.20.2: its
# util/meson.build hunk lands one line off in a list of files).
apply_patches() {
    local dir=$1 src=$2 project=$3 name=$4 fuzz=0
    case $name in stock|ours) ;; *) fuzz=3 ;; esac
    rm -f "$dir/src/$project-$name.fuzz"
    in_root "$dir" "cd $src && for p in \$(ls /src/patches-$project-$name/* 2>/dev/null | sort); do
        if patch -p1 -s --dry-run <\$p >/dev/null; then patch -p1 -s <\$p
        elif [ $fuzz -gt 0 ] && patch -p1 --dry-run -F$fuzz <\$p >/dev/null; then
            patch -p1 -F$fuzz <\$p | sed \"s|^|\$(basename \$p): |\" | tee -a /src/$project-$name.fuzz >&2
        else patch -p1 --dry-run <\$p >&2; exit 1; fi
    done"
}

build_wlroots() {  # build_wlroots DIR NAME [PATCH...]
    local dir=$1 name=$2; shift 2
    build_meson "$dir" wlroots "$WLROOTS_VERSION" "$name" -Dexamples=false "$WLROOTS_LIB" "$@"
}

build_wayland() {  # build_wayland DIR NAME [PATCH...]
    local dir=$1 name=$2; shift 2
    build_meson "$dir" wayland "$WAYLAND_VERSION" "$name" "-Ddocumentation=false -Ddtd_validation=false -Dtests=false" \
        'src/libwayland-server.so*' "$@"
}

# variant_patches SPEC: NAME=PATCH[,PATCH...] checked; prints NAME then the patches, one a line
variant_patches() {
    local spec=$1 name=${1%%=*} list=${1#*=} p ps
    [ "$name" != "$spec" ] && [ -n "$name" ] || die "--variant wants NAME=PATCHFILE[,PATCHFILE...], got $spec"
    case $name in stock|ours|debian) die "variant name $name is taken" ;; esac
    echo "$name"
    IFS=, read -r -a ps <<<"$list"
    for p in "${ps[@]}"; do [ -r "$p" ] || die "variant $name: cannot read $p"; echo "$p"; done
}

# build_variant DIR NAME=PATCH[,PATCH...]: an extra wlroots build (a peer's patch, one of ours alone)
build_variant() {
    local lines
    mapfile -t lines < <(variant_patches "$2") && [ ${#lines[@]} -gt 0 ] || exit 1
    build_wlroots "$1" "${lines[@]}"
}

# alternative_name PATCH: ports/libwayland/alternatives/0001-one-thread.patch -> one-thread
alternative_name() { basename "$1" .patch | sed 's/^[0-9]*-//'; }

# build_wayland_alternative DIR PATCH: a variant of libwayland: the alternative alone on stock, or,
# when it does not apply there, on top of the series
build_wayland_alternative() {
    local dir=$1 patch=$2 name
    name=$(alternative_name "$patch")
    if (build_wayland "$dir" "$name" "$patch"); then return 0; fi
    log "wayland $name: not alone on stock; on top of ports/$WAYLAND_SERIES"
    local series
    mapfile -t series < <(series_patches "$WAYLAND_SERIES")
    build_wayland "$dir" "$name" "${series[@]}" "$patch"
}

# ---- cmd_build ----

failed=()
# attempt WHAT CMD...: CMD in a subshell (its die ends only that build); a failure is reported and
# the other builds go on
attempt() {
    local what=$1; shift
    if ! ("$@"); then
        log "FAILED: $what (skipped; the other builds go on)"
        failed+=("$what")
    fi
}

# build_step DIR LOCK-FILE BUILDS NAME CMD...: CMD under LOCK-FILE when NAME is among BUILDS; a build
# other than stock compiles against the installed library, so it also holds DIR/.lab-library.lock
# shared (taken first, as measure takes it, so the two cannot wait for each other)
build_step() {
    local dir=$1 lockfile=$2 builds=$3 name=$4 library=no; shift 4
    wants "$builds" "$name" || return 0
    [ "$name" = stock ] || library=yes
    attempt "$*" with_locks "$dir" "$lockfile" "$library" "$@"
}
with_locks() {
    local dir=$1 lockfile=$2 library=$3 fd_lib fd; shift 3
    [ "$library" = no ] || lock fd_lib "$dir/.lab-library.lock" -s
    lock fd "$dir/$lockfile" -x
    "$@"
}

build_kwin_all() {
    local dir=$1 builds=$2 v; shift 2
    build_step "$dir" .lab-build.lock "$builds" stock build_kwin_stock "$dir"
    build_step "$dir" .lab-build.lock "$builds" ours build_kwin_ours "$dir"
    for v in "$@"; do build_step "$dir" .lab-build.lock "$builds" "${v%%=*}" build_kwin_variant "$dir" "$v"; done
}

build_wlroots_all() {
    local dir=$1 builds=$2 v series; shift 2
    build_step "$dir" .lab-build-wlroots.lock "$builds" stock build_wlroots "$dir" stock
    mapfile -t series < <(series_patches "$WLROOTS_SERIES")
    if [ ${#series[@]} -gt 0 ]; then
        build_step "$dir" .lab-build-wlroots.lock "$builds" ours build_wlroots "$dir" ours "${series[@]}"
    else
        log "wlroots ours: no series in ports/$WLROOTS_SERIES yet: skipped"
    fi
    for v in "$@"; do build_step "$dir" .lab-build-wlroots.lock "$builds" "${v%%=*}" build_variant "$dir" "$v"; done
}

build_wayland_all() {
    local dir=$1 builds=$2 series p
    [ -n "$WAYLAND_VERSION" ] || return 0
    build_step "$dir" .lab-build-wayland.lock "$builds" stock build_wayland "$dir" stock
    mapfile -t series < <(series_patches "$WAYLAND_SERIES")
    if [ ${#series[@]} -gt 0 ]; then
        build_step "$dir" .lab-build-wayland.lock "$builds" ours build_wayland "$dir" ours "${series[@]}"
    else
        log "wayland ours: no series in ports/$WAYLAND_SERIES yet: skipped"
    fi
    for p in $(series_patches "$WAYLAND_SERIES/alternatives"); do
        build_step "$dir" .lab-build-wayland.lock "$builds" "$(alternative_name "$p")" build_wayland_alternative "$dir" "$p"
    done
}

cmd_build() {
    need_root
    local dir=$1; shift
    local only=all builds=all variants=() kwin_variants=()
    while [ $# -gt 0 ]; do
        case $1 in
        --only) only=$2; shift 2 ;;
        --builds) builds=$2; shift 2 ;;
        --variant) variants+=("$2"); shift 2 ;;
        --kwin-variant) kwin_variants+=("$2"); shift 2 ;;
        *) die "build: unknown option $1" ;;
        esac
    done
    load_suite "$dir"
    mount_root "$dir"
    # The sources are owned by whoever unpacked them; git in the root must not refuse them.
    in_root "$dir" "git config --global --get safe.directory >/dev/null || git config --global --add safe.directory '*'"
    install_library "$dir"
    if wants "$only" wlroots; then build_wlroots_all "$dir" "$builds" "${variants[@]}"; fi
    if wants "$only" wayland; then build_wayland_all "$dir" "$builds"; fi
    if wants "$only" kwin; then build_kwin_all "$dir" "$builds" "${kwin_variants[@]}"; fi
    [ ${#failed[@]} -eq 0 ] || die "build done; failed: $(printf '%s; ' "${failed[@]}")"
    log "build done ($SUITE)"
}

# ---- measure ----
# Every process runs chrooted in DIR, as root, with a fresh XDG_RUNTIME_DIR per compositor start.
CLIENT=/src/du-build/examples/wayland/stress_client
SHM_COMPOSITOR=/src/du-build/examples/wayland/shm_compositor
# 52 pools of 2880x1800 XRGB (19.8 MiB buffers in 20 MiB pools) committed one per frame, then all
# destroyed at once: one 1 GB burst at frame ~53. --prepare-ahead draws every frame's memory before
# the first frame: on VMs whose balloon hands freed pages back to the host, first-touching a fresh
# pool costs the client itself up to ~80 ms, which would land in its gaps whatever the compositor did
# (client_work_max_ms in the results says how long the client's own frames took). --linger: the
# pools the client still has at its last frame go with its connection LINGER s later, so that the
# tracer's bursts that begin before then are the client's (a burst ends after 100 ms without a pool
# freed), and shm_compositor's own exit, which flushes its queue on the main thread, comes after.
# --frames 100: 48 frames after the burst, so that the gaps after it outlast a deferred teardown
# (libwayland's worker took 0.67-0.69 s in weston, run 20261207T2207Z, where 12 frames gave 0.24 s);
# 104 would release 52 buffers again and make a second burst.
LINGER=3
BURST_ARGS=(--width 2880 --height 1800 --pool-mib 20 --burst 52 --resize-every 0 --frames 100 --linger $LINGER --prepare-ahead)
# A fresh 30 MiB pool every frame (announced at half size, grown by wl_shm_pool.resize every 4th).
CHURN_ARGS=(--width 2880 --height 1800 --pool-mib 30 --burst 1 --resize-every 4 --frames 150 --linger $LINGER --prepare-ahead)
SIMPLE_SHM_SECONDS=3
TRACER=$repo/tools/shm-teardown-trace
TRACEFS=/sys/kernel/tracing

comp_pid=        # the compositor process itself
wrapper_pid=     # what we started (dbus-run-session for KWin and Mutter, else the compositor)
run_dir=         # its XDG_RUNTIME_DIR inside the root
socket=
tracer_pid=

# family KIND: the library a compositor's builds swap (its /opt/lab/FAMILY-BUILD)
family() {
    case $1 in
    kwin) echo kwin ;;
    sway|labwc) echo wlroots ;;
    weston|mutter) echo wayland ;;
    esac
}

# lib_pattern FAMILY: what that library's path looks like in /proc/PID/maps
lib_pattern() {
    case $1 in
    kwin) echo 'libkwin\.so' ;;
    wlroots) echo "${WLROOTS_LIB//./\\.}" ;;
    wayland) echo 'libwayland-server\.so' ;;
    esac
}

# staged FAMILY BUILD: the build's library is in /opt/lab
staged() {
    local d=$root_dir/opt/lab/$1-$2
    case $1 in
    kwin) [ -x "$d/kwin_wayland" ] ;;
    wlroots) [ -e "$d/$WLROOTS_LIB" ] ;;
    wayland) [ -e "$d/libwayland-server.so.0" ] ;;
    esac
}

# Processes whose root is DIR: compositors left over from an interrupted run skew every later one.
stale_pids() {
    local dir=$1 p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$dir" ] || continue
        case $(cat "$p/comm" 2>/dev/null) in
        kwin_wayland|sway|labwc|weston|mutter|dbus-daemon|dbus-run-sessio|shm_compositor|stress_client|weston-simple-s|Xwayland)
            echo "${p#/proc/}" ;;
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

# compositor_command KIND BUILD: the environment and command line that start KIND headless at
# 2880x1800 in the root (run_dir set); the config files it needs are written here
compositor_command() {
    local kind=$1 build=$2 ld=
    [ "$build" = debian ] || ld=LD_LIBRARY_PATH=/opt/lab/$(family "$kind")-$build
    local wlr=(WLR_BACKENDS=headless WLR_RENDERER=pixman WLR_LIBINPUT_NO_DEVICES=1)
    case $kind in
    kwin)
        # KWIN_COMPOSE=Q: QPainter, the root has no GPU
        echo $ld KWIN_COMPOSE=Q QT_LOGGING_RULES=kwin_shm.debug=true dbus-run-session -- /opt/lab/kwin-$build/kwin_wayland \
            --virtual --socket lab-kwin --width 2880 --height 1800 --no-lockscreen --no-global-shortcuts ;;
    sway)
        printf 'output HEADLESS-1 mode --custom 2880x1800@60Hz\nxwayland disable\n' >"$root_dir$run_dir.sway.conf"
        echo $ld "${wlr[@]}" sway -d -c "$run_dir.sway.conf" ;;
    labwc)
        # labwc reads DIR/rc.xml; the defaults are all it needs (no Xwayland is installed).
        mkdir -p "$root_dir$run_dir.labwc" && echo '<labwc_config/>' >"$root_dir$run_dir.labwc/rc.xml"
        echo $ld "${wlr[@]}" labwc -d -C "$run_dir.labwc" ;;
    weston)
        echo $ld weston --backend=headless --renderer=pixman --width=2880 --height=1800 --socket=lab-weston --idle-time=0 ;;
    mutter)
        echo $ld dbus-run-session -- mutter --headless --wayland --no-x11 --virtual-monitor 2880x1800 --wayland-display=lab-mutter ;;
    *) die "unknown compositor $kind" ;;
    esac
}

# find_socket KIND: the socket KIND makes (sway and labwc take the first free wayland-N of their runtime dir)
find_socket() {
    case $1 in
    kwin) echo lab-kwin ;;
    weston) echo lab-weston ;;
    mutter) echo lab-mutter ;;
    *) (cd "$root_dir$run_dir" 2>/dev/null && ls wayland-[0-9] 2>/dev/null | head -1) || true ;;
    esac
}

# start_compositor DIR KIND BUILD: sets comp_pid, wrapper_pid, socket, run_dir
start_compositor() {
    local dir=$1 kind=$2 build=$3 cmd
    run_dir=/run/lab/$kind-$build-$$
    rm -rf "$dir$run_dir" && mkdir -p "$dir$run_dir" && chmod 700 "$dir$run_dir"
    local log=$dir$run_dir.log
    cmd=$(compositor_command "$kind" "$build")
    # shellcheck disable=SC2086  # cmd is words made above, none with spaces
    chroot "$dir" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 XDG_RUNTIME_DIR=$run_dir \
        $cmd >"$log" 2>&1 &
    wrapper_pid=$!
    local i
    for i in $(seq 200); do
        socket=$(find_socket "$kind")
        [ -n "$socket" ] && [ -S "$dir$run_dir/$socket" ] && break
        kill -0 "$wrapper_pid" 2>/dev/null || { tail -20 "$log" >&2; die "$kind $build exited at start (log: $log)"; }
        sleep 0.1
    done
    [ -S "$dir$run_dir/$socket" ] || { tail -20 "$log" >&2; die "$kind $build: no socket after 20 s (log: $log)"; }
    case $kind in
    kwin) comp_pid=$(pgrep -P "$wrapper_pid" -x kwin_wayland | head -1) ;;
    mutter) comp_pid=$(pgrep -P "$wrapper_pid" -x mutter | head -1) ;;
    *) comp_pid=$wrapper_pid ;;
    esac
    [ -n "$comp_pid" ] || die "$kind $build: no compositor process under dbus-run-session $wrapper_pid"
    # labwc's headless output starts small; give it sway's size (wlr-randr is a client of it).
    [ "$kind" != labwc ] || wayland_client "$dir" wlr-randr --output HEADLESS-1 --custom-mode 2880x1800 >>"$log" 2>&1 \
        || log "labwc $build: wlr-randr could not set 2880x1800 (see $log)"
    sleep 2  # let it settle (KWin loads its plugins, weston its shell)
}

# wayland_client DIR CMD...: CMD in the root as a client of the running compositor
wayland_client() {
    local dir=$1; shift
    chroot "$dir" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR=$run_dir \
        WAYLAND_DISPLAY=$socket "$@"
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
    comp_pid='' wrapper_pid=''
}

# The library the compositor really loaded (LD_LIBRARY_PATH must have won over the system copy).
loaded_lib() {
    local pid=$1 pattern=$2 path
    path=$(grep -o "/[^ ]*${pattern}[^ ]*" "/proc/$pid/maps" 2>/dev/null | sort -u | head -1)
    echo "${path#"$root_dir"}"  # maps shows paths as the host sees them
}

# record FILE KEY=VALUE|KEY:=JSON... : one JSON object per line (KEY:=JSON puts JSON in as it is)
record() {
    local file=$1; shift
    local kv first=1
    printf '{' >>"$file"
    for kv in "$@"; do
        local k=${kv%%=*} v=${kv#*=}
        [ $first = 1 ] || printf ', ' >>"$file"
        first=0
        if [[ $k == *: ]]; then
            printf '"%s": %s' "${k%:}" "$v" >>"$file"
        elif [[ $v =~ ^-?[0-9]+(\.[0-9]+)?$ ]] || [ "$v" = true ] || [ "$v" = false ] || [ "$v" = null ]; then
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

# ---- the tracer (runs on the host, against the compositor's host PID) ----

# start_tracer PID FILE: tools/shm-teardown-trace --json on PID, its lines to FILE; returns once
# bpftrace is attached (it says so on stderr), so the client's first pool is seen
start_tracer() {
    local pid=$1 file=$2 i
    "$TRACER" --json "$pid" >"$file" 2>"$file.err" &
    tracer_pid=$!
    for i in $(seq 300); do
        grep -q 'shm-teardown-trace: tracing' "$file.err" 2>/dev/null && return 0
        kill -0 "$tracer_pid" 2>/dev/null || break
        sleep 0.1
    done
    log "tracer did not attach to $pid: $(tail -2 "$file.err" | tr '\n' ' ')"
    stop_tracer
    return 1
}

# stop_tracer: SIGINT, as a user's Ctrl-C: the tracer flushes its last burst and its summary
stop_tracer() {
    [ -n "$tracer_pid" ] || return 0
    kill -INT "$tracer_pid" 2>/dev/null || true
    wait "$tracer_pid" 2>/dev/null || true
    tracer_pid=
}

# mono_ns: CLOCK_MONOTONIC in ns, the clock of the tracer's start_ns (bpftrace's nsecs)
mono_ns() { python3 -c 'import time; print(time.monotonic_ns())'; }

# trace_cutoff END: the tracer's bursts that count for a client that ended at END (mono_ns): those
# that begin more than 0.5 s before it. The client lingers LINGER s after its last frame, so what
# the compositor still frees of its pools then (its idle drains, the first 100 ms after the last
# frame's, may split it into bursts) counts, and what its exit drops (and shm_compositor's exit flush, ~0.16 s for 12 pools in
# run 20261207T1347Z) does not.
trace_cutoff() { echo $(($1 - 500000000)); }

# trace_fields FILE CUTOFF: the tracer's bursts as record fields: all of them, and the totals of those
# that began before CUTOFF (ns, CLOCK_MONOTONIC)
trace_fields() {
    local f=$1 cutoff=$2
    [ -s "$f" ] || { echo "trace_error=no tracer output"; return; }
    echo "trace_bursts:=$(jq -c -s '[.[] | select(.type == "burst") | {start_ns, pools, bytes, small_pools, duration_ms,
        main_thread_pools, other_thread_pools, main_longest_ms, main_longest_cpu_wait_ms}]' "$f")"
    jq -r -s --argjson cut "$cutoff" '[.[] | select(.type == "burst" and .start_ns < $cut)] as $b |
        "trace_counted_bursts=\($b | length)",
        "trace_pools=\([$b[].pools] | add // 0)", "trace_bytes=\([$b[].bytes] | add // 0)",
        "trace_main_thread_pools=\([$b[].main_thread_pools] | add // 0)",
        "trace_other_thread_pools=\([$b[].other_thread_pools] | add // 0)",
        "trace_main_longest_ms=\([$b[].main_longest_ms] | max // 0)",
        "trace_main_longest_cpu_wait_ms=\($b | max_by(.main_longest_ms) // {} | .main_longest_cpu_wait_ms // null)"' "$f"
}

# run_client DIR OUT KIND BUILD REP SHAPE TRACE(on|off) ARGS...
run_client() {
    local dir=$1 out=$2 kind=$3 build=$4 rep=$5 shape=$6 trace=$7; shift 7
    local fd0 memfd0 json=$run_dir.$shape.json after name=$shape fields=()
    [ "$trace" = on ] || name=$shape/no-tracer
    local trace_file=$logs/trace-$kind-$build-rep$rep-$shape.jsonl
    fd0=$(fd_count "$comp_pid"); memfd0=$(memfd_maps "$comp_pid")
    fd_list "$comp_pid" >"$dir$run_dir.fds-before"
    if [ "$trace" = on ] && ! start_tracer "$comp_pid" "$trace_file"; then
        fields+=("trace_error=did not attach")
        trace=failed
    fi
    rm -f "$dir$json"
    wayland_client "$dir" timeout 120 $CLIENT "$@" --json "$json" >>"$dir$run_dir.clients.log" 2>&1 || true
    local ended
    ended=$(mono_ns)
    after=$(settle_leaks "$comp_pid" "$fd0" "$memfd0")
    if [ "$trace" = on ]; then
        stop_tracer
        mapfile -t fields < <(trace_fields "$trace_file" "$(trace_cutoff "$ended")")
    fi
    if [ "${after% *}" -gt "$fd0" ]; then  # say what was left, for the log
        fd_list "$comp_pid" | diff "$dir$run_dir.fds-before" - | sed "s/^/$kind $build rep$rep $shape: fd /" >>"$logs/leftovers.txt" || true
    fi
    local f=$dir$json
    if [ -s "$f" ]; then
        record "$out" compositor=$kind build=$build rep=$rep client=$name \
            gap_p50_ms="$(json_field "$f" gap_p50_ms)" gap_p99_ms="$(json_field "$f" gap_p99_ms)" \
            gap_max_ms="$(json_field "$f" gap_max_ms)" frames="$(json_field "$f" frames)" \
            client_work_max_ms="$(json_field "$f" client_work_max_ms)" \
            gaps_before_teardown="$(json_field "$f" gaps_before_teardown)" \
            gap_max_before_teardown_ms="$(json_field "$f" gap_max_before_teardown_ms)" \
            gap_max_from_teardown_ms="$(json_field "$f" gap_max_from_teardown_ms)" \
            protocol_error="$(json_field "$f" protocol_error)" missed_frames=null \
            fds_before="$fd0" fds_after="${after% *}" memfd_maps_before="$memfd0" memfd_maps_after="${after#* }" \
            loaded="$lib" "${fields[@]}"
    else
        record "$out" compositor=$kind build=$build rep=$rep client=$name error="no client report" loaded="$lib" "${fields[@]}"
    fi
}

# run_shape DIR OUT KIND BUILD REP SHAPE ARGS...: the client with the tracer, without, or both (untraced first)
run_shape() {
    local dir=$1 out=$2 kind=$3 build=$4 rep=$5 shape=$6; shift 6
    if [ "$tracer_mode" != on ]; then run_client "$dir" "$out" "$kind" "$build" "$rep" "$shape" off "$@"; fi
    if [ "$tracer_mode" != off ]; then run_client "$dir" "$out" "$kind" "$build" "$rep" "$shape" on "$@"; fi
}

run_simple_shm() {
    local dir=$1 out=$2 kind=$3 build=$4 rep=$5
    local fd0 memfd0 after status log=$dir$run_dir.simple-shm.log
    fd0=$(fd_count "$comp_pid"); memfd0=$(memfd_maps "$comp_pid")
    status=0
    wayland_client "$dir" timeout -s INT $SIMPLE_SHM_SECONDS weston-simple-shm >"$log" 2>&1 || status=$?
    after=$(settle_leaks "$comp_pid" "$fd0" "$memfd0")
    local perr=false
    # timeout's SIGINT is the normal end (weston-simple-shm exits 0 on it); anything else is a failure
    if grep -qi 'protocol error\|error ' "$log" || { [ "$status" != 0 ] && [ "$status" != 124 ] && [ "$status" != 130 ]; }; then perr=true; fi
    record "$out" compositor=$kind build=$build rep=$rep client=simple-shm exit_status=$status protocol_error=$perr \
        fds_before="$fd0" fds_after="${after% *}" memfd_maps_before="$memfd0" memfd_maps_after="${after#* }" loaded="$lib"
}

# check_loaded KIND BUILD: lib set to the library the compositor mapped; a build that is not
# debian must have loaded its own from /opt/lab
check_loaded() {
    local kind=$1 build=$2 fam
    fam=$(family "$kind")
    lib=$(loaded_lib "$comp_pid" "$(lib_pattern "$fam")")
    [ "$build" = debian ] || [[ $lib == /opt/lab/$fam-$build/* ]] && return 0
    stop_compositor
    die "$kind $build loaded '$lib', not /opt/lab/$fam-$build/"
}

# measure_one DIR OUT KIND BUILD REP
measure_one() {
    local dir=$1 out=$2 kind=$3 build=$4 rep=$5
    log "rep $rep: $kind $build"
    start_compositor "$dir" "$kind" "$build"
    check_loaded "$kind" "$build"
    # A short first client: compositors create some things on their first client only (sway
    # keeps one more descriptor from then on); the baselines are taken after it.
    wayland_client "$dir" timeout 30 $CLIENT --frames 5 >/dev/null 2>&1 || true
    sleep 0.5
    run_shape "$dir" "$out" "$kind" "$build" "$rep" burst "${BURST_ARGS[@]}"
    run_shape "$dir" "$out" "$kind" "$build" "$rep" churn "${CHURN_ARGS[@]}"
    run_simple_shm "$dir" "$out" "$kind" "$build" "$rep"
    stop_compositor
    cp "$dir$run_dir.log" "$logs/$kind-$build-rep$rep.log" 2>/dev/null || true
    rm -rf "$dir$run_dir" "$dir$run_dir".*
}

# shm_compositor_client DIR OUT REP MODE SHAPE TRACE ARGS...: one client run under the project's
# compositor in MODE, which starts the client itself; the tracer attaches once its socket is up
shm_compositor_client() {
    local dir=$1 out=$2 rep=$3 build=$4 shape=$5 trace=$6 mode=${4%@*} binary=$SHM_COMPOSITOR; shift 6
    [ "$build" = "$mode" ] || binary=$SHM_BASELINE
    local rd=/run/lab/shm-$$ name=$shape fields=() i pid=
    [ "$trace" = on ] || name=$shape/no-tracer
    rm -rf "$dir$rd" && mkdir -p "$dir$rd" && chmod 700 "$dir$rd"
    # With the tracer the client must wait for it: shm_compositor starts the client once its socket
    # is up, so the client waits for a file the tracer's start creates.
    local client=("$CLIENT" "$@" --json "$rd/client.json")
    [ "$trace" != on ] || client=(/bin/sh -c "while [ ! -e $rd/go ]; do sleep 0.05; done; exec \"\$0\" \"\$@\"" "${client[@]}")
    chroot "$dir" /usr/bin/env -i HOME=/root XDG_RUNTIME_DIR=$rd timeout 120 $binary --mode $mode \
        --socket lab-shm --json $rd/server.json -- "${client[@]}" >"$logs/shm_compositor-$build-${name//\//-}-rep$rep.log" 2>&1 &
    local started=$!
    if [ "$trace" = on ]; then
        # chroot and env exec: $started is timeout, whose child is shm_compositor
        for i in $(seq 100); do
            pid=$(pgrep -P "$started" -x shm_compositor || true)
            [ -n "$pid" ] && break
            sleep 0.1
        done
        if [ -z "$pid" ] || ! start_tracer "$pid" "$logs/trace-shm_compositor-$build-rep$rep-$shape.jsonl"; then
            fields+=("trace_error=did not attach")
            trace=failed
        fi
        touch "$dir$rd/go"
    fi
    wait "$started" || true
    local ended
    ended=$(mono_ns)
    if [ "$trace" = on ]; then
        stop_tracer
        mapfile -t fields < <(trace_fields "$logs/trace-shm_compositor-$build-rep$rep-$shape.jsonl" \
            "$(trace_cutoff "$ended")")
    fi
    local c=$dir$rd/client.json s=$dir$rd/server.json
    if [ -s "$c" ]; then
        record "$out" compositor=shm_compositor build=$build rep=$rep client=$name \
            gap_p50_ms="$(json_field "$c" gap_p50_ms)" gap_p99_ms="$(json_field "$c" gap_p99_ms)" \
            gap_max_ms="$(json_field "$c" gap_max_ms)" frames="$(json_field "$c" frames)" \
            client_work_max_ms="$(json_field "$c" client_work_max_ms)" \
            gaps_before_teardown="$(json_field "$c" gaps_before_teardown)" \
            gap_max_before_teardown_ms="$(json_field "$c" gap_max_before_teardown_ms)" \
            gap_max_from_teardown_ms="$(json_field "$c" gap_max_from_teardown_ms)" \
            protocol_error="$(json_field "$c" protocol_error)" missed_frames="$(json_field "$s" missed_frames)" \
            drain_max_us="$(json_field "$s" drain_max_us)" step_max_us="$(json_field "$s" step_max_us)" \
            loaded=- "${fields[@]}"
    else
        record "$out" compositor=shm_compositor build=$build rep=$rep client=$name error="no client report" loaded=- "${fields[@]}"
    fi
    rm -rf "$dir$rd"
}

# The project's own compositor: close-first (the fd first, as KWin and libwayland do), queue+worker
# (munmap in budgeted drains, close on the worker, as the KWin and wlroots series) and
# queue+worker-unmap (both on the worker, as the libwayland series): the library's cases on this
# machine, and the tracer's reference for each.
# With --shm-baseline REF also the two queue modes of shm_compositor built from the library at REF
# (build names MODE@REF): the library before a change against after, in one run.
SHM_MODES=(close-first queue+worker queue+worker-unmap)
SHM_BASELINE=
measure_shm_compositor() {
    local dir=$1 out=$2 rep=$3 mode shape t modes=("${SHM_MODES[@]}")
    [ -z "$SHM_BASELINE" ] || modes+=("queue+worker@$shm_ref" "queue+worker-unmap@$shm_ref")
    for mode in "${modes[@]}"; do
        log "rep $rep: shm_compositor $mode"
        for shape in burst churn; do
            local args
            if [ $shape = burst ]; then args=("${BURST_ARGS[@]}"); else args=("${CHURN_ARGS[@]}"); fi
            for t in off on; do
                [ "$tracer_mode" = both ] || [ "$tracer_mode" = $t ] || continue
                shm_compositor_client "$dir" "$out" "$rep" "$mode" "$shape" $t "${args[@]}"
            done
        done
    done
}

# build_shm_baseline DIR REF: shm_compositor as committed at HEAD, built against the library's
# include/ at this repository's commit REF, in /src/du-baseline; sets SHM_BASELINE. Only the
# library differs from the measured shm_compositor (HEAD's example also builds against a newer
# libwayland than an old REF's does).
build_shm_baseline() {
    local dir=$1 ref=$2
    git -C "$repo" rev-parse -q --verify "$ref^{commit}" >/dev/null || die "--shm-baseline: $ref is not a commit here"
    log "shm_compositor with the library at $ref: CMake build (~1 min)"
    rm -rf "$dir/src/du-baseline" && mkdir -p "$dir/src/du-baseline/src"
    git -C "$repo" archive HEAD | tar -x -C "$dir/src/du-baseline/src"
    rm -rf "$dir/src/du-baseline/src/include"
    git -C "$repo" archive "$ref" include | tar -x -C "$dir/src/du-baseline/src"
    in_root "$dir" "cmake -S /src/du-baseline/src -B /src/du-baseline/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DDEFERRED_UNMAP_BUILD_TESTS=OFF -DDEFERRED_UNMAP_BUILD_EXAMPLES=ON >/src/du-baseline.log 2>&1 \
        && ninja -C /src/du-baseline/build -j$JOBS shm_compositor >>/src/du-baseline.log 2>&1" \
        || die "shm_compositor at $ref did not build (see $dir/src/du-baseline.log)"
    SHM_BASELINE=/src/du-baseline/build/examples/wayland/shm_compositor
}

# wants LIST NAME: LIST is "all" or a comma-separated list of names
wants() { [ "$1" = all ] || [[ ",$1," == *",$2,"* ]]; }

# builds_of KIND BUILDS VARIANT...: the builds of KIND to measure: stock, ours and the variants
# that are staged (a series not built yet is skipped, and said so), among BUILDS
builds_of() {
    local kind=$1 builds=$2 fam b candidates; shift 2
    fam=$(family "$kind")
    if [ "$fam" = wayland ] && [ -z "$WAYLAND_VERSION" ]; then echo debian; return; fi
    candidates=(stock ours "$@")
    if [ "$fam" = wayland ]; then  # libwayland's variants are the staged alternatives
        for b in $(series_patches "$WAYLAND_SERIES/alternatives"); do candidates+=("$(alternative_name "$b")"); done
    fi
    for b in "${candidates[@]}"; do
        wants "$builds" "$b" || continue
        if staged "$fam" "$b"; then echo "$b"; else log "$kind $b: not built ($fam-$b not in /opt/lab): skipped"; fi
    done
}

cmd_measure() {
    need_root
    local dir=$1; shift
    local reps=3 variants=() kwin_variants=() only=all builds=all
    tracer_mode=on shm_ref=
    while [ $# -gt 0 ]; do
        case $1 in
        --reps) reps=$2; shift 2 ;;
        --variant) variants+=("$2"); shift 2 ;;
        --kwin-variant) kwin_variants+=("$2"); shift 2 ;;
        --only) only=$2; shift 2 ;;
        --builds) builds=$2; shift 2 ;;
        --no-tracer) tracer_mode=off; shift ;;
        --tracer) tracer_mode=$2; shift 2 ;;
        --shm-baseline) shm_ref=$2; shift 2 ;;
        *) die "measure: unknown option $1" ;;
        esac
    done
    case $tracer_mode in on|off|both) ;; *) die "--tracer wants on, off or both" ;; esac
    load_suite "$dir"
    mount_root "$dir"
    [ -x "$dir$CLIENT" ] || die "run lab.sh build first"
    if [ "$tracer_mode" != off ] && [ ! -d "$TRACEFS/events" ]; then
        mount -t tracefs nodev "$TRACEFS" || die "cannot mount tracefs at $TRACEFS (the tracer needs it; --no-tracer measures without)"
    fi
    # No build may run during the measurement, and none is half done when it starts.
    # shellcheck disable=SC2034  # held until measure exits
    local fd_lib fd_kwin fd_wlroots fd_wayland
    lock fd_lib "$dir/.lab-library.lock" -x
    lock fd_kwin "$dir/.lab-build.lock" -x
    lock fd_wlroots "$dir/.lab-build-wlroots.lock" -x
    lock fd_wayland "$dir/.lab-build-wayland.lock" -x
    local v names=() kwin_names=()
    for v in "${variants[@]}"; do
        (build_variant "$dir" "$v") >&2 || die "wlroots variant ${v%%=*} did not build"
        names+=("${v%%=*}")
    done
    for v in "${kwin_variants[@]}"; do
        (build_kwin_variant "$dir" "$v") >&2 || die "kwin variant ${v%%=*} did not build"
        kwin_names+=("${v%%=*}")
    done
    [ -z "$shm_ref" ] || build_shm_baseline "$dir" "$shm_ref"
    kill_stale "$dir"
    local stamp
    stamp=$(date -u +%Y%m%dT%H%MZ)
    logs=${LAB_OUT:-$PWD/lab-results}/$stamp
    mkdir -p "$logs"
    local out=$logs/results.jsonl
    : >"$out"
    trap 'stop_tracer; stop_compositor; kill_stale "'"$dir"'"' EXIT
    local machine
    machine="$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(uname -r)"
    log "results in $logs ($machine; Debian $SUITE root; tracer $tracer_mode)"
    local kinds=(kwin sway weston) kind
    [ "$SUITE" = trixie ] || kinds=(kwin sway labwc weston mutter)
    declare -A plan
    for kind in "${kinds[@]}"; do
        wants "$only" "$kind" || continue
        case $(family "$kind") in
        kwin) plan[$kind]=$(builds_of "$kind" "$builds" "${kwin_names[@]}") ;;
        wlroots) plan[$kind]=$(builds_of "$kind" "$builds" "${names[@]}") ;;
        wayland) plan[$kind]=$(builds_of "$kind" "$builds") ;;
        esac
    done
    local rep b
    for rep in $(seq "$reps"); do
        # Interleaved, so a host that gets slower during the run hurts every build alike.
        if wants "$only" shm_compositor; then measure_shm_compositor "$dir" "$out" "$rep"; fi
        for kind in "${kinds[@]}"; do
            for b in ${plan[$kind]:-}; do measure_one "$dir" "$out" "$kind" "$b" "$rep"; done
        done
    done
    trap - EXIT
    kill_stale "$dir"
    local source
    source="deferred_unmap $(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown), installed as $(cat "$dir/src/du-installed.how" 2>/dev/null || echo unknown)"
    python3 "$here/lab_report.py" "$out" --machine "$machine" --date "$stamp" --source "$source" \
        --json "$logs/results.json" | tee "$logs/report.txt"
}

# ---- main ----
main() {
    [ $# -ge 2 ] || die "usage: lab.sh setup|build|measure|umount DIR [options]"
    local sub=$1; shift
    root_dir=$(readlink -f "$1"); shift
    case $sub in
    setup) cmd_setup "$root_dir" "$@" ;;
    build) cmd_build "$root_dir" "$@" ;;
    measure) cmd_measure "$root_dir" "$@" ;;
    umount) umount_root "$root_dir" ;;
    *) die "unknown subcommand $sub" ;;
    esac
}
# One line: bash reads a script as it runs it, and a build takes an hour; with main and exit on the
# last line nothing is read after it starts, so editing this file meanwhile cannot derail a run.
main "$@"; exit
