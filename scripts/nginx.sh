#!/usr/bin/env bash
# scripts/nginx.sh configure|make DIR: the nginx that `make build` builds the
# module against and leaves in target/dist, in build directory DIR.
#
# It is the nginx of the `vendored` feature: the source shipped in the
# nginx-src crate that Cargo.lock pins, configured with that crate's base
# flags (read from its src/lib.rs) plus NGX_CONFIGURE_ARGS (environment, else
# .cargo/config.toml), NGX_CFLAGS and NGX_LDFLAGS, as nginx-src's build script
# does. Built here rather than by that build script, `make build` can run the
# steps in a better order: nginx-sys's bindings need only the configured
# DIR (ngx_auto_config.h, Makefile), so cargo compiles the module while nginx
# compiles, and nginx-src's own build dependencies (an HTTP client, TLS,
# archive readers) are not built at all.
#
# RLW_NGINX_WITHOUT_STREAM=1: the same flags less every --with-stream*
# (scripts/nginx-nostream.sh: an nginx without stream, for the test that
# the module still loads there for http).
#
# RLW_NGINX_SRC: another nginx source tree to configure with those same
# flags (scripts/nginx-debian.sh: the upstream tarball of Debian's nginx 1.30
# or 1.26 source package).
#
#   configure  configures DIR unless its flags and source are unchanged;
#              prints the source directory (for NGINX_SOURCE_DIR)
#   make       compiles DIR/nginx (log: DIR/make.log)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CARGO=${CARGO:-cargo}
step=${1:?usage: scripts/nginx.sh configure|make DIR}
DIR=${2:?usage: scripts/nginx.sh configure|make DIR}

die() { echo "scripts/nginx.sh: $*" >&2; exit 1; }

# The nginx-src crate's directory (cargo metadata fetches it if needed).
crate_dir() {
    local manifest
    local host
    host=$(rustc -vV | sed -n 's/^host: //p')
    manifest=$("$CARGO" metadata --format-version 1 --locked --filter-platform "$host" \
        | grep -o '"manifest_path":"[^"]*/nginx-src-[^"/]*/Cargo.toml"' | head -n1 \
        | sed 's/"manifest_path":"\(.*\)\/Cargo.toml"/\1/')
    [ -n "$manifest" ] || die "nginx-src is not in Cargo.lock"
    echo "$manifest"
}

# nginx-src's base configure flags, then ours (one per line); without
# --with-stream* where RLW_NGINX_WITHOUT_STREAM is set.
flags() {
    if [ -n "${RLW_NGINX_WITHOUT_STREAM:-}" ]; then
        all_flags "$1" | grep -v '^--with-stream' || true
    else
        all_flags "$1"
    fi
}

all_flags() {
    local crate=$1 extra
    sed -n '/^static NGINX_CONFIGURE_BASE/,/^];/p' "$crate/src/lib.rs" | grep -o '"--[^"]*"' | tr -d '"'
    extra=${NGX_CONFIGURE_ARGS-$(sed -n 's/^NGX_CONFIGURE_ARGS *= *"\(.*\)"$/\1/p' .cargo/config.toml)}
    for f in $extra; do echo "$f"; done
    [ -z "${NGX_CFLAGS:-}" ] || echo "--with-cc-opt=$NGX_CFLAGS"
    [ -z "${NGX_LDFLAGS:-}" ] || echo "--with-ld-opt=$NGX_LDFLAGS"
}

configure() {
    local crate src info script
    crate=$(crate_dir)
    src=${RLW_NGINX_SRC:-$crate/nginx}
    # auto/configure in nginx's repository (nginx-src's copy), ./configure
    # in a release tarball (Debian's .orig.tar.gz): the same script.
    script=auto/configure
    [ -f "$src/$script" ] || script=configure
    [ -f "$src/$script" ] || die "no nginx source in $src"
    mapfile -t args < <(flags "$crate")
    [ "${#args[@]}" -gt 0 ] || die "no configure flags found in $crate/src/lib.rs"
    args+=("--builddir=$DIR")
    info="$src|${args[*]}"
    if [ -f "$DIR/Makefile" ] && [ -f "$DIR/ngx_auto_config.h" ] \
        && [ "$(cat "$DIR/.build-info" 2>/dev/null)" = "$info" ]; then
        echo "$src"
        return
    fi
    mkdir -p "$DIR"
    rm -f "$DIR/.build-info"
    echo "nginx: configure ${args[*]}" >&2
    (cd "$src" && "./$script" "${args[@]}") >"$DIR/configure.log" 2>&1 \
        || { tail -n 30 "$DIR/configure.log" >&2; die "configure failed (log: $DIR/configure.log)"; }
    printf '%s' "$info" >"$DIR/.build-info"
    echo "$src"
}

build() {
    local src
    src=$(sed -n 's/|.*//p' "$DIR/.build-info" 2>/dev/null) || true
    [ -n "$src" ] || die "$DIR is not configured: run scripts/nginx.sh configure $DIR"
    (cd "$src" && make -f "$DIR/Makefile" -j "$(nproc)" build) >"$DIR/make.log" 2>&1 \
        || { tail -n 30 "$DIR/make.log" >&2; die "make failed (log: $DIR/make.log)"; }
    [ -x "$DIR/nginx" ] || die "make left no $DIR/nginx"
}

case $step in
    configure) configure ;;
    make) build ;;
    *) die "unknown step $step" ;;
esac
