#!/usr/bin/env bash
# Installs airvisor and runs the embedded demo: the real supervisor over simulated prime-rl
# components (no GPU needed). Takes about a minute; exits 0 when the run succeeds.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/airvisor start demo "$@"
