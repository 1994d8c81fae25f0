#!/usr/bin/env bash
# scripts/valkey.sh: Valkey for the fleet tests (`make test ENGINE=valkey`):
# valkey-server, valkey-sentinel and valkey-cli from Debian's
# bookworm-backports (valkey-tools, valkey-server, valkey-sentinel),
# fetched with the private apt configuration of scripts/apt.sh and
# unpacked with dpkg -x into target/valkey (nothing is installed on the
# machine but the libraries they link, from bookworm itself).
#
# Prints the directory holding the three programs. RLW_VALKEY_SUITE picks
# another suite (default bookworm-backports).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SUITE=${RLW_VALKEY_SUITE:-bookworm-backports}
DIR=$ROOT/target/valkey/$SUITE
BIN=$DIR/root/usr/bin

die() { echo "scripts/valkey.sh: $*" >&2; exit 1; }

# What valkey-tools links besides libc: liblzf1, libjemalloc2, libatomic1,
# libssl3 and libsystemd0 (bookworm's own packages).
scripts/deps.sh liblzf1 libjemalloc2 libatomic1 libssl3 libsystemd0 >&2

if ! "$BIN/valkey-server" --version >/dev/null 2>&1; then
    rm -rf "$DIR"
    mkdir -p "$DIR/debs"
    scripts/apt.sh download "$DIR/debs" \
        "valkey-tools/$SUITE" "valkey-server/$SUITE" "valkey-sentinel/$SUITE"
    for deb in "$DIR"/debs/*.deb; do
        dpkg-deb -x "$deb" "$DIR/root" || die "cannot unpack $deb"
    done
    "$BIN/valkey-server" --version >&2 || die "$BIN/valkey-server does not run"
fi
for p in valkey-server valkey-sentinel valkey-cli; do
    [ -x "$BIN/$p" ] || die "$BIN/$p missing"
done
echo "$BIN"
