# fleet-relay — see README.md. `make run` starts the local demo, `make test` runs every test.
SWIFT ?= swift
SUDO := $(shell [ "$$(id -u)" = "0" ] || command -v sudo >/dev/null && [ "$$(id -u)" != "0" ] && echo sudo)
APT_PACKAGES := librdkafka-dev libssl-dev kcat pkg-config prometheus

.PHONY: deps build test run release bench clean

## Install the C libraries (librdkafka, libssl), kcat and Prometheus's promtool with apt-get when missing.
deps:
	@if pkg-config --exists rdkafka libcrypto 2>/dev/null && command -v kcat >/dev/null && command -v promtool >/dev/null; then \
		echo "deps: librdkafka $$(pkg-config --modversion rdkafka), libcrypto $$(pkg-config --modversion libcrypto), kcat, promtool present"; \
	else \
		echo "deps: installing $(APT_PACKAGES) with apt-get"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(APT_PACKAGES); \
	fi

build: deps
	$(SWIFT) build

## Unit tests and end-to-end tests against librdkafka's mock cluster and the Fleet Engine emulator.
test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

## The demo: mock Kafka cluster, Fleet Engine emulator and a simulated fleet, in one process.
run: build
	$(SWIFT) run --skip-build fleet-relay demo

release: deps
	$(SWIFT) build -c release

## Benchmark a release build: ceilings, backlog drain, steady state, tokens. Prints a table, writes bench/results.json.
bench: release
	.build/release/fleet-relay-bench --relay-binary .build/release/fleet-relay --output bench/results.json $(BENCH_FLAGS)

clean:
	rm -rf .build
