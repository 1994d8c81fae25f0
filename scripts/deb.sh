#!/usr/bin/env bash
# Builds libnginx-mod-http-rate-limit-window_<version>_<arch>.deb: the module
# compiled against a Debian release's nginx rather than the vendored nginx
# that `make build` uses.
#
#   DIST=bookworm (default: the release this machine runs, nginx 1.22.1):
#     nginx-dev installed here; the package in target/debian/.
#   DIST=trixie (nginx 1.26.3): trixie's nginx-dev fetched with the private
#     apt configuration of scripts/apt.sh and unpacked (dpkg -x) into
#     target/debian/trixie/nginx-dev; the package in target/debian/trixie/.
#
#   1. configure a copy of nginx-dev's source tree (/usr/share/nginx/src) in
#      target/nginx-<version>-build with Debian's own flags
#      (scripts/nginx-dev.sh);
#   2. cargo build the module with NGINX_BUILD_DIR=<that>/objs, without the
#      `vendored` feature, into target/deb-build (never target/release, so
#      the main vendored build stays cached; shared by every DIST and by
#      scripts/nginx-debian.sh: the dependencies are compiled once, nginx-sys
#      and what uses it again for another nginx tree);
#   3. lay out the package tree and pack it with dpkg-deb.
#
# Environment:
#   DIST              bookworm (default) or trixie
#   DEB_REVISION      Debian revision appended to the Cargo version (default 1)
#   DEB_MAINTAINER    Maintainer field (default below)
#   NGINX_DEV_SRC     nginx-dev source tree (default /usr/share/nginx/src, or
#                     trixie's unpacked one)
#   NGINX_ABI         ABI name for Depends (default: read from nginx-dev)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

PKG=libnginx-mod-http-rate-limit-window
MODULE=ngx_http_rate_limit_window_module
CONF_NAME=mod-http-rate-limit-window.conf
CARGO=${CARGO:-cargo}
DEB_REVISION=${DEB_REVISION:-1}
DEB_MAINTAINER=${DEB_MAINTAINER:-rate_limit_window maintainers <maintainers@users.noreply.a-seed-d807d436.example>}
DIST=${DIST:-bookworm}
HOST_DIST=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")

step() { echo "==> $*"; }
die() { echo "deb.sh: error: $*" >&2; exit 1; }

# --- dependencies -----------------------------------------------------------
# nginx-dev: headers + configure; the rest: what configure and bindgen need.
# dpkg-dev provides dpkg-shlibdeps (the libc6/libgcc-s1 part of Depends).
scripts/deps.sh dpkg-dev libclang-dev libpcre2-dev libssl-dev zlib1g-dev make gcc pkg-config

OUT="$ROOT/target/debian"
CARGO_TARGET_DIR="$ROOT/target/deb-build"
if [ "$DIST" = "$HOST_DIST" ]; then
  scripts/deps.sh nginx-dev
  NGINX_DEV_SRC=${NGINX_DEV_SRC:-/usr/share/nginx/src}
  NGINX_DEV_VERSION=$(dpkg-query -W -f='${Version}' nginx-dev 2>/dev/null || echo unknown)
else
  case $DIST in
    trixie) ;;
    *) die "DIST=$DIST: the package is built for bookworm or trixie" ;;
  esac
  OUT="$ROOT/target/debian/$DIST"
  dev="$OUT/nginx-dev"
  rm -rf "$OUT/debs" "$dev"
  scripts/apt.sh download "$OUT/debs" "nginx-dev/$DIST"
  dpkg-deb -x "$OUT"/debs/nginx-dev_*.deb "$dev"
  NGINX_DEV_SRC=${NGINX_DEV_SRC:-$dev/usr/share/nginx/src}
  NGINX_DEV_VERSION=$(dpkg-deb -f "$OUT"/debs/nginx-dev_*.deb Version)
fi

[ -f "$NGINX_DEV_SRC/src/core/nginx.h" ] || die "$NGINX_DEV_SRC/src/core/nginx.h not found (is nginx-dev installed?)"

NGINX_VERSION=$(sed -n 's/^#define NGINX_VERSION[[:space:]]*"\(.*\)"/\1/p' "$NGINX_DEV_SRC/src/core/nginx.h")
[ -n "$NGINX_VERSION" ] || die "cannot read NGINX_VERSION from nginx.h"

# The ABI name nginx-dev was built for; Debian's nginx package Provides it.
if [ -z "${NGINX_ABI:-}" ]; then
  NGINX_ABI=$(sed -n 's/^nginx:abi=//p' "$NGINX_DEV_SRC/debian/libnginx-mod.abisubstvars" 2>/dev/null | head -n1)
fi
[ -n "$NGINX_ABI" ] || die "cannot determine the nginx ABI (set NGINX_ABI=nginx-abi-X.Y.Z-N)"

CRATE_VERSION=$(awk '/^\[package\]/{p=1;next} /^\[/{p=0} p && /^version[[:space:]]*=/{gsub(/.*=[[:space:]]*"|".*/,"");print;exit}' Cargo.toml)
[ -n "$CRATE_VERSION" ] || die "cannot read the package version from Cargo.toml"
VERSION="$CRATE_VERSION-$DEB_REVISION"
ARCH=$(dpkg --print-architecture)

step "$DIST: nginx $NGINX_VERSION (nginx-dev $NGINX_DEV_VERSION, $NGINX_ABI), package $PKG $VERSION $ARCH"

# --- 1. configure nginx with Debian's flags ---------------------------------
NGX_DIR="$ROOT/target/nginx-$NGINX_VERSION-build"
scripts/nginx-dev.sh "$NGINX_DEV_SRC" "$NGX_DIR"

# --- 2. build the module against it ---------------------------------------
# Own target dir: a build with NGINX_BUILD_DIR in target/release would
# overwrite the vendored build's nginx-sys bindings.
export CARGO_TARGET_DIR
unset NGINX_SOURCE_DIR
export NGINX_BUILD_DIR="$NGX_DIR/objs"
step "cargo build (NGINX_BUILD_DIR=$NGINX_BUILD_DIR, CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
"$CARGO" build --release -p rate_limit_window --no-default-features --features export-modules

SO="$CARGO_TARGET_DIR/release/lib$MODULE.so"
[ -f "$SO" ] || die "$SO was not built"

# Make sure the bindings really came from this tree, not from nginx-src.
sys_output=$(ls -t "$CARGO_TARGET_DIR"/release/build/nginx-sys-*/output 2>/dev/null | head -n1)
built_for=$(sed -n 's/^cargo::metadata=version=//p' "${sys_output:-/dev/null}")
[ "$built_for" = "nginx/$NGINX_VERSION" ] \
  || die "nginx-sys bindings are for '${built_for:-?}', expected nginx/$NGINX_VERSION"

# --- 3. package -------------------------------------------------------------
STAGE="$OUT/$PKG"
DEB="$OUT/${PKG}_${VERSION}_${ARCH}.deb"
step "staging $STAGE"
rm -rf "$STAGE"
mkdir -p "$STAGE/DEBIAN" \
         "$STAGE/usr/lib/nginx/modules" \
         "$STAGE/usr/share/nginx/modules-available" \
         "$STAGE/usr/share/doc/$PKG"

install -m 0644 "$SO" "$STAGE/usr/lib/nginx/modules/$MODULE.so"
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
  "$STAGE/usr/lib/nginx/modules/$MODULE.so"
install -m 0644 debian/$CONF_NAME "$STAGE/usr/share/nginx/modules-available/$CONF_NAME"
install -m 0644 debian/copyright "$STAGE/usr/share/doc/$PKG/copyright"

# Debian policy wants a changelog.Debian.gz; a minimal generated one.
date_r=$(date -R -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")
{
  echo "$PKG ($VERSION) $DIST; urgency=medium"
  echo
  echo "  * Built from rate_limit_window $CRATE_VERSION against nginx $NGINX_VERSION"
  echo "    (nginx-dev $NGINX_DEV_VERSION, $NGINX_ABI)."
  echo
  echo " -- $DEB_MAINTAINER  $date_r"
} | gzip -9n >"$STAGE/usr/share/doc/$PKG/changelog.Debian.gz"
chmod 0644 "$STAGE/usr/share/doc/$PKG/changelog.Debian.gz"

# Shared-library dependencies (libc6, libgcc-s1) with minimum versions.
shlibs=""
if command -v dpkg-shlibdeps >/dev/null; then
  tmp=$(mktemp -d)
  mkdir -p "$tmp/debian"
  printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$PKG" "$PKG" >"$tmp/debian/control"
  shlibs=$(cd "$tmp" && dpkg-shlibdeps -O "$STAGE/usr/lib/nginx/modules/$MODULE.so" 2>/dev/null \
           | sed -n 's/^shlibs:Depends=//p') || true
  rm -rf "$tmp"
fi
[ -n "$shlibs" ] || shlibs="libc6, libgcc-s1"
# libnginx-mod-stream: the module's stream half links to Debian's stream
# module (loaded first: the package's link is 70-, after its 50-).
DEPENDS="$NGINX_ABI, libnginx-mod-stream, $shlibs"

install -m 0755 debian/postinst debian/prerm debian/postrm "$STAGE/DEBIAN/"

(cd "$STAGE" && find usr -type f -print0 | LC_ALL=C sort -z | xargs -0 md5sum) >"$STAGE/DEBIAN/md5sums"
chmod 0644 "$STAGE/DEBIAN/md5sums"

INSTALLED_SIZE=$(du -s -k --exclude=DEBIAN "$STAGE" | cut -f1)

sed -e "s#@VERSION@#$VERSION#" \
    -e "s#@ARCH@#$ARCH#" \
    -e "s#@MAINTAINER@#$DEB_MAINTAINER#" \
    -e "s#@INSTALLED_SIZE@#$INSTALLED_SIZE#" \
    -e "s#@DEPENDS@#$DEPENDS#" \
    -e "s#@NGINX_VERSION@#$NGINX_VERSION#" \
    -e "s#@ABI@#$NGINX_ABI#" \
    debian/control.in >"$STAGE/DEBIAN/control"
chmod 0644 "$STAGE/DEBIAN/control"
grep -q '@[A-Z_]*@' "$STAGE/DEBIAN/control" && die "unsubstituted field in DEBIAN/control"

# Files owned by root whoever builds; directories 0755, files as installed.
find "$STAGE" -type d -exec chmod 0755 {} +
rm -f "$DEB"
dpkg-deb --root-owner-group -Zxz --build "$STAGE" "$DEB" >/dev/null

step "built $DEB"
dpkg-deb --info "$DEB" | sed -n '/Package:/,$p'
dpkg-deb --contents "$DEB"
