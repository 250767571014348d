#!/usr/bin/env bash
# Builds the release binary the image ships: statically linked Swift runtime, so the runtime
# image needs only librdkafka and libssl. The Dockerfile's build stage runs exactly this, and
# `make lint-deploy` runs it too, on this machine, before starting the result.
#
# Before stripping, the symbol table shows what was linked: the build fails if any test double
# (the emulator and its stand-ins, the simulator, librdkafka's mock cluster, the throwaway CA)
# reached the production binary. They belong to fleet-relay-dev.
# Usage: deploy/build-release.sh OUTPUT_PATH
set -euo pipefail
output=${1:?usage: deploy/build-release.sh OUTPUT_PATH}
scratch=${FLEET_RELAY_BUILD_PATH:-.build/static}
swift build -c release --static-swift-stdlib --product fleet-relay --scratch-path "$scratch"
mkdir -p "$(dirname "$output")"
cp "$(swift build -c release --static-swift-stdlib --product fleet-relay --scratch-path "$scratch" --show-bin-path)/fleet-relay" "$output"

# Module names appear in every mangled Swift symbol of their module; the C ones by name.
forbidden='FleetEngineEmulator|FleetSimulator|KafkaTesting|KafkaMockCluster|rd_kafka_mock_|fr_tls_generate_throwaway'
if found=$(nm "$output" | grep -E "$forbidden" | head -5) && [ -n "$found" ]; then
    echo "build-release: $output links test doubles; they belong to fleet-relay-dev:" >&2
    echo "$found" >&2
    exit 1
fi
unstripped=$(stat -c %s "$output")
strip "$output"
echo "build-release: $output has no test doubles; $((unstripped / 1048576)) MiB unstripped, $(($(stat -c %s "$output") / 1048576)) MiB stripped"
