#!/usr/bin/env bash
# Installs the .deb from `make deb` next to the distribution's nginx and checks
# that Debian's own /usr/sbin/nginx loads the module and limits requests.
#
#   [DIST=bookworm|trixie] scripts/test-deb.sh [PATH.deb]
#
# DIST (default bookworm) is the release the package was built for. The
# release this machine runs is tested here; another (trixie) in a root of
# that release made with debootstrap (scripts/debroot.sh, cached in
# target/roots/DIST) with its own nginx-core: this script, the package and
# what it reads are copied into the root's /root/rlw and run there with
# chroot, /proc, /sys and /dev mounted for the run.
#
# Installs nginx and curl if missing (scripts/deps.sh), installs the package
# with docs/operations.md's printed lines for DIST (dpkg -i, nginx -t), runs
# /usr/sbin/nginx -t and then a private nginx instance (-p <tmp prefix>,
# free ports on 127.0.0.1; the system service and port 80 are not used) that
# loads the module through /etc/nginx/modules-enabled, sends 5 requests and
# expects 3 x 200 then 429. Then checks the maintainer scripts: remove
# disables the module, a reinstall re-enables it, purge cleans up. The package
# is left purged. Needs root (or sudo) for apt-get and dpkg.
#
# Prints PASS/FAIL per check and "N passed, M failed"; exits 1 on any failure.
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

PKG=libnginx-mod-http-rate-limit-window
MODULE=ngx_http_rate_limit_window_module
NGINX=/usr/sbin/nginx
AVAILABLE=/usr/share/nginx/modules-available/mod-http-rate-limit-window.conf
LINK=/etc/nginx/modules-enabled/70-mod-http-rate-limit-window.conf
SO=/usr/lib/nginx/modules/$MODULE.so
SYSTEM_PID=/run/nginx.pid
LIMIT=3
REQUESTS=5

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

passed=0
failed=0
pass() { echo "PASS: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
check() { # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
  exit $?
}
abort() { fail "$*"; finish; }

# --- the package -------------------------------------------------------------
DIST=${DIST:-bookworm}
HOST_DIST=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
DEB=${1:-}
if [ -z "$DEB" ]; then
  version=$(awk '/^\[package\]/{p=1;next} /^\[/{p=0} p && /^version[[:space:]]*=/{gsub(/.*=[[:space:]]*"|".*/,"");print;exit}' Cargo.toml)
  dir=$ROOT/target/debian
  [ "$DIST" = "$HOST_DIST" ] || dir=$dir/$DIST
  DEB="$dir/${PKG}_${version}-${DEB_REVISION:-1}_$(dpkg --print-architecture).deb"
fi
[ -f "$DEB" ] || abort "package $DEB exists (run make deb DIST=$DIST)"
pass "package $DEB exists"

# Another release: the same checks inside a root of it.
if [ "$DIST" != "$HOST_DIST" ]; then
  R=$(scripts/debroot.sh "$DIST") || abort "a $DIST root (scripts/debroot.sh $DIST)"
  echo "info: testing in $R ($(. "$R/etc/os-release" && echo "$PRETTY_NAME"))"
  rm -rf "$R/root/rlw"
  mkdir -p "$R/root/rlw/scripts" "$R/root/rlw/docs"
  cp scripts/test-deb.sh scripts/deps.sh "$R/root/rlw/scripts/"
  cp Cargo.toml "$R/root/rlw/"
  cp docs/operations.md "$R/root/rlw/docs/"
  cp README.md "$R/root/rlw/"
  cp "$DEB" "$R/root/rlw/"
  # The printed scp copies the package make deb DIST=$DIST left.
  scp_src=$(awk -v m="<!-- install: $DIST -->" '$0==m{f=1;next} f&&/^```sh/{b=1;next} b&&/^```/{exit} b' \
    docs/operations.md | sed -n 's/^scp \([^ ]*\) .*/\1/p')
  if test "$ROOT/${scp_src:-none}" -ef "$DEB"; then
    pass "the printed scp copies $scp_src, the package make deb DIST=$DIST made"
  else
    abort "the printed scp copies ${scp_src:-nothing}, not $DEB"
  fi
  mounted=()
  unmount() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" || true; done
  }
  trap unmount EXIT
  for m in proc sys dev; do
    mountpoint -q "$R/$m" || { mount --bind "/$m" "$R/$m" && mounted+=("$R/$m"); }
  done
  chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DIST="$DIST" /bin/bash /root/rlw/scripts/test-deb.sh "/root/rlw/$(basename "$DEB")"
  exit $?
fi

# --- nginx from the distribution -------------------------------------------
system_nginx_running() {
  [ -s "$SYSTEM_PID" ] && $SUDO kill -0 "$(cat "$SYSTEM_PID" 2>/dev/null)" 2>/dev/null
}
was_running=false
system_nginx_running && was_running=true

# If installing nginx (or our trigger) started the system service, stop it:
# this test never uses the service or port 80.
stop_system_nginx_if_we_started_it() {
  $was_running && return 0
  system_nginx_running || return 0
  echo "note: stopping the nginx service that package installation started"
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    $SUDO systemctl stop nginx 2>/dev/null || true
  fi
  if system_nginx_running; then
    $SUDO "$NGINX" -s quit 2>/dev/null || $SUDO kill -QUIT "$(cat "$SYSTEM_PID")" 2>/dev/null || true
    for _ in $(seq 50); do system_nginx_running || break; sleep 0.1; done
  fi
  system_nginx_running && echo "warning: the system nginx (pid $(cat "$SYSTEM_PID")) is still running"
  return 0
}

if scripts/deps.sh nginx curl libnginx-mod-stream; then pass "nginx, curl and libnginx-mod-stream installed"; else abort "nginx, curl and libnginx-mod-stream installed"; fi
stop_system_nginx_if_we_started_it
[ -x "$NGINX" ] || abort "$NGINX exists"
echo "info: $("$NGINX" -v 2>&1), package nginx $(dpkg-query -W -f='${Version}' nginx 2>/dev/null)"
# nginx's version as a number (1.26.3: 1026003).
nginx_version=$("$NGINX" -v 2>&1 | sed -n 's#.*nginx/\([0-9]*\)\.\([0-9]*\)\.\([0-9]*\).*#\1 \2 \3#p' \
  | awk '{ printf "%d%03d%03d", $1, $2, $3 }')

# The ABI our package Depends on must be one the installed nginx Provides.
abi=$(dpkg-deb -f "$DEB" Depends | tr ',' '\n' | sed 's/^ *//' | grep '^nginx-abi-' | head -n1)
provides=$(dpkg-query -W -f='${Provides}\n' nginx nginx-core nginx-light nginx-full nginx-extras 2>/dev/null | tr ',' '\n' | sed 's/^ *//; s/ .*//')
check "package depends on $abi, which the installed nginx provides" \
  grep -qx -- "${abi:-none}" <<<"$provides"

# --- install, as docs/operations.md prints it for DIST ------------------------
# The ```sh block after `<!-- install: DIST -->`: its `make deb` line is what
# `make test-deb` ran before this script (checked), an `scp` line copies that
# package (checked outside the root), and its `sudo` lines run here as
# printed, in the package's directory (the checkout, or the root's copy);
# `sudo` is the command itself for root without sudo. Only `systemctl` is
# not run: there is no service manager here (the private instance below
# checks a reload with nginx -s reload).
# The link as the packages before 0.1.0-2 named it (loaded before Debian's
# 50-mod-stream.conf): postinst moves it to 70-.
OLD_LINK=/etc/nginx/modules-enabled/50-mod-http-rate-limit-window.conf
$SUDO mkdir -p /etc/nginx/modules-enabled
$SUDO ln -sf "$AVAILABLE" "$OLD_LINK"
install_block=$(awk -v m="<!-- install: $DIST -->" '$0==m{f=1;next} f&&/^```sh/{b=1;next} b&&/^```/{exit} b' docs/operations.md)
check "docs/operations.md prints the $DIST install" grep -q '^sudo dpkg -i ' <<<"$install_block"
run_printed() { # run_printed LINE: a `sudo ...` line of the install block
  local cmd=$1
  if [ "$(id -u)" -eq 0 ] && ! command -v sudo >/dev/null; then cmd=${cmd#sudo }; fi
  echo "\$ $1"
  bash -c "$cmd"
}
want_make="make deb"
[ "$DIST" = bookworm ] || want_make="make deb DIST=$DIST"
while IFS= read -r line; do
  case $line in
    make\ deb*) check "printed build line is $want_make" test "$line" = "$want_make" ;;
    scp\ *) ;;
    sudo\ systemctl\ *) echo "note: not run here (no service manager): $line" ;;
    sudo\ *)
      if run_printed "$line"; then pass "as printed: $line"; else abort "as printed: $line"; fi
      stop_system_nginx_if_we_started_it ;;
    '' | \#*) ;;
    *) fail "unexpected line in the $DIST install block: $line" ;;
  esac
done <<<"$install_block"
check "the printed dpkg -i installed $(basename "$DEB")" \
  eval 'dpkg-query -W -f="\${Status}" "$PKG" 2>/dev/null | grep -q "install ok installed"'
check "postinst moved the old 50- link to 70- (after 50-mod-stream.conf)" \
  eval '[ ! -L "$OLD_LINK" ] && [ -L "$LINK" ]'

check "$SO installed" test -f "$SO"
check "$AVAILABLE loads the module" \
  grep -qx "load_module modules/$MODULE.so;" "$AVAILABLE"
check "/usr/share/doc/$PKG/copyright installed" test -f "/usr/share/doc/$PKG/copyright"
check "postinst linked $LINK -> $AVAILABLE" \
  test "$(readlink "$LINK" 2>/dev/null)" = "$AVAILABLE"

# --- a private nginx on free ports -------------------------------------------
T=$(mktemp -d /tmp/test-deb.XXXXXX)
chmod 0755 "$T"
test_pid=""
cleanup() {
  if [ -n "$test_pid" ] && kill -0 "$test_pid" 2>/dev/null; then
    "$NGINX" -p "$T/" -c "$T/nginx.conf" -s stop 2>/dev/null || kill "$test_pid" 2>/dev/null
  fi
  rm -rf "$T"
}
trap cleanup EXIT

port_free() {
  if command -v ss >/dev/null; then
    [ -z "$(ss -Htln "sport = :$1" 2>/dev/null)" ]
  else
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}
free_port() { # free_port EXCEPT
  local p
  for _ in $(seq 200); do
    p=$((23000 + RANDOM % 9000))   # below the ephemeral ports (32768-), above the tests' (12000-22000)
    [ "$p" != "${1:-}" ] && port_free "$p" && { echo "$p"; return 0; }
  done
  return 1
}
GW=$(free_port) || abort "found a free port"
UP=$(free_port "$GW") || abort "found a second free port"
ST=$(free_port "$UP") || abort "found a third free port"

# load_module paths are relative to the prefix: Debian's prefix
# /usr/share/nginx has modules -> /usr/lib/nginx/modules; so does ours.
ln -s /usr/lib/nginx/modules "$T/modules"
mkdir -p "$T/logs" "$T/tmp"
cat >"$T/nginx.conf" <<EOF
# Loaded the Debian way: through the package's modules-enabled link.
include /etc/nginx/modules-enabled/*.conf;

worker_processes 2;
pid $T/nginx.pid;
error_log $T/logs/error.log info;

events {
    worker_connections 64;
}

http {
    access_log $T/logs/access.log;
    client_body_temp_path $T/tmp/body;
    proxy_temp_path $T/tmp/proxy;
    fastcgi_temp_path $T/tmp/fastcgi;
    uwsgi_temp_path $T/tmp/uwsgi;
    scgi_temp_path $T/tmp/scgi;

    rate_limit_window_zone \$binary_remote_addr zone=t:1m window=1m;
    # A request header as the key: read by the module itself (src/ffi/header_in.rs).
    rate_limit_window_zone \$http_x_client zone=h:1m window=1m;

    # the upstream
    server {
        listen 127.0.0.1:$UP;
        location / {
            return 200 "upstream-ok\n";
        }
    }

    # the limited gateway
    server {
        listen 127.0.0.1:$GW;
        location / {
            rate_limit_window zone=t limit=$LIMIT;
            proxy_pass http://127.0.0.1:$UP;
        }
        location /by-header {
            rate_limit_window zone=h limit=1;
            proxy_pass http://127.0.0.1:$UP;
        }
    }
}

# The stream half: Debian's stream module is loaded first (50-mod-stream.conf).
stream {
    rate_limit_window_zone \$binary_remote_addr zone=s:1m window=1m;
    server {
        listen 127.0.0.1:$ST;
        rate_limit_window zone=s limit=1;
        proxy_pass 127.0.0.1:$UP;
    }
}
EOF

out=$("$NGINX" -t -p "$T/" -c "$T/nginx.conf" 2>&1)
rc=$?
echo "$out" | sed 's/^/  nginx -t: /'
check "Debian's nginx -t accepts the config (module loaded via modules-enabled)" test "$rc" -eq 0
check "nginx -t reports no binary incompatibility" \
  eval '! grep -qi "not binary compatible" <<<"$out"'

# The load order (docs/stream.md): this module loaded before Debian's
# ngx_stream_module.so still limits http, and a stream {} block with its
# directives fails nginx -t with the [emerg] that says to load stream first.
order_conf() { # order_conf WITH_STREAM: this module first, then stream's
  printf 'load_module modules/%s.so;\nload_module modules/ngx_stream_module.so;\n' "$MODULE"
  printf 'pid %s/order.pid;\nerror_log %s/logs/order.log;\nevents { }\n' "$T" "$T"
  printf 'http { rate_limit_window_zone $binary_remote_addr zone=o:1m;\n'
  printf '  server { listen 127.0.0.1:%s; location / { rate_limit_window zone=o limit=3; proxy_pass http://127.0.0.1:%s; } } }\n' "$GW" "$UP"
  [ "$1" = yes ] || return 0
  printf 'stream { rate_limit_window_zone $binary_remote_addr zone=os:1m;\n'
  printf '  server { listen 127.0.0.1:%s; rate_limit_window zone=os limit=1; proxy_pass 127.0.0.1:%s; } }\n' "$ST" "$UP"
}
order_conf no >"$T/order.conf"
out=$("$NGINX" -t -p "$T/" -c "$T/order.conf" 2>&1)
rc=$?
check "loaded before ngx_stream_module.so, the module's http half passes nginx -t" test "$rc" -eq 0
order_conf yes >"$T/order.conf"
out=$("$NGINX" -t -p "$T/" -c "$T/order.conf" 2>&1)
rc=$?
echo "$out" | sed 's/^/  nginx -t (stream loaded second): /'
check "loaded before ngx_stream_module.so, stream {} fails nginx -t with the [emerg] to load stream first" \
  eval '[ "$rc" -ne 0 ] && grep -q "\[emerg\].*ngx_stream_rate_limit_window_module needs nginx.s stream module loaded before it" <<<"$out"'

out=$($SUDO "$NGINX" -t -q 2>&1)
rc=$?
[ -n "$out" ] && echo "$out" | sed 's/^/  nginx -t (system config): /'
check "nginx -t on the system /etc/nginx/nginx.conf with the module enabled" test "$rc" -eq 0

# A sliding window: 3 requests late in one minute could be weighted below the
# limit a second later. Keep the burst inside one UTC minute.
sec=$((10#$(date -u +%S)))
if [ "$sec" -ge 50 ]; then
  echo "info: waiting $((61 - sec))s for the next UTC minute"
  sleep $((61 - sec))
fi

if "$NGINX" -p "$T/" -c "$T/nginx.conf"; then
  for _ in $(seq 50); do [ -s "$T/nginx.pid" ] && break; sleep 0.1; done
  test_pid=$(cat "$T/nginx.pid" 2>/dev/null)
  for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$UP/" && break; sleep 0.1
  done
  pass "nginx started (pid $test_pid, gateway 127.0.0.1:$GW, upstream 127.0.0.1:$UP)"
else
  fail "nginx started"
  sed 's/^/  error.log: /' "$T/logs/error.log" 2>/dev/null
fi

header() { # header NAME FILE -> value
  tr -d '\r' <"$2" | sed -n "s/^$1: *//Ip" | head -n1
}
if [ -n "$test_pid" ]; then
  for i in $(seq "$REQUESTS"); do
    code=$(curl -s -D "$T/h$i" -o "$T/b$i" -w '%{http_code}' "http://127.0.0.1:$GW/")
    echo "  request $i: $code" \
      "RateLimit-Limit=$(header RateLimit-Limit "$T/h$i")" \
      "RateLimit-Remaining=$(header RateLimit-Remaining "$T/h$i")" \
      "RateLimit-Reset=$(header RateLimit-Reset "$T/h$i")" \
      "Retry-After=$(header Retry-After "$T/h$i")"
    if [ "$i" -le "$LIMIT" ]; then
      check "request $i: 200 from the upstream" \
        test "$code" = 200 -a "$(cat "$T/b$i")" = "upstream-ok"
      check "request $i: RateLimit-Limit $LIMIT, RateLimit-Remaining $((LIMIT - i))" \
        test "$(header RateLimit-Limit "$T/h$i")" = "$LIMIT" \
          -a "$(header RateLimit-Remaining "$T/h$i")" = "$((LIMIT - i))"
    else
      check "request $i: 429" test "$code" = 429
      ok=true
      for h in Retry-After RateLimit-Limit RateLimit-Remaining RateLimit-Reset; do
        [[ "$(header "$h" "$T/h$i")" =~ ^[0-9]+$ ]] || ok=false
      done
      check "request $i: Retry-After, RateLimit-Limit/Remaining/Reset present" $ok
    fi
  done

  # nginx 1.22 reads $http_x_client as the first X-Client header; 1.23
  # and later join them ("a, b"): then a + b is a client of its own.
  by_header() { curl -s -o /dev/null -w '%{http_code}' "$@" "http://127.0.0.1:$GW/by-header"; }
  check "header key: client a's first request 200" test "$(by_header -H 'X-Client: a')" = 200
  if [ "${nginx_version:-0}" -lt 1023000 ]; then
    check "header key: X-Client a then b is client a (nginx 1.22: the first header), 429" \
      test "$(by_header -H 'X-Client: a' -H 'X-Client: b')" = 429
  else
    check "header key: X-Client a then b is client \"a, b\" (nginx 1.23+ joins them), 200 then 429" \
      test "$(by_header -H 'X-Client: a' -H 'X-Client: b')$(by_header -H 'X-Client: a' -H 'X-Client: b')" = 200429
  fi
  check "header key: client b's first request 200" test "$(by_header -H 'X-Client: b')" = 200

  # stream: one TCP connection a minute; the second is closed unanswered.
  by_stream() {
    timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ST; printf 'GET / HTTP/1.0\r\n\r\n' >&3; cat <&3" 2>/dev/null
  }
  check "stream: the first connection is proxied" eval 'by_stream | grep -q upstream-ok'
  check "stream: the second is closed before the upstream" eval '! by_stream | grep -q upstream-ok'

  # A reload keeps the zone and its counts: the client stays limited, and
  # the new workers answer.
  old_workers=$(pgrep -P "$test_pid" | sort | tr '\n' ' ')
  still_old() { local p; for p in $old_workers; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
  if "$NGINX" -p "$T/" -c "$T/nginx.conf" -s reload; then pass "nginx -s reload"; else fail "nginx -s reload"; fi
  for _ in $(seq 100); do still_old || break; sleep 0.1; done
  new_workers=$(pgrep -P "$test_pid" | sort | tr '\n' ' ')
  check "reload: old workers ($old_workers) exited, new ones ($new_workers) run" \
    eval '! still_old && [ -n "$new_workers" ]'
  code=$(curl -s -D "$T/hr" -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW/")
  check "reload: the client is still limited (429, Retry-After $(header Retry-After "$T/hr"))" \
    test "$code" = 429 -a -n "$(header Retry-After "$T/hr")"
  check "reload: another client is admitted (200)" \
    test "$(by_header -H 'X-Client: after-reload')" = 200

  "$NGINX" -p "$T/" -c "$T/nginx.conf" -s quit
  for _ in $(seq 100); do kill -0 "$test_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$test_pid" 2>/dev/null; then
    fail "nginx -s quit stopped the test nginx"
  else
    pass "nginx -s quit stopped the test nginx"
    test_pid=""
  fi
  if grep -E '\[(alert|emerg|crit)\]' "$T/logs/error.log" >/dev/null; then
    fail "no alert/crit/emerg in error.log"
    grep -E '\[(alert|emerg|crit)\]' "$T/logs/error.log" | sed 's/^/  error.log: /'
  else
    pass "no alert/crit/emerg in error.log"
  fi
fi

# --- the conf.d snippet of docs/operations.md, as printed --------------------
# Debian's nginx.conf includes /etc/nginx/conf.d/*.conf inside http{}: the
# documented file there passes nginx -t on the stock configuration, and a
# copy of the stock nginx.conf (without sites-enabled, on free ports)
# serves it: 100 requests a minute, then 429.
SNIPPET=/etc/nginx/conf.d/rate-limit.conf
snippet=$(awk '/conf\.d\/rate-limit\.conf/{f=1} f&&/^```nginx/{b=1;next} b&&/^```/{exit} b' docs/operations.md)
check "docs/operations.md prints the conf.d snippet" grep -q 'rate_limit_window_zone' <<<"$snippet"
if [ -e "$SNIPPET" ]; then
  fail "$SNIPPET is free (it exists: not overwritten)"
else
  snippet_cleanup() { rm -f "$SNIPPET"; cleanup; }
  trap snippet_cleanup EXIT
  printf '%s\n' "$snippet" >"$SNIPPET"
  out=$($SUDO "$NGINX" -t 2>&1)
  rc=$?
  echo "$out" | sed 's/^/  nginx -t (stock config + snippet): /'
  check "nginx -t: the stock nginx.conf with $SNIPPET" test "$rc" -eq 0
  # The README's quick start as a whole there fails as operations.md says.
  quick=$(awk '/^## Quick start/{q=1} q&&/^```nginx/{b=1;next} b&&/^```/{exit} b' README.md)
  quoted=$(tr '\n' ' ' <docs/operations.md | sed -n 's/.*quick start as a whole fails there, at its first line, with `\([^`]*\)`.*/\1/p')
  printf '%s\n' "$quick" >"$SNIPPET"
  out=$($SUDO "$NGINX" -t 2>&1)
  echo "$out" | sed 's/^/  nginx -t (stock config + quick start): /'
  check "the quick start in conf.d fails with the error operations.md quotes (${quoted:-none quoted})" \
    eval '[ -n "$quoted" ] && grep -F -- "[emerg]" <<<"$out" | grep -qF -- "$quoted in $SNIPPET:1"'
  rm -f "$SNIPPET"
  GW2=$(free_port "$GW") || abort "found a third free port"
  mkdir -p "$T/conf.d"
  sed -e "s/listen 8080;/listen 127.0.0.1:$GW2;/" -e "s/127\.0\.0\.1:8081/127.0.0.1:$UP/" \
    <<<"$snippet" >"$T/conf.d/rate-limit.conf"
  sed -e "s#include /etc/nginx/conf.d/\*.conf;#include $T/conf.d/*.conf;#" \
      -e "/include \/etc\/nginx\/sites-enabled/d" \
      -e "s#^pid .*#pid $T/stock.pid;#" \
      -e "s#^error_log .*#error_log $T/logs/stock-error.log;#" \
      /etc/nginx/nginx.conf >"$T/stock.conf"
  # The upstream of the first instance serves the snippet's app.
  "$NGINX" -p "$T/" -c "$T/nginx.conf" && sleep 0.5
  test_pid=$(cat "$T/nginx.pid" 2>/dev/null)
  sec=$((10#$(date -u +%S)))
  [ "$sec" -lt 45 ] || sleep $((61 - sec))
  if "$NGINX" -p "$T/" -c "$T/stock.conf"; then
    for _ in $(seq 50); do [ -s "$T/stock.pid" ] && break; sleep 0.1; done
    codes=""
    for i in $(seq 101); do
      codes+=" $(curl -s -D "$T/hs" -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW2/api/x")"
    done
    check "snippet: 100 requests 200 in a minute, the 101st 429 (Retry-After $(header Retry-After "$T/hs"))" \
      test "$(tr ' ' '\n' <<<"$codes" | grep -c '^200$'):${codes##* }" = "100:429" \
      -a -n "$(header Retry-After "$T/hs")"
    metrics=$(curl -s "http://127.0.0.1:$GW2/metrics")
    check "snippet: /metrics from 127.0.0.1" grep -q "^rate_limit_window_" <<<"$metrics"
    grep -q "^rate_limit_window_" <<<"$metrics" || echo "$metrics" | head -5 | sed 's/^/  metrics: /'
    "$NGINX" -p "$T/" -c "$T/stock.conf" -s quit
  else
    fail "nginx started with the stock nginx.conf and the snippet"
  fi
  "$NGINX" -p "$T/" -c "$T/nginx.conf" -s quit
  for _ in $(seq 100); do [ -e "$T/stock.pid" ] || [ -e "$T/nginx.pid" ] || break; sleep 0.1; done
  test_pid=""
  trap cleanup EXIT
fi

# --- maintainer scripts ------------------------------------------------------
if $SUDO dpkg -r "$PKG" >/dev/null; then pass "dpkg -r $PKG"; else fail "dpkg -r $PKG"; fi
stop_system_nginx_if_we_started_it
check "remove: module disabled ($LINK gone)" test ! -e "$LINK" -a ! -L "$LINK"
check "remove: $SO gone" test ! -e "$SO"

if $SUDO dpkg -i "$DEB" >/dev/null; then pass "reinstall after remove"; else fail "reinstall after remove"; fi
stop_system_nginx_if_we_started_it
check "reinstall: module enabled again" test "$(readlink "$LINK" 2>/dev/null)" = "$AVAILABLE"

if $SUDO dpkg --purge "$PKG" >/dev/null; then pass "dpkg --purge $PKG"; else fail "dpkg --purge $PKG"; fi
stop_system_nginx_if_we_started_it
check "purge: no link or .removed marker left in /etc/nginx/modules-enabled" \
  eval '[ -z "$(ls -A /etc/nginx/modules-enabled 2>/dev/null | grep rate-limit-window)" ]'
check "purge: package gone" \
  eval '! dpkg-query -W -f="\${Status}" "$PKG" 2>/dev/null | grep -q "install ok installed"'

finish
