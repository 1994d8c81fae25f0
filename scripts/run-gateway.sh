#!/usr/bin/env bash
# `make run [PORT=8080] [APP_PORT=PORT+1]`: runs nginx-conf/gateway.conf in
# the foreground with the module just built: the gateway on 127.0.0.1:PORT,
# the demo app on 127.0.0.1:APP_PORT. Other ports than 8080/8081 are written
# into a copy of the configuration, target/run/conf/gateway.conf.
# Ctrl-C stops nginx (master and workers); nothing is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
check_port() {
	if ! [[ $1 =~ ^[0-9]{1,5}$ ]] || ((10#$1 < 1 || 10#$1 > 65535)); then
		echo "run-gateway: invalid port \"$1\" (PORT and APP_PORT: 1..65535)" >&2
		exit 2
	fi
}
port=${PORT:-8080}
check_port "$port"
app_port=${APP_PORT:-$((10#$port + 1))}
check_port "$app_port"
if ((port == app_port)); then
	echo "run-gateway: PORT and APP_PORT must differ (both $port)" >&2
	exit 2
fi
prefix=target/run
mkdir -p "$prefix/logs" "$prefix/modules" "$prefix/html" "$prefix/conf"
ln -sf "$PWD/target/dist/ngx_http_rate_limit_window_module.so" "$prefix/modules/ngx_http_rate_limit_window_module.so"
conf="$PWD/$prefix/conf/gateway.conf"
sed -e "s/127\.0\.0\.1:8080/127.0.0.1:$port/g" -e "s/127\.0\.0\.1:8081/127.0.0.1:$app_port/g" \
	-e "s/localhost:8080/localhost:$port/g" nginx-conf/gateway.conf >"$conf"
args=(-p "$PWD/$prefix/" -c "$conf")
grep -Eq '^\s*daemon\s+off\s*;' "$conf" || args+=(-g 'daemon off;')

"target/dist/nginx" "${args[@]}" -t -q
cat <<MSG
rate_limit_window gateway: http://127.0.0.1:$port/  ->  demo app on 127.0.0.1:$app_port
  try:   for i in \$(seq 1 15); do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:$port/; done; echo
  see:   curl -si http://127.0.0.1:$port/ | grep -iE '^(HTTP|retry-after|ratelimit)'
  stats: curl -s http://127.0.0.1:$port/metrics
Ctrl-C stops it.
MSG
exec "target/dist/nginx" "${args[@]}"
