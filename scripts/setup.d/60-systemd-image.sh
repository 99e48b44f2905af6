#!/usr/bin/env bash
# The systemd image the service scenarios (tests/service) boot: Debian with systemd, python3 and
# a wheelhouse of airvisor's dependencies. Needs the Docker engine (10-docker.sh) and .venv.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/start_dockerd.sh
tests/images/build_systemd_image.sh
