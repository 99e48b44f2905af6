"""Command lines and config files of the stand-ins, read as prime-rl's console scripts read them.

`@ FILE.toml` (repeatable, deep-merged left to right; `@FILE.toml` is accepted too), then dotted
kebab-case flag overrides (`--ckpt.interval 5`, `--ckpt.interval=5`, `--model.name X`, a bare
`--flag` is `true`, `--no-flag` is `false`). Flags apply after all files, in order.

Config files are read leniently: keys the stand-ins do not use are ignored, because the adapter
writes real prime-rl configs and the demo must run whatever prime-rl would accept. A flag, though,
must name a key the stand-in knows or one the config files define, so a typo on the command line is
an error (with the closest valid spelling), as it is in prime-rl. `.json` files (what main's `rl`
writes) are read as JSON.

Demo pacing and faults come from the environment variable AIRVISOR_DEMO (JSON:
`{"inference": {...}, "trainer": {...}, "orchestrator": {...}}`), because prime-rl refuses unknown
keys in its configs; a `[demo]` table in a config file is still read (under the env's keys) for
hand-written component configs. Both are strict: an unknown demo key is an error.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airvisor.profile._configs import deep_merge as deep_merge  # tests import it from here
from airvisor.profile._configs import merge_into
from airvisor.profile._rlargs import flag_value as parse_flag_value  # (the one flag reading)

StandinName = Literal["inference", "trainer", "orchestrator"]
DEMO_ENV = "AIRVISOR_DEMO"


class DemoConfigError(Exception):
    """A bad command line or config file; `str()` is the message to print (no traceback)."""


# ---------------------------------------------------------------------------------------------
# Settings models. Lenient sections ignore unknown keys (real prime-rl keys); [demo] forbids them.


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CkptSettings(_Lenient):
    interval: int | None = Field(default=None, ge=1)  # None: checkpointing off, as in prime-rl
    keep: int | None = Field(default=None, ge=1)  # v0.4 name; None keeps all
    keep_last: int | None = Field(default=None, ge=1)  # main's name for the same thing
    resume_step: int | None = Field(default=None, ge=-1)  # v0.4: -1 = highest step_* directory
    keep_interval: int | None = Field(default=None, ge=1)
    output_dir: Path | None = None  # main: the trainer's checkpoints go here instead
    wait_for_weights_timeout: int | None = Field(default=None, ge=1)

    @property
    def keep_newest(self) -> int | None:
        return self.keep if self.keep is not None else self.keep_last


class ResumeSettings(_Lenient):
    step: int | None = Field(default=None, ge=-1)  # main's `--resume.step N`; None: latest


class StepDemoSettings(_Strict):
    """Fault injections and pacing of the trainer / orchestrator stand-ins."""

    step_time: float = Field(default=1.0, ge=0)  # seconds per step
    startup_delay: float = Field(default=0.0, ge=0)  # before "Starting training loop"
    crash_at_step: int | None = Field(default=None, ge=1)  # die during step N (before its line)
    exit_code: int = Field(default=1, ge=1, le=255)  # status of an injected crash
    hang_at_step: int | None = Field(default=None, ge=1)  # stop during step N, print nothing
    # Write step N's checkpoint half without its completion marker, then crash (exit_code).
    half_checkpoint_at_step: int | None = Field(default=None, ge=1)
    # Trainer, NCCL broadcast: die in the middle of broadcasting policy step N (half the
    # payload sent): the inference worker is left stuck in its receive.
    crash_mid_broadcast_at_step: int | None = Field(default=None, ge=0)
    ignore_sigterm: bool = False  # SIGTERM is ignored (only SIGKILL stops the process)
    # Orchestrator: how long it keeps retrying an unreachable inference server before failing.
    connect_timeout: float = Field(default=10.0, gt=0)


class InferenceDemoSettings(_Strict):
    startup_delay: float = Field(default=0.0, ge=0)  # /health answers 503 until then
    ignore_sigterm: bool = False
    # Start a child titled "VLLM::EngineCore" that, like vLLM's, outlives a SIGKILLed server.
    engine_core_child: bool = False
    # That child detaches (setsid, double fork: re-parented away from the server), replaces its
    # environment with vLLM's own variables (no airvisor marker) and retitles itself: after a
    # supervisor crash only the run's cgroup or the fallback's recorded tree still names it.
    engine_core_detached: bool = False
    # Exit with exit_code this many seconds after becoming healthy (a dying server).
    crash_after: float | None = Field(default=None, gt=0)
    exit_code: int = Field(default=1, ge=1, le=255)
    # Keep serving but answer /health with 503 this many seconds after becoming healthy.
    unhealthy_after: float | None = Field(default=None, gt=0)


class ServerSettings(_Lenient):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)  # 0: any free port (tests)
    # main configs/inference.py:23: how long /liveness waits for the workers' no-op RPC
    liveness_timeout_seconds: float = Field(default=30.0, gt=0)


class ClientSettings(_Lenient):
    # v0.4: one URL; main: a list of URLs (the stand-in talks to the first).
    base_url: str | list[str] = "http://127.0.0.1:8000/v1"

    @property
    def url(self) -> str:
        if isinstance(self.base_url, str):
            return self.base_url
        if not self.base_url:
            raise DemoConfigError("client.base_url: the list of inference URLs is empty")
        return self.base_url[0]


class ModelSettings(_Lenient):
    name: str = "Qwen/Qwen3-0.6B"
    client: ClientSettings | None = None  # main: [orchestrator.model.client] base_url


class SamplingSettings(_Lenient):
    max_tokens: int | None = Field(default=None, ge=1)


class EnvSettings(_Lenient):
    id: str = ""
    args: dict[str, Any] = Field(default_factory=dict)


class SourceSettings(_Lenient):
    """main: one `[[orchestrator.train.source]]` (or eval) entry."""

    name: str | None = None
    env: dict[str, Any] = Field(default_factory=dict)
    serve: dict[str, Any] = Field(default_factory=dict)

    @property
    def resolved_name(self) -> str:
        taskset = self.env.get("taskset")
        taskset_id = taskset.get("id") if isinstance(taskset, dict) else None
        return self.name or str(taskset_id or "env")


class SourcesSettings(_Lenient):
    source: list[SourceSettings] = Field(default_factory=list)


class WeightBroadcastSettings(_Lenient):
    type: str = "filesystem"
    # NCCL (main configs/trainer.py:556-575, the orchestrator's alike; v0.4 the same keys):
    # where the trainer's rank 0 hosts the group, its timeout, the inference ranks.
    host: str = "localhost"
    port: int = Field(default=29501, ge=1, le=65535)
    timeout: int = Field(default=1200, ge=1)
    inference_world_size: int = Field(default=1, ge=1)


class _CommonSettings(_Lenient):
    output_dir: Path = Path("outputs")
    max_steps: int | None = Field(default=None, ge=1)  # None: run until stopped, as prime-rl
    max_async_level: int = Field(default=1, ge=0)
    weight_broadcast: WeightBroadcastSettings = WeightBroadcastSettings()
    ckpt: CkptSettings = CkptSettings()
    resume: ResumeSettings | None = None  # main: present (even empty) means resume
    model: ModelSettings = ModelSettings()


class VllmSettings(_Lenient):
    model: str | None = None


class InferenceSettings(_CommonSettings):
    server: ServerSettings = ServerSettings()
    # main: the server's model is [inference.vllm] model (configs/inference.py:42,57, written
    # by `rl` into configs/inference.json); v0.4: [model] name.
    vllm: VllmSettings = VllmSettings()
    demo: InferenceDemoSettings = InferenceDemoSettings()

    @property
    def served_model(self) -> str:
        return self.vllm.model or self.model.name


class TrainerSettings(_CommonSettings):
    demo: StepDemoSettings = StepDemoSettings()

    @property
    def resume_step(self) -> int | None:
        return _resume_step(self.ckpt, self.resume)


class OrchestratorSettings(_CommonSettings):
    client: ClientSettings = ClientSettings()
    batch_size: int = Field(default=8, ge=1)
    seq_len: int = Field(default=2048, ge=1)
    sampling: SamplingSettings = SamplingSettings()
    env: list[EnvSettings] = Field(default_factory=list)  # v0.4
    train: SourcesSettings = SourcesSettings()  # main
    eval: SourcesSettings | None = None
    env_server_base_port: int = Field(default=5000, ge=1, le=65535)
    demo: StepDemoSettings = StepDemoSettings()

    def env_addresses(self) -> list[tuple[str, str, str]]:
        """main configs/orchestrator.py env_addresses: (split, name, address) per source,
        train then eval, `tcp://127.0.0.1:<base + index>` unless serve.address is set."""
        sources = [("train", s) for s in self.train.source]
        sources += [("eval", s) for s in (self.eval.source if self.eval else [])]
        return [
            (split, source.resolved_name,
             str(source.serve.get("address") or
                 f"tcp://127.0.0.1:{self.env_server_base_port + index}"))
            for index, (split, source) in enumerate(sources)
        ]

    @property
    def resume_step(self) -> int | None:
        return _resume_step(self.ckpt, self.resume)

    @property
    def inference_url(self) -> str:
        client = self.model.client if self.model.client is not None else self.client
        return client.url


def _resume_step(ckpt: CkptSettings, resume: ResumeSettings | None) -> int | None:
    """v0.4's ckpt.resume_step, or main's resume.step; a bare main `[resume]` means latest (-1)."""
    if resume is not None:
        return resume.step if resume.step is not None else -1
    return ckpt.resume_step


SETTINGS_MODELS: dict[StandinName, type[_CommonSettings]] = {
    "inference": InferenceSettings,
    "trainer": TrainerSettings,
    "orchestrator": OrchestratorSettings,
}


# ---------------------------------------------------------------------------------------------
# Parsing


@overload
def parse_args(component: Literal["inference"], argv: Sequence[str]) -> InferenceSettings: ...
@overload
def parse_args(component: Literal["trainer"], argv: Sequence[str]) -> TrainerSettings: ...
@overload
def parse_args(component: Literal["orchestrator"], argv: Sequence[str]) -> OrchestratorSettings: ...
@overload
def parse_args(component: StandinName, argv: Sequence[str]) -> _CommonSettings: ...


def parse_args(component: StandinName, argv: Sequence[str]) -> _CommonSettings:
    """Files and flags of one stand-in's command line, validated into its settings model."""
    files, flags = split_argv(argv)
    merged: dict[str, Any] = {}
    for file in files:
        merge_into(merged, load_toml(file))
    model = SETTINGS_MODELS[component]
    known = known_leaf_keys(model)
    for key, raw in flags:
        path, value = resolve_flag(key, raw, known=known, file_config=merged, component=component)
        merge_into(merged, _nest(path, value))  # in place: linear in the flags
    env_demo = demo_from_env(component)
    if env_demo:
        merge_into(merged, {"demo": env_demo})
    merged = drop_none(merged)  # prime-rl's dumps spell "unset" as null; the defaults apply
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        raise DemoConfigError(_validation_message(component, files, exc)) from None


def drop_none(config: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: drop_none(value) if isinstance(value, Mapping) else value
        for key, value in config.items()
        if value is not None
    }


def split_argv(argv: Sequence[str]) -> tuple[list[Path], list[tuple[str, str | None]]]:
    """`@` files and `--key [value]` flags, in order; anything else is an error."""
    files: list[Path] = []
    flags: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "@":
            if i + 1 >= len(argv):
                raise DemoConfigError("`@` must be followed by a TOML file: `@ config.toml`")
            files.append(Path(argv[i + 1]))
            i += 2
        elif token.startswith("@"):
            files.append(Path(token[1:]))
            i += 1
        elif token.startswith("--") and len(token) > 2:
            body = token[2:]
            if "=" in body:
                key, value = body.split("=", 1)
                flags.append((key, value))
                i += 1
            elif i + 1 < len(argv) and not _looks_like_option(argv[i + 1]):
                flags.append((body, argv[i + 1]))
                i += 2
            else:
                flags.append((body, None))  # a bare boolean flag
                i += 1
        else:
            raise DemoConfigError(
                f"unexpected argument {token!r}: expected `@ FILE.toml` or `--key value` "
                "(dotted kebab-case, e.g. `--ckpt.interval 5`)"
            )
    return files, flags


def _looks_like_option(token: str) -> bool:
    if token.startswith("--") and len(token) > 2:
        return True
    return token == "@" or (token.startswith("@") and token.endswith(".toml"))


def demo_from_env(component: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """This component's demo settings from AIRVISOR_DEMO (JSON), or {} when unset."""
    raw = (os.environ if environ is None else environ).get(DEMO_ENV, "")
    if not raw.strip():
        return {}
    try:
        settings = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DemoConfigError(f"{DEMO_ENV}: not valid JSON: {exc}") from None
    if not isinstance(settings, dict):
        raise DemoConfigError(f"{DEMO_ENV}: expected a JSON object keyed by component")
    unknown = sorted(set(settings) - set(SETTINGS_MODELS))
    if unknown:
        raise DemoConfigError(
            f"{DEMO_ENV}: unknown component {', '.join(unknown)}; "
            f"use {', '.join(SETTINGS_MODELS)}"
        )
    mine = settings.get(component) or {}
    if not isinstance(mine, dict):
        raise DemoConfigError(f"{DEMO_ENV}.{component}: expected a JSON object")
    return mine


def load_toml(path: Path) -> dict[str, Any]:
    """A config file: TOML, or JSON when it ends in .json (main's `rl` writes JSON)."""
    if path.suffix == ".json":
        return _load_json(path)
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise DemoConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise DemoConfigError(f"{path}: is a directory, expected a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        # The message ends with "(at line L, column C)"; string values must be quoted in TOML.
        raise DemoConfigError(
            f'{path}: invalid TOML: {exc} (string values must be quoted: name = "Qwen/...")'
        ) from None
    except OSError as exc:
        raise DemoConfigError(f"{path}: cannot read: {exc.strerror}") from None


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise DemoConfigError(f"{path}: config file not found") from None
    except json.JSONDecodeError as exc:
        raise DemoConfigError(f"{path}: invalid JSON: {exc}") from None
    except OSError as exc:
        raise DemoConfigError(f"{path}: cannot read: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise DemoConfigError(f"{path}: expected a JSON object")
    return data


def resolve_flag(
    key: str,
    raw: str | None,
    *,
    known: Mapping[tuple[str, ...], type | None],
    file_config: Mapping[str, Any],
    component: str,
) -> tuple[tuple[str, ...], Any]:
    """The config path a flag sets and its value, or DemoConfigError naming the closest flag."""
    path = tuple(part.replace("-", "_") for part in key.split("."))
    if not all(path):
        raise DemoConfigError(f"malformed option --{key}")
    if path in known or _defined_in(file_config, path):
        return path, parse_flag_value(raw)
    # `--no-a.flag` (argparse's BooleanOptionalAction, which pydantic-settings uses) or
    # `--a.no-flag` switches a boolean off.
    if raw is None:
        candidates = []
        if path[0].startswith("no_"):
            candidates.append((path[0][3:], *path[1:]))
        if path[-1].startswith("no_"):
            candidates.append((*path[:-1], path[-1][3:]))
        for positive in candidates:
            if known.get(positive) is bool or _defined_in(file_config, positive):
                return positive, False
    raise DemoConfigError(_unknown_flag_message(key, known, file_config, component))


def _defined_in(config: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = config
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _unknown_flag_message(
    key: str,
    known: Mapping[tuple[str, ...], type | None],
    file_config: Mapping[str, Any],
    component: str,
) -> str:
    candidates = sorted(
        {_as_flag(p) for p in known} | {_as_flag(p) for p in _leaf_paths(file_config)}
    )
    close = difflib.get_close_matches(key.replace("_", "-"), candidates, n=1, cutoff=0.6)
    hint = f" (did you mean --{close[0]}?)" if close else ""
    return (
        f"unknown option --{key}{hint}; {component} accepts the keys of its config files and "
        f"these: {', '.join('--' + c for c in sorted(_as_flag(p) for p in known))}"
    )


def _as_flag(path: tuple[str, ...]) -> str:
    return ".".join(part.replace("_", "-") for part in path)


def _leaf_paths(
    config: Mapping[str, Any], prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    for key, value in config.items():
        if isinstance(value, Mapping):
            yield from _leaf_paths(value, (*prefix, key))
        else:
            yield (*prefix, key)


def known_leaf_keys(model: type[BaseModel]) -> dict[tuple[str, ...], type | None]:
    """Every settable dotted path of a settings model, with its plain type where it has one."""
    keys: dict[tuple[str, ...], type | None] = {}
    for name, field in model.model_fields.items():
        annotation = _plain_type(field.annotation)  # an optional section is still a section
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for sub, kind in known_leaf_keys(annotation).items():
                keys[(name, *sub)] = kind
        else:
            keys[(name,)] = annotation
    return keys


def _plain_type(annotation: Any) -> type | None:
    if isinstance(annotation, type):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and isinstance(args[0], type):
            return args[0]
    return None


def _nest(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    nested: dict[str, Any] = {path[-1]: value}
    for part in reversed(path[:-1]):
        nested = {part: nested}
    return nested


def _validation_message(component: str, files: Sequence[Path], exc: ValidationError) -> str:
    where = ", ".join(str(f) for f in files) or "the command line"
    lines = [f"invalid {component} config ({where}):"]
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"])
        lines.append(f"  {key}: {error['msg']}")
    return "\n".join(lines)
