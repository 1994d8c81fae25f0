#!/usr/bin/env bash
# `make run`: runs nginx-conf/gateway.conf in the foreground with the module
# just built. Gateway on 127.0.0.1:8080, demo app on 127.0.0.1:8081.
# Ctrl-C stops nginx (master and workers); nothing is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=target/run
mkdir -p "$prefix/logs" "$prefix/modules" "$prefix/html"
ln -sf "$PWD/target/dist/ngx_http_rate_limit_window_module.so" "$prefix/modules/ngx_http_rate_limit_window_module.so"
conf="$PWD/nginx-conf/gateway.conf"
args=(-p "$PWD/$prefix/" -c "$conf")
grep -Eq '^\s*daemon\s+off\s*;' "$conf" || args+=(-g 'daemon off;')

"target/dist/nginx" "${args[@]}" -t -q
cat <<MSG
rate_limit_window gateway: http://127.0.0.1:8080/  ->  demo app on 127.0.0.1:8081
  try:   for i in \$(seq 1 15); do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:8080/; done; echo
  see:   curl -si http://127.0.0.1:8080/ | grep -iE '^(HTTP|retry-after|ratelimit)'
  stats: curl -s http://127.0.0.1:8080/metrics
Ctrl-C stops it.
MSG
exec "target/dist/nginx" "${args[@]}"
