#!/usr/bin/env bash
# scripts/build.sh: `make build`. Leaves exactly target/dist/$MODULE.so and
# target/dist/nginx, the nginx the module was built against (same version
# and flags).
#
# By default that nginx is the vendored one (scripts/nginx.sh), in
# target/nginx: configured first, then compiled while cargo compiles the
# module (the bindings need only the configured tree). With NGINX_BUILD_DIR
# set (a configured nginx tree of your own, its objs/ directory), the module
# is built against that tree, and its nginx is copied if it was made.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CARGO=${CARGO:-cargo}
MODULE=ngx_http_rate_limit_window_module
DIST=target/dist

# Without the `vendored` feature: nginx-src (and its build dependencies)
# is not built, the bindings come from the tree given.
cargo_build() {
    "$CARGO" build --release -p rate_limit_window --no-default-features --features export-modules
}

# make build NGINX=1.30: Debian's nginx of that version (its own dist/).
if [ -n "${NGINX:-}" ]; then
    exec scripts/nginx-debian.sh "$NGINX"
fi

if [ -n "${NGINX_BUILD_DIR:-}" ]; then
    cargo_build
    nginx_bin=$NGINX_BUILD_DIR/nginx
else
    objs=$ROOT/target/nginx
    src=$(scripts/nginx.sh configure "$objs")
    scripts/nginx.sh make "$objs" &
    nginx_make=$!
    trap 'kill $nginx_make 2>/dev/null || true' EXIT
    NGINX_SOURCE_DIR=$src NGINX_BUILD_DIR=$objs cargo_build
    wait $nginx_make
    trap - EXIT
    nginx_bin=$objs/nginx
fi

mkdir -p $DIST
cp target/release/lib$MODULE.so $DIST/.$MODULE.so.new
mv -f $DIST/.$MODULE.so.new $DIST/$MODULE.so
if [ -x "$nginx_bin" ]; then
    cp "$nginx_bin" $DIST/.nginx.new && mv -f $DIST/.nginx.new $DIST/nginx
else
    echo "note: $nginx_bin not built; run make in that nginx tree to get a matching binary"
    rm -f $DIST/nginx
fi
ls -l $DIST
