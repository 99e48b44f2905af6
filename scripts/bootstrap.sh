#!/usr/bin/env bash
# Creates .venv and installs airvisor into it (with the test tools when asked).
# Usage: scripts/bootstrap.sh [--test]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
if [ "${1:-}" = "--test" ]; then
  .venv/bin/python -m pip install --quiet -e '.[test]'
else
  .venv/bin/python -m pip install --quiet -e .
fi
