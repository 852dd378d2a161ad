# Thin wrapper over CMake. `make test` is what CI runs; `make demo` shows kvrouter working.
DEPS := cmake pkg-config gcc make libzmq3-dev libmsgpuck-dev libxxhash-dev \
        libmicrohttpd-dev libjansson-dev libcmocka-dev libcurl4-openssl-dev curl \
        groff-base debhelper dpkg-dev clang libclang-rt-14-dev \
        libnats-dev nats-server
BUILD ?= build
JOBS ?= $(shell nproc)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# `make install`: cmake --install of $(BUILD) under $(DESTDIR)$(PREFIX)
PREFIX ?= /usr/local
DESTDIR ?=
VERSION := $(shell sed -n 's/^project.kvrouter VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
DEB_OUT ?= $(BUILD)-deb
DEB_BUILD_OPTIONS ?=

.PHONY: all deps build test asan-test fuzz demo demo-replicas bench install deb clean

all: build

# Installs only what is missing, so a warm machine does not touch apt.
deps:
	@missing=""; for p in $(DEPS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	else echo "deps: all present"; fi

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test: deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
asan-test: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKVR_ASAN=ON >/dev/null
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# The tests that run threads, under ThreadSanitizer: the index's readers and
# writer, the ingest thread with its sources and the registry, the server's
# HTTP threads and housekeeping, the router under concurrent requests and settings swaps,
# discovery's poll thread, replicas over a real nats-server. Races inside
# the uninstrumented libzmq are suppressed (tests/tsan.supp), nothing else.
TSAN_TESTS := test_indexer_concurrency test_tree_model test_source test_registry \
              test_route_select test_route_options test_server_ingest test_source_faults test_http_limits \
              test_auth test_discovery test_cluster_bookings test_cluster_replicas test_descriptors test_memory_trim
TSAN_BUILD ?= build-tsan
empty :=
space := $(empty) $(empty)
tsan-test: deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVR_TSAN=ON >/dev/null
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TESTS)
	cd $(TSAN_BUILD) && TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1 history_size=7" \
	  ctest --output-on-failure -j $(JOBS) -R '^($(subst $(space),|,$(TSAN_TESTS)))$$'

# libFuzzer targets (fuzz/): each runs FUZZ_SECONDS from the seeds in
# fuzz/corpus/<target>/ (what it finds stays in $(FUZZ_BUILD)/corpus); a
# crash or a broken invariant fails the target and leaves the input as
# $(FUZZ_BUILD)/crash-* to replay: $(FUZZ_BUILD)/fuzz/fuzz_<target> FILE.
FUZZ_SECONDS ?= 30
FUZZ_BUILD ?= build-fuzz
FUZZ_TARGETS := wire json_body
fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DKVR_FUZZ=ON -DBUILD_TESTING=OFF \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
	  $(FUZZ_BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -dict=fuzz/$$t.dict \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/ \
	    $(FUZZ_BUILD)/corpus/$$t fuzz/corpus/$$t 2>$(FUZZ_BUILD)/fuzz_$$t.log \
	    || { tail -40 $(FUZZ_BUILD)/fuzz_$$t.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" $(FUZZ_BUILD)/fuzz_$$t.log; \
	done

demo: deps build
	BUILD=$(BUILD) ./scripts/demo.sh

# Two replicas sharing one simulated fleet through NATS (README: Several replicas).
demo-replicas: deps build
	BUILD=$(BUILD) ./scripts/demo_replicas.sh

bench: deps build
	./$(BUILD)/kvrouter bench --trace data/conversation_trace.jsonl --workers 1000

install: build
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"

# Debian packages (kvrouter, libkvrouter0.9, libkvrouter-dev) into $(DEB_OUT)/,
# built from a copy of the tree, since dpkg-buildpackage writes next to the
# source. DEB_BUILD_OPTIONS=nocheck skips the tests (CI has run them).
deb: deps
	rm -rf $(DEB_OUT) && mkdir -p $(DEB_OUT)/kvrouter-$(VERSION)
	tar --exclude-vcs --exclude='./build*' --exclude='./obj-*' --exclude=./tmp -cf - . | \
	  tar -xf - -C $(DEB_OUT)/kvrouter-$(VERSION)
	cd $(DEB_OUT)/kvrouter-$(VERSION) && \
	  DEB_BUILD_OPTIONS="$(DEB_BUILD_OPTIONS) parallel=$(JOBS)" dpkg-buildpackage -us -uc -b
	@ls $(DEB_OUT)/*.deb

clean:
	rm -rf $(BUILD) build-asan $(TSAN_BUILD) $(DEB_OUT) $(FUZZ_BUILD)
