#!/usr/bin/env bash
# Creates the two Python 3.12 virtual environments in which airvisor's tests run prime-rl's OWN
# config code (parsers, RLConfig validators, launcher dumps) on the configs airvisor ships and
# produces. Nothing of prime-rl is copied into airvisor: the sources come from the read-only
# third-party folder (see ../shared/third_party/README.md) and are made importable with .pth files.
#
#   primerl-v0.4 (tag v0.4.0): the pins of prime-rl-v0.4.0/uv.lock for what its config classes
#     import, and prime-rl-v0.4.0/src on the path. `prime_rl.rl` (the `rl` launcher module, where
#     v0.4's RLConfig lives) imports prime_rl.utils.utils, which imports torch, torch.distributed
#     and wandb at module level (utils/utils.py:11-13, trainer/runs.py:7-9); parsing never calls
#     them, and CPU torch for Python 3.12 is not installable here. So this venv gets a STUB of
#     those two modules, in its own folder <venv>/airvisor-stubs (on the path through
#     zz-airvisor-stubs.pth, i.e. AFTER site-packages: a real torch, if ever installed, wins).
#     Every attribute of the stub is one inert placeholder; no config class uses a torch type.
#     Documented in docs/primerl-fidelity.md.
#   primerl-main (main at 559b447): pydantic, prime-pydantic-config, renderers (--no-deps) and
#     packages/prime-rl-configs (--no-deps, built from a temporary copy so that nothing is written
#     into the third-party folder), verifiers-a60a606 on the path, and the packages verifiers
#     imports when prime_rl.configs is imported, at prime-rl-main/uv.lock's versions. Also
#     prime-rl-main/src on the path (prime_rl is a namespace package in main: no __init__.py in
#     either part), with psutil, setproctitle, loguru and jinja2 (its Slurm templates), so that the `rl` launcher module
#     itself (src/prime_rl/entrypoints/rl.py: write_subconfigs, env_servers) is importable and
#     the resolver calls prime-rl's own dump code instead of a copy of it. main's parser imports
#     each environment source's taskset package (verifiers.v1 resolve_env_field), so this
#     checkout's envs/air_mlgym is put on the path too (with its dependencies docker and pyyaml),
#     as a user installs it into prime-rl's environment (envs/air_mlgym/README.md).
#
# Idempotent: a venv whose stamp matches this script and the third-party sources, and whose
# import check passes, is left alone.
# Usage: scripts/setup_primerl_venvs.sh
#   AIRVISOR_PRIMERL_V04_VENV  (default /opt/airvisor-test/primerl-v0.4)
#   AIRVISOR_PRIMERL_MAIN_VENV (default /opt/airvisor-test/primerl-main)
#   AIRVISOR_THIRD_PARTY       (default <repo root>/../shared/third_party)
#   PYTHON312                  (default: python3.12 on PATH if it runs, else pyenv's newest 3.12)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
v04="${AIRVISOR_PRIMERL_V04_VENV:-/opt/airvisor-test/primerl-v0.4}"
main="${AIRVISOR_PRIMERL_MAIN_VENV:-/opt/airvisor-test/primerl-main}"
third_party="${AIRVISOR_THIRD_PARTY:-$repo/../shared/third_party}"

die() { echo "setup_primerl_venvs: $*" >&2; exit 1; }

[ -d "$third_party" ] || die "no third-party folder at $third_party (set AIRVISOR_THIRD_PARTY)"
third_party="$(cd "$third_party" && pwd)"
src_v04="$third_party/prime-rl-v0.4.0/src"
src_main="$third_party/prime-rl-main"
src_verifiers="$third_party/verifiers-a60a606"
for path in "$src_v04/prime_rl/rl.py" "$src_main/packages/prime-rl-configs/pyproject.toml" \
  "$src_verifiers/verifiers/__init__.py"; do
  [ -f "$path" ] || die "missing $path: is $third_party a complete copy of shared/third_party?"
done

# Python 3.12: prime-rl main requires ~=3.12.0 (packages/prime-rl-configs/pyproject.toml);
# v0.4.0 also declares ~=3.12.0. A pyenv shim named python3.12 may exist and still fail
# ("pyenv: python3.12: command not found"), so every candidate is run, not just looked up.
is_py312() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
find_python312() {
  local candidate
  if [ -n "${PYTHON312:-}" ]; then
    is_py312 "$PYTHON312" && { echo "$PYTHON312"; return 0; }
    die "PYTHON312=$PYTHON312 is not a working Python 3.12"
  fi
  candidate="$(command -v python3.12 || true)"
  if is_py312 "$candidate"; then echo "$candidate"; return 0; fi
  for candidate in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 \
    /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | sort -rV); do
    if is_py312 "$candidate"; then echo "$candidate"; return 0; fi
  done
  die "no Python 3.12 found (PATH, then pyenv under ${PYENV_ROOT:-$HOME/.pyenv}); set PYTHON312"
}
python312="$(find_python312)"

log="$(mktemp /tmp/airvisor-primerl-venvs.XXXXXX.log)"
work="$(mktemp -d /tmp/airvisor-primerl-build.XXXXXX)"
trap 'rm -rf "$log" "$work"' EXIT
# pip with its output in a log, shown only when it fails
pip_install() {
  local python="$1"; shift
  if ! "$python" -m pip install --quiet --disable-pip-version-check "$@" >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" >&2
    return 1
  fi
}
site_packages() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

# The stamp names everything a venv is made from: this script, the interpreter and the
# third-party sources it points at (their version files), so a changed input rebuilds it.
stamp_of() {
  local flavour="$1"
  {
    echo "flavour=$flavour python=$("$python312" -c 'import sys; print(sys.version.split()[0])')"
    echo "third_party=$third_party repo=$repo"
    sha256sum "$here/setup_primerl_venvs.sh" "$src_v04/../uv.lock" "$src_v04/../pyproject.toml" \
      "$src_main/uv.lock" "$src_main/packages/prime-rl-configs/pyproject.toml" \
      "$src_verifiers/pyproject.toml" | cut -d' ' -f1
  } | sha256sum | cut -d' ' -f1
}

# $1 venv, $2 flavour, $3 import check (python code)
up_to_date() {
  local dir="$1" flavour="$2" check="$3"
  [ -x "$dir/bin/python" ] && [ -f "$dir/.airvisor-primerl-stamp" ] \
    && [ "$(cat "$dir/.airvisor-primerl-stamp")" = "$(stamp_of "$flavour")" ] \
    && (cd "$work" && "$dir/bin/python" -c "$check") >/dev/null 2>&1
}

check_v04='from prime_rl.rl import RLConfig; from prime_rl.trainer.rl.config import RLTrainerConfig; from prime_rl.orchestrator.config import OrchestratorConfig; from prime_rl.inference.config import InferenceConfig'
check_main='from prime_rl.configs.rl import RLConfig; from prime_rl.configs.trainer import TrainerConfig; from prime_rl.configs.orchestrator import OrchestratorConfig; from prime_rl.configs.inference import InferenceConfig; from prime_rl.entrypoints.rl import write_subconfigs, env_servers, write_slurm_script; import jinja2, air_mlgym'

write_torch_wandb_stub() {
  # A placeholder for torch / wandb, see the header. One file per module that v0.4's config
  # import chain imports (torch, torch.distributed, torch.distributed.distributed_c10d, wandb):
  # any attribute is the same inert class, which is callable (torch.device("cpu") as a default
  # argument, trainer/runs.py), subscriptable and subclassable.
  local stubs="$1/airvisor-stubs"
  rm -rf "$stubs"
  mkdir -p "$stubs/torch/distributed" "$stubs/wandb"
  cat >"$stubs/_airvisor_placeholder.py" <<'EOF'
"""airvisor test stub (scripts/setup_primerl_venvs.sh): prime-rl v0.4's config import chain
imports torch and wandb at module level, but parsing a config never uses them."""


class _Inert(type):
    def __getattr__(cls, name: str) -> "type":
        if name.startswith("__"):
            raise AttributeError(name)
        return cls

    def __call__(cls, *args: object, **kwargs: object) -> "type":
        return cls

    def __getitem__(cls, key: object) -> "type":
        return cls

    def __or__(cls, other: object) -> "type":
        return cls

    __ror__ = __or__


class Placeholder(metaclass=_Inert):
    """Stands for any torch / wandb object."""


def module_getattr(name: str) -> type:
    if name.startswith("__"):
        raise AttributeError(name)
    return Placeholder
EOF
  local module
  for module in torch/__init__.py torch/distributed/__init__.py \
    torch/distributed/distributed_c10d.py wandb/__init__.py; do
    printf '%s\n' '"""airvisor test stub, see _airvisor_placeholder.py."""' \
      'from _airvisor_placeholder import module_getattr as __getattr__  # noqa: F401' \
      'AIRVISOR_STUB = True' >"$stubs/$module"
  done
  echo "$stubs" >"$(site_packages "$1")/zz-airvisor-stubs.pth"
}

make_v04() {
  if up_to_date "$v04" v04 "$check_v04"; then
    echo "venv $v04 is up to date (prime-rl v0.4.0)"
    return 0
  fi
  echo "creating $v04 (prime-rl v0.4.0 config classes, Python 3.12)"
  rm -rf "$v04"
  mkdir -p "$(dirname "$v04")"
  "$python312" -m venv "$v04"
  # prime-rl-v0.4.0/uv.lock versions of what the config modules, rl.py and the modules they
  # import at module level need (found by importing prime_rl.rl and each entry point's config).
  pip_install "$v04/bin/python" pydantic==2.12.5 pydantic-core==2.41.5 pydantic-settings==2.10.1 \
    typing-extensions==4.15.0 annotated-types==0.7.0 typing-inspection==0.4.2 \
    python-dotenv==1.1.1 tomli==2.2.1 tomli-w==1.2.0 msgspec==0.19.0 pyzmq==27.1.0 loguru==0.7.3
  echo "$src_v04" >"$(site_packages "$v04")/airvisor-prime-rl-v0.4.0.pth"
  write_torch_wandb_stub "$v04"
  (cd "$work" && "$v04/bin/python" -c "$check_v04") || die "prime-rl v0.4.0 is not importable in $v04"
  stamp_of v04 >"$v04/.airvisor-primerl-stamp"
  echo "venv $v04 ready"
}

make_main() {
  if up_to_date "$main" main "$check_main"; then
    echo "venv $main is up to date (prime-rl main)"
    return 0
  fi
  echo "creating $main (prime-rl main config classes, Python 3.12)"
  rm -rf "$main"
  mkdir -p "$(dirname "$main")"
  "$python312" -m venv "$main"
  # ../shared/third_party/README.md, with the versions of prime-rl-main/uv.lock for verifiers'
  # import-time dependencies.
  pip_install "$main/bin/python" pydantic==2.13.4 "prime-pydantic-config[toml]==0.4.3" \
    tomli==2.4.1 tomli-w==1.2.0 httpx==0.28.1 openai==2.38.0 anthropic==0.104.1 numpy==2.3.5 \
    aiohttp==3.13.5 math-verify==0.9.0 mcp==1.27.1 prime-sandboxes==0.2.39 tenacity==9.1.4 \
    psutil==7.2.2 setproctitle==1.3.7 loguru==0.7.3 docker pyyaml jinja2==3.1.6 markupsafe==3.0.3
  pip_install "$main/bin/python" --no-deps renderers==0.1.12
  # Built from a copy: pip/hatchling must not write build files into the read-only source.
  cp -r "$src_main/packages/prime-rl-configs" "$work/prime-rl-configs"
  pip_install "$main/bin/python" --no-deps "$work/prime-rl-configs"
  printf '%s\n' "$src_verifiers" "$src_main/src" "$repo/envs/air_mlgym" \
    >"$(site_packages "$main")/airvisor-prime-rl-main.pth"
  (cd "$work" && "$main/bin/python" -c "$check_main") || die "prime-rl main is not importable in $main"
  stamp_of main >"$main/.airvisor-primerl-stamp"
  echo "venv $main ready"
}

make_v04
make_main
echo "prime-rl venvs ready: $v04 $main (python $python312)"
