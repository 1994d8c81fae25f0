# rate_limit_window — build, run and test the nginx module.
#
#   make run    build, then run nginx-conf/gateway.conf in the foreground
#               (gateway on 127.0.0.1:8080, demo app on 127.0.0.1:8081;
#               make run PORT=9090 [APP_PORT=9091] for others)
#   make test   build, then run every unit and integration test
#               (make test NGINX=1.30 or 1.26: against nginx 1.30 or 1.26
#               built from Debian's source, scripts/nginx-debian.sh;
#               make test ENGINE=valkey: the fleet tests against Valkey)
#
# Other targets: build, bench, soak, fuzz, memcheck, deb, test-deb, clean.

SHELL    := /bin/bash
CARGO    ?= cargo
DIST_DIR := target/dist
MODULE   := ngx_http_rate_limit_window_module
RUN_DIR  := target/run

BUILD_DEPS := libclang-dev libpcre2-dev libssl-dev zlib1g-dev make gcc pkg-config
TEST_DEPS  := faketime curl redis-server redis-sentinel redis-tools openssl wrk python3-grpcio prometheus
BENCH_DEPS := wrk valgrind python3 curl
TEST_ARGS  := --profile tests -p rate_limit_window_core -p rate_limit_window_it

.PHONY: all deps build run test soak bench fuzz memcheck deb test-deb clean

all: build

deps:
	@scripts/deps.sh $(BUILD_DEPS)

# Release build. Leaves exactly target/dist/$(MODULE).so and target/dist/nginx,
# the nginx binary the module was built against (same version and flags):
# the vendored nginx (scripts/nginx.sh, in target/nginx), compiled while
# cargo compiles the module. With NGINX_BUILD_DIR set, builds against that
# configured tree instead (scripts/build.sh).
#
# NGINX=1.30 (sid) or 1.26 (trixie): against that nginx instead, built from
# the upstream tarball of Debian's source package with the vendored flags,
# or Debian's binary where the archive does not serve the tarball
# (scripts/nginx-debian.sh), in target/nginx-$(NGINX)/dist; the tests then
# run that nginx and module.
NGINX ?=
build: deps
	@CARGO="$(CARGO)" NGINX="$(NGINX)" scripts/build.sh

run: build
	@PORT="$(PORT)" APP_PORT="$(APP_PORT)" scripts/run-gateway.sh

# Every test, in one cargo invocation of profile tests (no LTO, see
# Cargo.toml): the core's, then the integration tests (package
# rate_limit_window_it, tests/Cargo.toml), which run the nginx and module
# that make build leaves in $(DIST_DIR). The tests compile beside make build
# (they share no unit with it, and cargo locks each profile's directory on
# its own) at nice 15: the module's build is the longer chain (its fat-LTO
# link last), and the tests' compile fills the core it leaves free. From a
# clean clone on 2 cores: 5:13 to 5:44 in all, of which the tests 70-80 s.
# TEST_THREADS tests at once. The integration tests mostly wait (on nginx,
# Redis, timers): on 2 cores one run used 140 s of CPU in 212 s with 2
# threads, and 6 threads took 93 s. Each test has its own ports (see
# free_port in tests/it/common/conf.rs), prefix and servers.
#
# Then, for the vendored nginx only, that nginx built without stream
# (scripts/nginx-nostream.sh, once: 50 s here on 2 loaded cores, 29 s of
# CPU), where tests/it/stream_loading.rs loads the module for http.
#
# ENGINE=valkey: the fleet tests (every test whose name has redis, fleet or
# cluster, and those of tests/it/{overrides,ranges,charge}) against Valkey
# from bookworm-backports (scripts/valkey.sh) instead of Redis; the
# servers' programs are chosen in tests/it/common/redis_servers.rs.
TEST_THREADS ?= 6
ENGINE ?= redis
FLEET_TESTS := redis fleet cluster overrides:: ranges:: charge::
ifeq ($(ENGINE),valkey)
TEST_RUN := $(CARGO) test --profile tests -p rate_limit_window_it -- $(FLEET_TESTS)
ENGINE_ENV := export RLW_REDIS_ENGINE=valkey RLW_VALKEY_BIN=$$(scripts/valkey.sh);
SERVER := $$RLW_VALKEY_BIN/valkey-server
else ifeq ($(ENGINE),redis)
TEST_RUN := $(CARGO) test $(TEST_ARGS) --
SERVER := redis-server
else
$(error ENGINE=$(ENGINE): the engines are redis and valkey)
endif
ifneq ($(NGINX),)
NGINX_ENV := export RLW_NGINX=$(CURDIR)/target/nginx-$(NGINX)/dist/nginx \
	RLW_MODULE=$(CURDIR)/target/nginx-$(NGINX)/dist/$(MODULE).so;
endif
test: deps
	@scripts/deps.sh $(TEST_DEPS)
	@set -u; nice -n 15 $(CARGO) test $(TEST_ARGS) --no-run & tests=$$!; \
	$(MAKE) --no-print-directory build; built=$$?; wait $$tests; compiled=$$?; \
	[ $$built -eq 0 ] && [ $$compiled -eq 0 ]
	@$(if $(NGINX),true,scripts/nginx-nostream.sh >/dev/null)
	@# make exports NGINX=1.30 to its commands, and nginx reads NGINX (the
	@# sockets a binary upgrade inherits): the tests' nginx must not see it.
	@set -e; unset NGINX; $(ENGINE_ENV) $(NGINX_ENV) \
	echo "engine $(ENGINE): $$($(SERVER) --version)"; \
	"$${RLW_NGINX:-target/dist/nginx}" -V 2>&1 | sed 's/^/nginx -V: /'; \
	echo '$(TEST_RUN) --test-threads=$(TEST_THREADS)'; \
	$(TEST_RUN) --test-threads=$(TEST_THREADS)

soak: build
	@scripts/deps.sh $(TEST_DEPS)
	RLW_SOAK=1 $(CARGO) test $(TEST_ARGS) -- --include-ignored --test-threads=1

bench: build
	@scripts/deps.sh $(BENCH_DEPS)
	@scripts/bench.sh

fuzz:
	@scripts/fuzz.sh

# The core's tests under valgrind memcheck (Miri needs a nightly toolchain).
memcheck:
	@scripts/deps.sh valgrind
	@scripts/memcheck.sh

# DIST=bookworm (default) or trixie: the release whose nginx the package
# is built for (scripts/deb.sh) and tested with (scripts/test-deb.sh: on
# this machine for bookworm, in a debootstrap root for trixie).
DIST ?= bookworm
deb:
	@DIST=$(DIST) scripts/deb.sh

test-deb: deb
	@DIST=$(DIST) scripts/test-deb.sh

clean:
	$(CARGO) clean
