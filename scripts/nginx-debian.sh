#!/usr/bin/env bash
# scripts/nginx-debian.sh VERSION: `make build NGINX=VERSION` (1.30): the
# module built against Debian's nginx VERSION and that nginx itself, in
# target/nginx-VERSION/dist (nginx and the module, as target/dist for the
# vendored build); `make test NGINX=VERSION` runs the suite against them.
#
# Debian's unstable archive (sid) carries nginx 1.30, but serves only its
# binary packages here: the source package's files (nginx_1.30.*.orig.tar.gz,
# .dsc) answer 404. So the nginx is Debian's own build, the one sid users
# run: sid's packages nginx (/usr/sbin/nginx) and nginx-dev (its headers,
# configure and conf_flags), fetched with the private apt configuration of
# scripts/apt.sh and unpacked with dpkg -x into target/nginx-VERSION/root,
# with the libraries sid's nginx needs newer than this machine's (libc6,
# libssl3t64, libpcre2-8-0, libzstd1, libcrypt1, zlib1g) beside it. A copy
# of /usr/sbin/nginx is pointed at them (patchelf: its interpreter and
# RUNPATH), so it runs here without installing anything from sid. The
# module is built against the nginx-dev tree configured with Debian's flags
# (scripts/nginx-dev.sh, --with-compat), in target/deb-build (shared with
# the packages' builds).
#
# nginx's compiled-in temp and log paths (/var/lib/nginx, /var/log/nginx)
# come from nginx-common (installed from this machine's release if missing).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CARGO=${CARGO:-cargo}
MODULE=ngx_http_rate_limit_window_module
VERSION=${1:?usage: scripts/nginx-debian.sh VERSION (1.30)}

die() { echo "scripts/nginx-debian.sh: $*" >&2; exit 1; }

case $VERSION in
    1.30) SUITE=sid ;;
    *) die "NGINX=$VERSION: the Debian nginx builds are 1.30 (sid); for another, see NGINX_BUILD_DIR in docs/operations.md" ;;
esac
DIR=$ROOT/target/nginx-$VERSION
R=$DIR/root
LIBS=(libc6 libssl3t64 libpcre2-8-0 libzstd1 libcrypt1 zlib1g)
# The target directory of the Debian package builds (scripts/deb.sh): they
# share its compiled dependencies; only nginx-sys and what uses it are
# rebuilt for another nginx tree.
CARGO_DIR=$ROOT/target/deb-build

scripts/deps.sh patchelf dpkg-dev nginx-common libclang-dev make gcc pkg-config

# 1. sid's packages, once (again when their versions change: RLW_APT_REFRESH=1).
stamp=$DIR/debs/.unpacked
# An unpacked root from before libnginx-mod-stream was fetched: again.
[ -f "$R/usr/lib/nginx/modules/ngx_stream_module.so" ] || rm -f "$stamp"
if [ ! -f "$stamp" ]; then
    rm -rf "$DIR/debs" "$R"
    # libnginx-mod-stream: Debian builds stream as a module of its own; the
    # tests load it before this module when a configuration has stream {}
    # (tests/it/common/conf.rs, with_stream_module).
    pkgs=(nginx nginx-dev libnginx-mod-stream "${LIBS[@]}")
    scripts/apt.sh download "$DIR/debs" "${pkgs[@]/%//$SUITE}"
    for deb in "$DIR"/debs/*.deb; do
        dpkg-deb -x "$deb" "$R" || die "cannot unpack $deb"
    done
    touch "$stamp"
fi
src=$R/usr/share/nginx/src
have=$(sed -n 's/^#define NGINX_VERSION[[:space:]]*"\(.*\)"/\1/p' "$src/src/core/nginx.h")
case $have in
    "$VERSION".*) ;;
    *) die "$SUITE's nginx-dev is nginx ${have:-?}, not $VERSION.x" ;;
esac

# 2. sid's nginx, run with sid's loader and libraries (dist/nginx.bin).
# dist/nginx runs it with -e logs/error.log: Debian builds nginx with
# --error-log-path=stderr, so before reading its configuration it would
# write nginx -t's messages with a time and pid ("2026/12/05 ... [emerg]
# 123#123: ...") instead of the "nginx: [emerg] ..." the tests and docs
# quote; the vendored nginx's default, logs/error.log, makes them the same.
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
"$DIR/dist/nginx" -v 2>&1 | grep -q "nginx/$have" || die "$DIR/dist/nginx does not run"

# 3. the module, against nginx-dev's tree with Debian's flags.
scripts/nginx-dev.sh "$src" "$DIR/build"
(
    export CARGO_TARGET_DIR=$CARGO_DIR NGINX_BUILD_DIR=$DIR/build/objs
    unset NGINX_SOURCE_DIR
    "$CARGO" build --release -p rate_limit_window --no-default-features --features export-modules
)
built_for=$(sed -n 's/^cargo::metadata=version=//p' "$(ls -t "$CARGO_DIR"/release/build/nginx-sys-*/output | head -n1)")
[ "$built_for" = "nginx/$have" ] || die "nginx-sys bindings are for '${built_for:-?}', expected nginx/$have"
cp "$CARGO_DIR/release/lib$MODULE.so" "$DIR/dist/.$MODULE.so.new"
mv -f "$DIR/dist/.$MODULE.so.new" "$DIR/dist/$MODULE.so"
cp "$R/usr/lib/nginx/modules/ngx_stream_module.so" "$DIR/dist/.ngx_stream_module.so.new"
mv -f "$DIR/dist/.ngx_stream_module.so.new" "$DIR/dist/ngx_stream_module.so"
"$DIR/dist/nginx" -V 2>&1 | sed 's/^/  /'
ls -l "$DIR/dist"
