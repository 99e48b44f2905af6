"""`python -m airvisor.demo [--prime-rl {0.4,main}] <command> ...`: the front door."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from airvisor.demo._config import SETTINGS_MODELS, DemoConfigError, StandinName, known_leaf_keys
from airvisor.demo._layout import DEFAULT_VERSION, DemoVersion

PROG = "python -m airvisor.demo"
SUBCOMMANDS = ("rl", "inference", "torchrun", "trainer", "orchestrator", "env-server", "resolve")
VERSIONS: tuple[DemoVersion, ...] = ("0.4", "main")

USAGE = f"""\
usage: {PROG} [--prime-rl {{0.4,main}}] {{rl,inference,torchrun,trainer,orchestrator}} [@ FILE ...]
       [--key value ...]

airvisor's stand-ins for prime-rl (the demo: the real supervisor over simulated components).
They take prime-rl's command lines: `@ FILE.toml` (repeatable, deep-merged) and dotted
kebab-case overrides such as `--ckpt.interval 5`. `--prime-rl` picks the version whose launcher,
layout, step numbering and log lines they mirror (default: {DEFAULT_VERSION} for the
components, required for rl); every command accepts it and rl passes it on to its children.

  rl            the launcher: starts inference, orchestrator and trainer (under torchrun) as
                that version's `rl` does, with its clean-ups, config files, env and log files
  inference     OpenAI-compatible HTTP server: /health, /v1/models, /v1/chat/completions, /metrics
  torchrun      torchrun [torchrun options] <script | -m module | --no-python cmd> WORKER_ARGS
  trainer       the RL trainer (normally under torchrun)
  orchestrator  the orchestrator (needs the inference server)
  env-server    main's environment server for one source (binds its serve.address)

Demo pacing and faults: env AIRVISOR_DEMO='{{"trainer": {{"crash_at_step": 3}}, ...}}'.
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


def _runner(name: str) -> Callable[[Sequence[str], DemoVersion], int]:
    # lazy: each stand-in loads only what it needs, so it starts fast.
    if name == "rl":
        from airvisor.demo._rl import main as rl_main

        return rl_main
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
    if name == "env-server":
        from airvisor.demo._env_server import main as env_server_main

        return env_server_main
    if name == "resolve":
        from airvisor.demo._resolve import main as resolve_main

        return resolve_main
    from airvisor.demo._inference import ENGINE_CORE_SUBCOMMAND, engine_core_main

    assert name == ENGINE_CORE_SUBCOMMAND
    return lambda argv, version: engine_core_main(argv)


def split_global_options(args: list[str]) -> tuple[DemoVersion | None, list[str]]:
    """`--prime-rl V` / `--prime-rl=V` before the command; the rest unchanged."""
    version: str | None = None
    while args and args[0].startswith("--prime-rl"):
        head = args.pop(0)
        if head == "--prime-rl":
            if not args:
                raise DemoConfigError("--prime-rl needs a version: 0.4 or main")
            version = args.pop(0)
        elif head.startswith("--prime-rl="):
            version = head.split("=", 1)[1]
        else:
            raise DemoConfigError(f"unknown option {head}")
        if version not in VERSIONS:
            raise DemoConfigError(f"--prime-rl: unknown version {version!r}; use 0.4 or main")
    return version, args  # type: ignore[return-value]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one stand-in; returns its exit status (2 for a bad command line or config)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        version, args = split_global_options(args)
    except DemoConfigError as problem:
        sys.stderr.write(f"{PROG}: error: {problem}\n")
        return 2
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name == "env":
        # `uv run env VAR=VALUE ... torchrun ...` (v0.4 rl.py:725-731): as coreutils' env, set the
        # assignments, then run the rest as the stand-in command it names.
        while rest and "=" in rest[0] and not rest[0].startswith("-"):
            key, _, value = rest.pop(0).partition("=")
            os.environ[key] = value
        if not rest:
            sys.stderr.write(f"{PROG} env: error: no command after the assignments\n")
            return 2
        name, rest = rest[0], rest[1:]
    if name not in (*SUBCOMMANDS, "engine-core"):
        sys.stderr.write(
            f"{PROG}: error: unknown component {name!r}; choose one of {', '.join(SUBCOMMANDS)}\n"
        )
        return 2
    if name in ("inference", "trainer", "orchestrator") and rest in (["-h"], ["--help"]):
        sys.stdout.write(_component_help(name))  # type: ignore[arg-type]
        return 0
    if name == "rl" and version is None:
        sys.stderr.write(f"{PROG} rl: error: name the prime-rl version: --prime-rl 0.4|main\n")
        return 2
    try:
        return _runner(name)(rest, version or DEFAULT_VERSION)
    except DemoConfigError as problem:
        sys.stderr.write(f"{PROG} {name}: error: {problem}\n")
        return 2
