#!/usr/bin/env bash
# scripts/debroot.sh DIST: a root file system of Debian DIST (trixie) made
# with debootstrap from Debian's archive, with the distribution's own nginx
# (nginx-core) and what scripts/test-deb.sh uses, cached in
# target/roots/DIST (made again when older than a week, or with
# RLW_ROOT_REFRESH=1). Prints its path. Needs root (debootstrap, chroot).
#
# scripts/test-deb.sh runs inside it with chroot (/proc, /dev and /sys
# mounted for the run, unmounted after); nothing in it is started while it
# is made (debootstrap keeps services from starting).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
DIST=${1:?usage: scripts/debroot.sh DIST}
MIRROR=${RLW_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DIR=$ROOT/target/roots/$DIST
PKGS=nginx-core,curl,iproute2,procps,ca-certificates

die() { echo "scripts/debroot.sh: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "debootstrap and chroot need root"
scripts/deps.sh debootstrap debian-archive-keyring >&2

if [ -f "$DIR/.complete" ] && [ -z "${RLW_ROOT_REFRESH:-}" ] \
    && [ -n "$(find "$DIR/.complete" -mtime -7 2>/dev/null)" ]; then
    echo "$DIR"
    exit 0
fi
# A root left mounted by an interrupted run must not be deleted through.
for m in proc sys dev; do
    mountpoint -q "$DIR/$m" && umount -l "$DIR/$m"
done
rm -rf "$DIR"
mkdir -p "$(dirname "$DIR")"
echo "scripts/debroot.sh: debootstrap $DIST into $DIR ($PKGS; log: $DIR.log)" >&2
if ! debootstrap --variant=minbase --include="$PKGS" \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    "$DIST" "$DIR" "$MIRROR" >"$DIR.log" 2>&1; then
    tail -n 20 "$DIR.log" >&2
    grep -E "Couldn't download|Failed getting|E: " "$DIR.log" >&2 || true
    die "debootstrap $DIST failed (a package that could not be fetched is named above; log: $DIR.log)"
fi
touch "$DIR/.complete"
echo "$DIR"
