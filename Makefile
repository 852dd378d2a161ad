# Thin wrapper over CMake. `make test` is what CI runs; `make demo` shows kvrouter working.
DEPS := cmake pkg-config gcc make libzmq3-dev libmsgpuck-dev libxxhash-dev \
        libmicrohttpd-dev libjansson-dev libcmocka-dev libcurl4-openssl-dev curl
BUILD ?= build
JOBS ?= $(shell nproc)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build test asan-test demo bench clean

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

demo: deps build
	BUILD=$(BUILD) ./scripts/demo.sh

bench: deps build
	./$(BUILD)/kvrouter bench --trace data/conversation_trace.jsonl --workers 1000

clean:
	rm -rf $(BUILD) build-asan
