#!/usr/bin/env bash
# Debian's Chromium for the run page's browser tests (tests/web) and bench/page_load.py. They
# drive it with Playwright's Python package (a test dependency in pyproject.toml) through
# executable_path=/usr/bin/chromium: no browser is downloaded. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "chromium is missing and installing it needs root (apt-get install chromium)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# A start that renders a page proves the binary works here (flags as in tests/web: root, no
# sandbox, no GPU, no background requests into the closed network).
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --disable-dev-shm-usage --user-data-dir="$profile" \
  --dump-dom 'data:text/html,<p id=ok>chromium works</p>' 2>/dev/null | grep -q 'chromium works'
.venv/bin/python -c "import playwright.sync_api" 2>/dev/null || .venv/bin/pip install -q playwright
echo "chromium: $(chromium --version 2>/dev/null)"
