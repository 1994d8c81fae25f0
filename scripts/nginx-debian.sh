#!/usr/bin/env bash
# scripts/nginx-debian.sh VERSION: `make build NGINX=VERSION` (1.30, 1.26):
# nginx VERSION from Debian's archive and the module built against it, in
# target/nginx-VERSION/dist (nginx and the module, as target/dist for the
# vendored build); `make test NGINX=VERSION` runs the suite against them.
# The suite: sid for 1.30, trixie for 1.26.
#
# From source first: the upstream tarball of the suite's nginx source
# package (nginx_<version>.orig.tar.gz, named with its SHA256 in the
# suite's signed Sources index, fetched by scripts/apt.sh orig through the
# private apt configuration), unpacked in target/nginx-VERSION/source and
# configured and compiled with the vendored build's flags (scripts/nginx.sh
# with RLW_NGINX_SRC: nginx-src's base flags, --with-stream among them, and
# .cargo/config.toml's) in target/nginx-VERSION/objs, while cargo builds the
# module against that configured tree.
#
# When the archive does not serve that tarball, the script prints its URL
# and the answer (here, sid's nginx_1.30.6.orig.tar.gz answers "404 Not
# Found" while sid's binary packages are served) and uses Debian's binary
# nginx of the suite instead: its packages nginx (/usr/sbin/nginx),
# nginx-dev (headers, configure and conf_flags) and libnginx-mod-stream
# (Debian's stream module, copied beside the module in dist/), unpacked with dpkg -x into
# target/nginx-VERSION/root with the libraries that nginx needs newer than
# this machine's (libc6, libssl3t64, libpcre2-8-0, libzstd1, libcrypt1,
# zlib1g) beside it; a copy of /usr/sbin/nginx is pointed at them
# (patchelf: interpreter and RUNPATH), so it runs here without installing
# anything. The module is then built against nginx-dev's tree configured
# with Debian's flags (scripts/nginx-dev.sh, --with-compat). nginx's
# compiled-in temp and log paths (/var/lib/nginx, /var/log/nginx) come from
# nginx-common (installed from this machine's release if missing).
#
# RLW_NGINX_FROM=source: fail when the tarball cannot be fetched;
# RLW_NGINX_FROM=binary: Debian's binary without trying the source.
set -euo pipefail
shopt -s inherit_errexit
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CARGO=${CARGO:-cargo}
MODULE=ngx_http_rate_limit_window_module
VERSION=${1:?usage: scripts/nginx-debian.sh VERSION (1.30, 1.26)}
FROM=${RLW_NGINX_FROM:-}

die() { echo "scripts/nginx-debian.sh: $*" >&2; exit 1; }

case $VERSION in
    1.30) SUITE=sid ;;
    1.26) SUITE=trixie ;;
    *) die "NGINX=$VERSION: the Debian nginx builds are 1.30 (sid) and 1.26 (trixie); for another, see NGINX_BUILD_DIR in docs/operations.md" ;;
esac
case $FROM in
    '' | source | binary) ;;
    *) die "RLW_NGINX_FROM=$FROM: source or binary" ;;
esac
DIR=$ROOT/target/nginx-$VERSION
# The target directory of the Debian package builds (scripts/deb.sh): they
# share its compiled dependencies; only nginx-sys and what uses it are
# rebuilt for another nginx tree.
CARGO_DIR=$ROOT/target/deb-build

# The version of the nginx tree $1 (its src/core/nginx.h), checked to be
# VERSION.x.
tree_version() {
    local have
    have=$(sed -n 's/^#define NGINX_VERSION[[:space:]]*"\(.*\)"/\1/p' "$1/src/core/nginx.h")
    case $have in
        "$VERSION".*) echo "$have" ;;
        *) die "$1 is nginx ${have:-?}, not $VERSION.x" ;;
    esac
}

# The module, built against the configured tree $1 (objs) of source $2.
cargo_build() {
    (
        export CARGO_TARGET_DIR=$CARGO_DIR NGINX_BUILD_DIR=$1 NGINX_SOURCE_DIR=$2
        "$CARGO" build --release -p rate_limit_window --no-default-features --features export-modules
    )
}

# Unpacks tarball $1 into $DIR/source/nginx (again when it changed) and
# prints that directory.
unpack() {
    local tree=$DIR/source/nginx stamp
    stamp=$(sha256sum "$1" | cut -d' ' -f1)
    if [ "$(cat "$tree/.rlw-tarball" 2>/dev/null)" != "$stamp" ]; then
        rm -rf "$tree" && mkdir -p "$tree"
        tar -xf "$1" -C "$tree" --strip-components=1 || die "cannot unpack $1"
        printf '%s' "$stamp" >"$tree/.rlw-tarball"
    fi
    echo "$tree"
}

# nginx from the tarball $1 with the vendored flags, the module beside it.
from_source() {
    local tree objs have nginx_make
    tree=$(unpack "$1")
    have=$(tree_version "$tree")
    objs=$DIR/objs
    echo "scripts/nginx-debian.sh: nginx $have from $(basename "$1") ($SUITE's source package), the vendored build's flags" >&2
    RLW_NGINX_SRC=$tree scripts/nginx.sh configure "$objs" >/dev/null
    scripts/nginx.sh make "$objs" &
    nginx_make=$!
    trap 'kill $nginx_make 2>/dev/null || true' EXIT
    cargo_build "$objs" "$tree"
    wait $nginx_make
    trap - EXIT
    mkdir -p "$DIR/dist"
    # Built --with-stream (the vendored flags): no stream module of its own.
    rm -f "$DIR/dist/nginx.bin" "$DIR/dist/ngx_stream_module.so"
    cp "$objs/nginx" "$DIR/dist/.nginx.new"
    mv -f "$DIR/dist/.nginx.new" "$DIR/dist/nginx"
    echo "$have"
}

# Debian's binary nginx of SUITE and its nginx-dev tree, the module beside it.
from_binary() {
    local R=$DIR/root stamp src have lib deb
    local libs=(libc6 libssl3t64 libpcre2-8-0 libzstd1 libcrypt1 zlib1g)
    scripts/deps.sh patchelf dpkg-dev nginx-common >&2
    # The packages, once (again when their versions change: RLW_APT_REFRESH=1).
    stamp=$DIR/debs/.unpacked
    # An unpacked root from before libnginx-mod-stream was fetched: again.
    [ -f "$R/usr/lib/nginx/modules/ngx_stream_module.so" ] || rm -f "$stamp"
    if [ ! -f "$stamp" ]; then
        rm -rf "$DIR/debs" "$R"
        # libnginx-mod-stream: Debian builds stream as a module of its own;
        # the tests load it before this module when a configuration has
        # stream {} (tests/it/common/conf.rs, with_stream_module).
        local pkgs=(nginx nginx-dev libnginx-mod-stream "${libs[@]}")
        scripts/apt.sh download "$DIR/debs" "${pkgs[@]/%//$SUITE}"
        for deb in "$DIR"/debs/*.deb; do
            dpkg-deb -x "$deb" "$R" || die "cannot unpack $deb"
        done
        touch "$stamp"
    fi
    src=$R/usr/share/nginx/src
    have=$(tree_version "$src")
    # dist/nginx runs dist/nginx.bin with -e logs/error.log: Debian builds
    # nginx with --error-log-path=stderr, so before reading its
    # configuration it would write nginx -t's messages with a time and pid
    # ("2026/12/05 ... [emerg] 123#123: ...") instead of the "nginx:
    # [emerg] ..." the tests and docs quote; the vendored nginx's default,
    # logs/error.log, makes them the same.
    mkdir -p "$DIR/dist"
    lib=$R/usr/lib/x86_64-linux-gnu
    [ -e "$lib/ld-linux-x86-64.so.2" ] || die "no loader in $lib (libc6/$SUITE)"
    cp "$R/usr/sbin/nginx" "$DIR/dist/.nginx.new"
    patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --set-rpath "$lib" "$DIR/dist/.nginx.new"
    mv -f "$DIR/dist/.nginx.new" "$DIR/dist/nginx.bin"
    printf '#!/bin/sh\n# Debian nginx %s (scripts/nginx-debian.sh)\nexec "%s" -e logs/error.log "$@"\n' \
        "$have" "$DIR/dist/nginx.bin" >"$DIR/dist/.nginx.new"
    chmod 0755 "$DIR/dist/.nginx.new"
    mv -f "$DIR/dist/.nginx.new" "$DIR/dist/nginx"
    scripts/nginx-dev.sh "$src" "$DIR/build" >&2
    cargo_build "$DIR/build/objs" "$DIR/build"
    cp "$R/usr/lib/nginx/modules/ngx_stream_module.so" "$DIR/dist/.ngx_stream_module.so.new"
    mv -f "$DIR/dist/.ngx_stream_module.so.new" "$DIR/dist/ngx_stream_module.so"
    echo "$have"
}

scripts/deps.sh libclang-dev make gcc pkg-config libpcre2-dev libssl-dev zlib1g-dev

if [ "$FROM" != binary ] && tarball=$(scripts/apt.sh orig "$DIR/tarball" "nginx/$SUITE"); then
    have=$(from_source "$tarball")
elif [ "$FROM" = source ]; then
    die "nginx $VERSION from source: $SUITE's upstream tarball cannot be fetched (above); RLW_NGINX_FROM=source"
else
    [ "$FROM" = binary ] \
        || echo "scripts/nginx-debian.sh: nginx $VERSION cannot be built from source here: $SUITE's upstream tarball cannot be fetched (above); testing $SUITE's binary nginx instead (RLW_NGINX_FROM=source fails here instead)" >&2
    have=$(from_binary)
fi

"$DIR/dist/nginx" -v 2>&1 | grep -q "nginx/$have" || die "$DIR/dist/nginx does not run"
built_for=$(sed -n 's/^cargo::metadata=version=//p' "$(ls -t "$CARGO_DIR"/release/build/nginx-sys-*/output | head -n1)")
[ "$built_for" = "nginx/$have" ] || die "nginx-sys bindings are for '${built_for:-?}', expected nginx/$have"
cp "$CARGO_DIR/release/lib$MODULE.so" "$DIR/dist/.$MODULE.so.new"
mv -f "$DIR/dist/.$MODULE.so.new" "$DIR/dist/$MODULE.so"
"$DIR/dist/nginx" -V 2>&1 | sed 's/^/  /'
ls -l "$DIR/dist"
