"""`python -m airvisor.demo {inference,torchrun,trainer,orchestrator} ...`: the front door."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from airvisor.demo._config import SETTINGS_MODELS, DemoConfigError, StandinName, known_leaf_keys

PROG = "python -m airvisor.demo"
SUBCOMMANDS = ("inference", "torchrun", "trainer", "orchestrator")

USAGE = f"""\
usage: {PROG} {{inference,torchrun,trainer,orchestrator}} [@ FILE.toml ...] [--key value ...]

airvisor's stand-ins for prime-rl's components (the demo: the real supervisor over simulated
components). They take prime-rl's command lines: `@ FILE.toml` (repeatable, deep-merged) and
dotted kebab-case overrides such as `--ckpt.interval 5` or `--ckpt.resume-step 10`.

  inference     OpenAI-compatible HTTP server: /health, /v1/models, /v1/chat/completions, /metrics
  torchrun      torchrun [torchrun options] <script | -m module | --no-python cmd> WORKER_ARGS
  trainer       the RL trainer (normally under torchrun)
  orchestrator  the orchestrator (needs the inference server)

`{PROG} <component> --help` lists the keys a component reads.
"""


def _component_help(component: StandinName) -> str:
    keys = sorted(
        ".".join(p.replace("_", "-") for p in path)
        for path in known_leaf_keys(SETTINGS_MODELS[component])
    )
    listing = "\n".join(f"  --{key}" for key in keys)
    return (
        f"usage: {PROG} {component} [@ FILE.toml ...] [--key value ...]\n\n"
        f"Keys (in the TOML files or as flags):\n{listing}\n"
    )


def _runner(name: str) -> Callable[[Sequence[str]], int]:
    # Imported lazily: each stand-in loads only what it needs, so it starts fast.
    if name == "inference":
        from airvisor.demo._inference import main as inference_main

        return inference_main
    if name == "torchrun":
        from airvisor.demo._torchrun import main as torchrun_main

        return torchrun_main
    if name == "trainer":
        from airvisor.demo._trainer import main as trainer_main

        return trainer_main
    if name == "orchestrator":
        from airvisor.demo._orchestrator import main as orchestrator_main

        return orchestrator_main
    from airvisor.demo._inference import ENGINE_CORE_SUBCOMMAND, engine_core_main

    assert name == ENGINE_CORE_SUBCOMMAND
    return engine_core_main


def main(argv: Sequence[str] | None = None) -> int:
    """Run one stand-in; returns its exit status (2 for a bad command line or config)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in (*SUBCOMMANDS, "engine-core"):
        sys.stderr.write(
            f"{PROG}: error: unknown component {name!r}; choose one of {', '.join(SUBCOMMANDS)}\n"
        )
        return 2
    if name in ("inference", "trainer", "orchestrator") and rest in (["-h"], ["--help"]):
        sys.stdout.write(_component_help(name))  # type: ignore[arg-type]
        return 0
    try:
        return _runner(name)(rest)
    except DemoConfigError as problem:
        sys.stderr.write(f"{PROG} {name}: error: {problem}\n")
        return 2
