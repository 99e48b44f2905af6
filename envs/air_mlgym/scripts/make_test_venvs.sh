#!/usr/bin/env bash
# Creates the two virtual environments the adapter tests drive episodes in, one per verifiers
# API: verifiers 0.3.1 (MultiTurnEnv, what prime-rl up to v0.8 loads) and verifiers 0.4.0
# (v1 Tasksets, what current prime-rl loads). Each gets docker, pyyaml and this package
# (editable); the 0.4 one also gets uv, which verifiers' v1 chat harness runs its program with.
# Idempotent: an environment whose verifiers version already matches is left alone.
# Usage: envs/air_mlgym/scripts/make_test_venvs.sh
#   AIR_MLGYM_VENV_VF03 (default /opt/airvisor-test/venv-vf03)
#   AIR_MLGYM_VENV_VF04 (default /opt/airvisor-test/venv-vf04)
#   PYTHON (default python3, must be >= 3.11)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
package="$(cd "$here/.." && pwd)"
python="${PYTHON:-python3}"
vf03="${AIR_MLGYM_VENV_VF03:-/opt/airvisor-test/venv-vf03}"
vf04="${AIR_MLGYM_VENV_VF04:-/opt/airvisor-test/venv-vf04}"

log="$(mktemp /tmp/air-mlgym-venvs.XXXXXX.log)"
trap 'rm -f "$log"' EXIT
# pip with its output in a log, shown only when it fails
pip_install() {
  local python="$1"; shift
  if ! "$python" -m pip install --quiet --disable-pip-version-check "$@" >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" >&2
    return 1
  fi
}

make_venv() {
  local dir="$1" version="$2"; shift 2
  if [ -x "$dir/bin/python" ] \
    && "$dir/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('verifiers') != '$version')" 2>/dev/null \
    && [ "$("$dir/bin/python" -c "import air_mlgym, os; print(os.path.dirname(os.path.dirname(os.path.realpath(air_mlgym.__file__))))" 2>/dev/null)" = "$(realpath "$package")" ]; then
    echo "venv $dir already has verifiers $version and this checkout's air_mlgym"
    return 0
  fi
  if [ -x "$dir/bin/python" ] \
    && "$dir/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('verifiers') != '$version')" 2>/dev/null; then
    echo "pointing $dir at this checkout's air_mlgym"
    pip_install "$dir/bin/python" --no-deps -e "$package" "$@"
    "$dir/bin/python" -c "import air_mlgym"
    return 0
  fi
  echo "creating $dir with verifiers $version"
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  "$python" -m venv "$dir"
  pip_install "$dir/bin/python" "verifiers==$version" docker pyyaml "$@" -e "$package"
  "$dir/bin/python" -c "import importlib.metadata as m; assert m.version('verifiers') == '$version'; import air_mlgym"
}

make_venv "$vf03" 0.3.1
make_venv "$vf04" 0.4.0 uv
echo "test venvs ready: $vf03 $vf04"
