#!/usr/bin/env bash
# Installs everything the test suite needs and runs it: system packages (Docker engine,
# debootstrap, systemd-analyze), the Python environment, the local test image, the optional
# test environments (scripts/setup.d), then lint, types and pytest.
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

step "test environments (scripts/setup.d, in order)"
# Each script installs one environment some tests need. In CI (CI=true) a set-up that fails
# fails the run: a test that cannot run proves nothing. Elsewhere it is reported, and the
# tests that need it skip.
failed=()
for setup in scripts/setup.d/*.sh; do
  printf -- '-- %s (%s)\n' "$setup" "$(date -u +%H:%M:%S)"
  if ! "$setup"; then
    failed+=("$setup")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "set-up failed: ${failed[*]}" >&2
  if [ "${CI:-}" = "true" ]; then
    exit 1
  fi
  echo "(not CI: the tests that need these environments will skip)" >&2
fi

step "lint and types"
.venv/bin/ruff check airvisor tests bench envs
.venv/bin/mypy
.venv/bin/mypy --config-file envs/air_mlgym/pyproject.toml envs/air_mlgym/air_mlgym

step "tests"
.venv/bin/python -m pytest -ra --durations=30 "$@"
