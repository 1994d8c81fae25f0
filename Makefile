# rate_limit_window — build, run and test the nginx module.
#
#   make run    build, then run nginx-conf/gateway.conf in the foreground
#               (gateway on 127.0.0.1:8080, demo app on 127.0.0.1:8081;
#               make run PORT=9090 [APP_PORT=9091] for others)
#   make test   build, then run every unit and integration test
#
# Other targets: build, bench, soak, fuzz, memcheck, deb, test-deb, clean.

SHELL    := /bin/bash
CARGO    ?= cargo
DIST     := target/dist
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
build: deps
	@CARGO="$(CARGO)" scripts/build.sh

run: build
	@PORT="$(PORT)" APP_PORT="$(APP_PORT)" scripts/run-gateway.sh

# Every test, in one cargo invocation of profile tests (no LTO, see
# Cargo.toml): the core's, then the integration tests (package
# rate_limit_window_it, tests/Cargo.toml), which run the nginx and module
# that make build leaves in $(DIST). The tests compile beside make build
# (they share no unit with it, and cargo locks each profile's directory on
# its own) at nice 15: the module's build is the longer chain (its fat-LTO
# link last), and the tests' compile fills the core it leaves free. From a
# clean clone on 2 cores: 5:13 to 5:44 in all, of which the tests 70-80 s.
# TEST_THREADS tests at once. The integration tests mostly wait (on nginx,
# Redis, timers): on 2 cores one run used 140 s of CPU in 212 s with 2
# threads, and 6 threads took 93 s. Each test has its own ports (see
# free_port in tests/it/common/conf.rs), prefix and servers.
TEST_THREADS ?= 6
test: deps
	@scripts/deps.sh $(TEST_DEPS)
	@set -u; nice -n 15 $(CARGO) test $(TEST_ARGS) --no-run & tests=$$!; \
	$(MAKE) --no-print-directory build; built=$$?; wait $$tests; compiled=$$?; \
	[ $$built -eq 0 ] && [ $$compiled -eq 0 ]
	$(CARGO) test $(TEST_ARGS) -- --test-threads=$(TEST_THREADS)

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

deb:
	@scripts/deb.sh

test-deb: deb
	@scripts/test-deb.sh

clean:
	$(CARGO) clean
