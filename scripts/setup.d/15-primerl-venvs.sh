#!/usr/bin/env bash
# Python 3.12 venvs with prime-rl v0.4.0's and main's own config code (from ../shared/third_party),
# in which tests/primerl checks every config airvisor ships or produces with prime-rl's parsers.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec scripts/setup_primerl_venvs.sh
