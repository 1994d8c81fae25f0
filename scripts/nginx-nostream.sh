#!/usr/bin/env bash
# scripts/nginx-nostream.sh: the vendored nginx (scripts/nginx.sh: the same
# source and flags) built without stream, in target/nginx-nostream, only
# when it is missing or its flags or source changed. tests/it/stream.rs
# loads the module into it: the http module must work where nginx has no
# stream (the module's stream symbols are weak, src/ffi/stream_weak.c).
# Prints the binary's path.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
DIR=$ROOT/target/nginx-nostream
export RLW_NGINX_WITHOUT_STREAM=1
info_before=$(cat "$DIR/.build-info" 2>/dev/null || true)
nice -n 10 scripts/nginx.sh configure "$DIR" >/dev/null
if [ ! -x "$DIR/nginx" ] || [ "$(cat "$DIR/.build-info")" != "$info_before" ]; then
    start=$(date +%s)
    nice -n 10 scripts/nginx.sh make "$DIR"
    echo "nginx without stream: built in $(($(date +%s) - start)) s" >&2
fi
echo "$DIR/nginx"
