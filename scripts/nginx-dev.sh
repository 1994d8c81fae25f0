#!/usr/bin/env bash
# scripts/nginx-dev.sh SRC DIR: configures a copy of a Debian nginx-dev
# source tree SRC (its /usr/share/nginx/src: headers, auto/, configure and
# conf_flags) in DIR, with Debian's own flags (conf_flags, which include
# --with-compat). ngx-rust needs only the configured DIR/objs for its
# bindings, never a compiled nginx. Used by scripts/deb.sh (the package)
# and scripts/nginx-debian.sh (make test NGINX=1.30).
#
# Reconfigures only when the tree or the flags changed: a fresh
# ngx_auto_config.h would make nginx-sys regenerate its bindings and cargo
# rebuild everything downstream.
set -euo pipefail
SRC=${1:?usage: scripts/nginx-dev.sh SRC DIR}
DIR=${2:?usage: scripts/nginx-dev.sh SRC DIR}

die() { echo "scripts/nginx-dev.sh: $*" >&2; exit 1; }

[ -f "$SRC/src/core/nginx.h" ] || die "$SRC/src/core/nginx.h not found (not an nginx-dev tree)"
[ -f "$SRC/conf_flags" ] || die "$SRC/conf_flags not found"

# conf_flags is a bash array assignment: NGX_CONF_FLAGS=( --prefix=... ... ),
# whose values call dpkg-architecture and dpkg-buildflags (dpkg-dev).
NGX_CONF_FLAGS=()
# shellcheck disable=SC1091
source "$SRC/conf_flags"
[ ${#NGX_CONF_FLAGS[@]} -gt 0 ] || die "no flags in $SRC/conf_flags"
printf '%s\n' "${NGX_CONF_FLAGS[@]}" | grep -qx -- --with-compat \
  || NGX_CONF_FLAGS+=(--with-compat)   # Debian's flags have it; make sure
# Debian builds stream as a module of its own (libnginx-mod-stream), so the
# core's flags have no stream: add it, so that the bindings and the C shims
# see its headers (the module's stream half; its symbols are referred to
# weakly, src/ffi/stream_weak.c, and --with-compat keeps the layouts).
printf '%s\n' "${NGX_CONF_FLAGS[@]}" | grep -q -- '^--with-stream' \
  || NGX_CONF_FLAGS+=(--with-stream=dynamic)

stamp="$(md5sum "$SRC/src/core/nginx.h" "$SRC/conf_flags" | cut -d' ' -f1 | tr '\n' ' '): ${NGX_CONF_FLAGS[*]}"
if [ -f "$DIR/objs/ngx_auto_config.h" ] && [ "$(cat "$DIR/.deb-stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "==> nginx tree already configured: $DIR"
  exit 0
fi
echo "==> configuring $DIR"
rm -rf "$DIR"
mkdir -p "$DIR"
cp -a "$SRC/." "$DIR/"
if ! (cd "$DIR" && ./configure "${NGX_CONF_FLAGS[@]}" >configure.log 2>&1); then
  tail -n 30 "$DIR/configure.log" >&2
  die "nginx configure failed (full log: $DIR/configure.log)"
fi
printf '%s' "$stamp" >"$DIR/.deb-stamp"
