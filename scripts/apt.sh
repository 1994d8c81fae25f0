#!/usr/bin/env bash
# scripts/apt.sh: packages from other Debian suites (trixie, bookworm-backports,
# sid's sources) through a private apt configuration under target/apt. The
# machine's apt sources, lists and cache are never read or changed: every
# apt-get here runs with its own Dir::Etc::SourceList, Dir::State and
# Dir::Cache.
#
#   scripts/apt.sh download DIR PKG/SUITE...  the .debs into DIR (apt-get download)
#   scripts/apt.sh source DIR PKG/SUITE       a source package into DIR
#                                             (apt-get source --download-only)
#
# The lists are fetched on first use and again when older than a day
# (RLW_APT_REFRESH=1: now). A package that cannot be fetched fails with a
# message naming it. Mirror: RLW_DEBIAN_MIRROR (default deb.debian.org).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
APT=$ROOT/target/apt
MIRROR=${RLW_DEBIAN_MIRROR:-http://deb.debian.org/debian}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

die() { echo "scripts/apt.sh: $*" >&2; exit 1; }

# The private configuration's options, for apt-get and apt-cache.
opts=(
    -o "Dir::Etc::SourceList=$APT/sources.list"
    -o "Dir::Etc::SourceParts=$APT/sources.list.d"
    -o "Dir::Etc::Preferences=$APT/preferences"
    -o "Dir::Etc::PreferencesParts=$APT/preferences.d"
    -o "Dir::State=$APT/state"
    -o "Dir::State::status=$APT/state/status"
    -o "Dir::Cache=$APT/cache"
    -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false"
    -o "APT::Sandbox::User=root"
    -q
)

setup() {
    [ -f "$KEYRING" ] || die "$KEYRING not found (package debian-archive-keyring)"
    mkdir -p "$APT/sources.list.d" "$APT/preferences.d" "$APT/state/lists/partial" \
        "$APT/cache/archives/partial"
    touch "$APT/state/status"
    local list
    list="# Written by scripts/apt.sh: the suites this project fetches from.
deb [signed-by=$KEYRING] $MIRROR trixie main
deb [signed-by=$KEYRING] $MIRROR bookworm-backports main
deb [signed-by=$KEYRING] $MIRROR sid main
deb-src [signed-by=$KEYRING] $MIRROR sid main"
    if [ "$(cat "$APT/sources.list" 2>/dev/null)" != "$list" ]; then
        printf '%s\n' "$list" >"$APT/sources.list"
        rm -f "$APT/state/.updated"
    fi
    if [ -n "${RLW_APT_REFRESH:-}" ] || [ -z "$(find "$APT/state/.updated" -mmin -1440 2>/dev/null)" ]; then
        echo "scripts/apt.sh: apt-get update (private lists in $APT)" >&2
        apt-get "${opts[@]}" update >"$APT/update.log" 2>&1 \
            || { cat "$APT/update.log" >&2; die "apt-get update of trixie, bookworm-backports and sid failed ($MIRROR)"; }
        grep -E '^(W|E):' "$APT/update.log" >&2 || true
        touch "$APT/state/.updated"
    fi
}

download() {
    local dir=$1 p
    shift
    mkdir -p "$dir"
    for p in "$@"; do
        (cd "$dir" && apt-get "${opts[@]}" download "$p") >&2 \
            || die "cannot fetch package $p from $MIRROR"
    done
}

source_pkg() {
    local dir=$1 p=$2
    mkdir -p "$dir"
    (cd "$dir" && apt-get "${opts[@]}" source --download-only "$p") >&2 \
        || die "cannot fetch source package $p from $MIRROR"
}

cmd=${1:?usage: scripts/apt.sh download|source DIR PKG/SUITE...}
dir=${2:?usage: scripts/apt.sh download|source DIR PKG/SUITE...}
shift 2
[ $# -gt 0 ] || die "no package named"
setup
case $cmd in
    download) download "$dir" "$@" ;;
    source) source_pkg "$dir" "$1" ;;
    *) die "unknown command $cmd" ;;
esac
