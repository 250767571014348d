#!/usr/bin/env bash
# Builds the release binary the image ships: statically linked Swift runtime, so the runtime
# image needs only librdkafka and libssl. The Dockerfile's build stage runs exactly this, and
# `make lint-deploy` runs it too, on this machine, before starting the result.
# Usage: deploy/build-release.sh OUTPUT_PATH
set -euo pipefail
output=${1:?usage: deploy/build-release.sh OUTPUT_PATH}
scratch=${FLEET_RELAY_BUILD_PATH:-.build/static}
swift build -c release --static-swift-stdlib --product fleet-relay --scratch-path "$scratch"
mkdir -p "$(dirname "$output")"
cp "$(swift build -c release --static-swift-stdlib --product fleet-relay --scratch-path "$scratch" --show-bin-path)/fleet-relay" "$output"
