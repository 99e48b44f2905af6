"""prime-rl's own `rl` launcher, made runnable here: only the GPU programs it starts are stand-ins.

`real_launcher(root, version)` lays out a folder shaped like prime-rl's virtual environment
(`bin/`), which a profile names as `[prime_rl] venv`:

- `bin/rl` runs prime-rl's own launcher from the test venv that scripts/setup_primerl_venvs.sh
  builds from ../shared/third_party, exactly as prime-rl's console script does
  (`sys.exit(main())`): v0.4 `prime_rl.rl:main` (v0.4 pyproject.toml `[project.scripts]`),
  main `prime_rl.entrypoints.rl:main` (main pyproject.toml `[project.scripts]`).
- `bin/python` is that venv's interpreter (airvisor resolves the config with it).
- the leaves where each launcher looks for them: v0.4 starts `uv run inference|orchestrator|env
  ... torchrun ...` (rl.py:613,686-692,721-746), so `bin/uv`; main starts `inference`,
  `env-server`, `orchestrator` and `torchrun` by bare name from PATH (entrypoints/rl.py), which
  airvisor puts `<venv>/bin` first on (primerl/_adapters.py base_environment), so those; all of
  them are airvisor's demo stand-ins of that version (`python -m airvisor.demo --prime-rl V`).
- main only, on the launcher's PYTHONPATH ahead of prime-rl's sources (`stubs/`):
  `prime_rl/trainer/model.py`: main's `rl` imports `pre_download_model` from it just before it
  starts the processes (entrypoints/rl.py:653-656), a module that imports torch and the model
  hub. The stub keeps the function's local-path branch (trainer/model.py:77-79) and downloads
  nothing. prime_rl is a namespace package in main (no `__init__.py`), so the stub's portion is
  found first for that one module and prime-rl's own for every other.
  `torch` and `wandb`: the launcher imports `get_free_port` from `prime_rl.utils.utils`
  (entrypoints/rl.py:318), which imports both at module level (utils/utils.py:12-14); the
  launcher never calls them. The inert two-module stub the v0.4 test venv already carries
  (scripts/setup_primerl_venvs.sh, `airvisor-stubs`) is copied in.

docs/primerl-fidelity.md lists these stand-ins and stubs and why each is safe.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

VENVS = {
    "0.4": Path(os.environ.get("AIRVISOR_PRIMERL_V04_VENV", "/opt/airvisor-test/primerl-v0.4")),
    "main": Path(os.environ.get("AIRVISOR_PRIMERL_MAIN_VENV", "/opt/airvisor-test/primerl-main")),
}
# The console script `rl` of each version: module and function.
ENTRY_POINTS = {"0.4": ("prime_rl.rl", "main"), "main": ("prime_rl.entrypoints.rl", "main")}
LEAVES = {"0.4": ("uv", "inference", "orchestrator", "torchrun", "trainer"),
          "main": ("inference", "orchestrator", "env-server", "torchrun", "trainer")}

MODEL_STUB = '''"""airvisor test stub of prime_rl.trainer.model (see tests/launchers.py): only
what main's `rl` launcher imports from it. Mirrors pre_download_model's local-path branch
(trainer/model.py:77-79); downloads nothing (no model hub here, and the trainer is a stand-in)."""

from pathlib import Path

from prime_rl.utils.logger import get_logger


def pre_download_model(model_name: str, *, skip_weights: bool = False) -> None:
    if Path(model_name).exists():
        get_logger().info(f"Model {model_name} found at local path, skipping download")
        return
    get_logger().info(f"Pre-downloading model {model_name} (airvisor test stub: no download)")
'''


def launcher_python(version: str) -> Path:
    return VENVS[version] / "bin" / "python"


def missing_launcher(version: str) -> str | None:
    """Why prime-rl's launcher of that version cannot run here (None when it can)."""
    for needed in {version, "0.4"}:  # main's launcher borrows the v0.4 venv's torch stub
        if not launcher_python(needed).exists():
            return (f"no prime-rl {needed} test venv at {VENVS[needed]}: "
                    "scripts/setup_primerl_venvs.sh builds it")
    return None


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def real_launcher(root: Path, version: str) -> Path:
    """The venv-shaped folder (see the module's docstring); returns it."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    python = launcher_python(version)
    module, function = ENTRY_POINTS[version]
    pythonpath = ""
    if version == "main":
        stub = root / "stubs" / "prime_rl" / "trainer" / "model.py"
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text(MODEL_STUB)
        shutil.copytree(VENVS["0.4"] / "airvisor-stubs", root / "stubs", dirs_exist_ok=True)
        pythonpath = f'PYTHONPATH="{root / "stubs"}${{PYTHONPATH:+:$PYTHONPATH}}" '
    _script(bin_dir / "rl", (
        "#!/bin/sh\n"
        "# prime-rl's console script `rl` (tests/launchers.py)\n"
        f"{pythonpath}exec \"{python}\" -c 'import sys; from {module} import {function}; "
        f"sys.argv[0] = \"rl\"; sys.exit({function}())' \"$@\"\n"))
    _script(bin_dir / "python", f'#!/bin/sh\nexec "{python}" "$@"\n')
    standin = f'"{sys.executable}" -m airvisor.demo --prime-rl {version}'
    for leaf in LEAVES[version]:
        if leaf == "uv":
            # `uv run <program> ...`: the program from prime-rl's environment (a stand-in here).
            body = f'[ "$1" = run ] && shift\nexec {standin} "$@"\n'
        else:
            body = f'exec {standin} {leaf} "$@"\n'
        _script(bin_dir / leaf, "#!/bin/sh\n"
                f"# stand-in of prime-rl's `{leaf}` (tests/launchers.py)\n{body}")
    return root
