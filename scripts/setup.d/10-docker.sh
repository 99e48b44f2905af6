#!/usr/bin/env bash
# A running Docker engine and the locally built test image (containers, envs tests).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/start_dockerd.sh
tests/images/build_test_image.sh
