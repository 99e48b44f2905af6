#!/usr/bin/env bash
# The verifiers 0.3 / 0.4 venvs the air_mlgym adapter tests drive episodes in.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec envs/air_mlgym/scripts/make_test_venvs.sh
