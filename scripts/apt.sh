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
#   scripts/apt.sh orig DIR PKG/SUITE         only the upstream tarball of that
#                                             source package (its .orig.tar.*),
#                                             checked against the SHA256 of the
#                                             signed Sources index; prints its path
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
deb-src [signed-by=$KEYRING] $MIRROR trixie main
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

# The upstream tarball named in the suite's Sources index (apt-get source
# --print-uris: URI, file name, size, SHA256), fetched by apt's own
# downloader, which checks the hash. Kept in DIR while its hash matches.
orig() {
    local dir=$1 p=$2 line uri file hash log
    mkdir -p "$dir"
    # (in an empty directory: apt-get names no file already in its own)
    rm -rf "$APT/uris" && mkdir -p "$APT/uris"
    line=$(cd "$APT/uris" && apt-get "${opts[@]}" source --download-only --print-uris "$p" 2>/dev/null \
        | grep -E "^'[^']+' [^ ]+\.orig\.tar\.(gz|xz|bz2) [0-9]+ SHA256:" | head -n1) \
        || die "source package $p has no upstream tarball in the Sources index ($MIRROR)"
    read -r uri file _ hash <<<"$line"
    uri=${uri//\'/}
    if ! echo "${hash#SHA256:}  $dir/$file" | sha256sum --quiet -c - >/dev/null 2>&1; then
        echo "scripts/apt.sh: fetching $uri" >&2
        log=$dir/$file.log
        if ! /usr/lib/apt/apt-helper "${opts[@]}" download-file "$uri" "$dir/$file.part" "$hash" >"$log" 2>&1; then
            rm -f "$dir/$file.part"
            die "cannot fetch $uri ($p's upstream tarball): $(grep -m1 -oE '[0-9]{3} +[A-Za-z]+( [A-Za-z]+)*' "$log" || tail -n1 "$log")"
        fi
        mv -f "$dir/$file.part" "$dir/$file"
        rm -f "$log"
    fi
    echo "$dir/$file"
}

cmd=${1:?usage: scripts/apt.sh download|source|orig DIR PKG/SUITE...}
dir=${2:?usage: scripts/apt.sh download|source|orig DIR PKG/SUITE...}
shift 2
[ $# -gt 0 ] || die "no package named"
setup
case $cmd in
    download) download "$dir" "$@" ;;
    source) source_pkg "$dir" "$1" ;;
    orig) orig "$dir" "$1" ;;
    *) die "unknown command $cmd" ;;
esac
