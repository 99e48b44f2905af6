"""The two halves of a launcher-mode run, for a recovery that keeps the inference server.

A trainer or orchestrator failure need not cost a model reload: prime-rl's orchestrator puts the
server on the right weights itself when it starts (v0.4 `orchestrator/orchestrator.py:248-263`).
So the run can be started as two supervised processes, both derived by prime-rl's own code
(`resolve_config.py --split`, run with prime-rl's interpreter):

- **inference**: the server exactly as that version's `rl` starts it: v0.4 `rl.py:608-627`
  (`inference @ <the sub-config rl.py:611 dumps>`, `CUDA_VISIBLE_DEVICES` of `rl.py:620`); main
  `entrypoints/rl.py:194-213` (`inference @ inference.json` as write_subconfigs writes it, the
  launcher's environment defaults from `prime_rl.utils.process`, `env_vars`, the inference GPUs);
- **rest**: prime-rl's own `rl` with the same resolved config but no `[inference]`, which both
  versions accept (v0.4 `rl.py:121-126`, "only viable, if an inference server was started
  manually"; main `configs/rl.py:234-235`, and its launcher skips the server:
  `entrypoints/rl.py:132,225-232`). The orchestrator's client already points at the server's port
  (main checks it, `entrypoints/rl.py:163-173`; here it is checked for both versions).

The resolver re-parses the rest with prime-rl's parser and compares the trainer's and the
orchestrator's sub-configs with the full run's: any difference is a refusal, so the rest runs
exactly what the full `rl` would have run. A relaunch after a trainer/orchestrator failure starts
only `rest` again (with the resume step), against the kept server.

NCCL weight broadcast is kept too, in both versions: the relaunched orchestrator forms the group
anew at its start (main `orchestrator/orchestrator.py:281-290` posting `/init_broadcaster`,
`utils/client.py:420-440`; v0.4 `orchestrator/orchestrator.py:232-236`), the kept worker builds
a new receiver on every call (main `inference/vllm/worker/nccl.py:95-130`, v0.4
`inference/vllm/worker/nccl.py:89-109`), and the resume step's weights are broadcast to it before
the first rollout. A worker stuck in a receive from the dead trainer is what the kept server's
responsiveness probe (`airvisor.box._probe.probe_kept_server`) catches: such a server is
stopped and the recovery is full.

What cannot be kept faithfully is a typed `Refusal` (the engine then restarts everything and
says why, from prime-rl's source): main's NIXL weight broadcast, multi-node or disaggregated
inference, Slurm, a client not on the server's port, a rest prime-rl resolves differently,
component mode, or a resolution neither prime-rl nor the demo's launcher stand-in made.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import tomli_w

from airvisor.primerl._adapters import (
    LaunchSpec,
    attempt_environment,
    base_environment,
    resolve_profile,
    script,
)
from airvisor.primerl._resolve import Resolution
from airvisor.profile._schema import Profile

RefusalCode = Literal[
    "not_resolved",  # prime-rl could not be reached: no halves derived by its code
    "component_mode",  # [prime_rl] mode = "components": not prime-rl's `rl`
    "no_inference",  # the config starts no inference server: nothing to keep
    "nixl_weight_broadcast",  # main's NIXL: a dead trainer's ModelExpress entry may be taken
    "client_elsewhere",  # the orchestrator's client is not on the server's port
    "rest_differs",  # prime-rl resolves trainer/orchestrator differently without [inference]
    "slurm",  # the run is a Slurm job
    "multi_node",  # multi-node deployment or inference
    "disaggregated",  # disaggregated (prefill/decode) inference
    "gpus_unknown",  # main: fewer GPUs visible than the deployment asks
]
REFUSAL_CODES: tuple[str, ...] = get_args(RefusalCode)

INFERENCE = "inference"
REST = "rest"


@dataclass(frozen=True)
class Refusal:
    """Why this run's inference server cannot be kept across a relaunch of the rest."""

    code: RefusalCode
    detail: str

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


@dataclass(frozen=True)
class Half:
    """One half as prime-rl derived it: the config file's content and format, and what the
    launcher adds to the environment."""

    config: dict[str, Any]
    format: Literal["toml", "json"]
    env: dict[str, str]

    def text(self) -> str:
        if self.format == "toml":  # v0.4's launcher writes its sub-configs with tomli_w
            return tomli_w.dumps(self.config)
        return json.dumps(self.config, indent=2)  # main: dump_resolved_config as JSON


@dataclass(frozen=True)
class Split:
    """A resolution's two halves, or why there are none (`refusals` non-empty)."""

    version: str
    inference: Half | None
    rest: Half | None
    inference_gpus: tuple[int, ...]
    host: str | None  # the server's bind host (None: all interfaces)
    port: int | None
    refusals: tuple[Refusal, ...]

    @property
    def supported(self) -> bool:
        return not self.refusals and self.inference is not None and self.rest is not None


@dataclass(frozen=True)
class SplitPlan:
    """What the engine starts in the split: `inference` once (kept across relaunches of the
    rest), `rest` at every attempt (its resume step already in its config file)."""

    inference: LaunchSpec
    rest: LaunchSpec
    host: str  # where the kept server is reached (loopback for an all-interfaces bind)
    port: int
    inference_gpus: tuple[int, ...]


class SplitRefused(ValueError):
    def __init__(self, refusals: tuple[Refusal, ...]) -> None:
        super().__init__("; ".join(str(r) for r in refusals))
        self.refusals = refusals


def _refusal(raw: Any) -> Refusal:
    code = raw.get("code") if isinstance(raw, Mapping) else None
    detail = str(raw.get("detail", "")) if isinstance(raw, Mapping) else str(raw)
    if code not in REFUSAL_CODES:  # a resolver newer than this module: keep it a refusal
        return Refusal("rest_differs", f"{code}: {detail}")
    return Refusal(code, detail)


def _half(raw: Any) -> Half | None:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("config"), Mapping):
        return None
    fmt: Literal["toml", "json"] = "toml" if raw.get("format") == "toml" else "json"
    env = {str(k): str(v) for k, v in dict(raw.get("env") or {}).items()}
    return Half(dict(raw["config"]), fmt, env)


def split_of(resolution: Resolution, *, mode: str = "launcher") -> Split:
    """The halves in a resolution made with `resolve(split=True)`, or the refusals."""
    version = resolution.facts.version
    extra: list[Refusal] = []
    if mode != "launcher":
        extra.append(Refusal("component_mode", "component mode starts the processes itself; "
                                               "the split is of prime-rl's `rl`"))
    raw = resolution.split
    if not resolution.halves_derived or not isinstance(raw, Mapping):
        reason = resolution.note or "the config was not resolved with --split"
        return Split(version, None, None, (), None, None,
                     (*extra, Refusal("not_resolved", reason)))
    inference = raw.get("inference") if isinstance(raw.get("inference"), Mapping) else {}
    assert isinstance(inference, Mapping)
    gpus = tuple(int(g) for g in inference.get("gpus") or ())
    port = inference.get("port")
    refusals = (*extra, *(_refusal(r) for r in raw.get("refusals") or ()))
    return Split(version, _half(raw.get("inference")), _half(raw.get("rest")), gpus,
                 inference.get("host"), port if isinstance(port, int) else None,
                 tuple(refusals))


def component_keep_refusals(resolution: Resolution) -> tuple[Refusal, ...]:
    """Why a component-mode run (airvisor starts v0.4's three processes itself) cannot keep its
    inference server across a recovery: the refusals prime-rl's split derivation gives (NCCL
    weight broadcast, an orchestrator client elsewhere, no server; `resolve(split=True)`),
    but `rest_differs`, which concerns `rl` relaunched without [inference]: component mode
    relaunches the full config's own trainer and orchestrator sub-configs."""
    return tuple(r for r in split_of(resolution).refusals if r.code != "rest_differs")


def resolve_split(profile: Profile, *, resume_step: int | None, scratch: Path,
                  environ: Mapping[str, str] | None = None) -> Resolution:
    """`_adapters.resolve_profile` with the halves: the same `rl` argument list (the user's,
    airvisor's overrides, the resume step), resolved by prime-rl with `--split`."""
    return resolve_profile(profile, resume_step=resume_step, scratch=scratch, environ=environ,
                           split=True)


def _reach(host: str | None) -> str:
    # A server bound to every interface (prime-rl's default host None) is reached on loopback.
    return "127.0.0.1" if host in (None, "", "0.0.0.0", "::", "localhost") else str(host)


def plan_split(profile: Profile, split: Split, *, attempt_dir: Path,
               prl_run_id: str | None = None,
               container_names: Sequence[str] = (),
               environ: Mapping[str, str] | None = None) -> SplitPlan:
    """The two processes of a split attempt; raises SplitRefused when `split` has refusals.

    Both config files go to `attempt_dir` (airvisor's, not the run dir: v0.4's `rl` clean
    removes `<output_dir>/logs`, main's `clean` the whole run dir). main's `rl()` gives every
    child one `PRL_RUN_ID` (`entrypoints/rl.py:613-618`, W&B's shared run id): here the kept
    server and each rest launch get the same one (`setdefault` keeps the given value).
    """
    if not split.supported:
        raise SplitRefused(split.refusals or (Refusal("no_inference", "no halves"),))
    assert split.inference is not None and split.rest is not None and split.port is not None
    environ = dict(os.environ if environ is None else environ)
    base = base_environment(profile, environ)
    cwd = Path(profile.prime_rl.workdir
               or (profile.source.parent if profile.source else Path.cwd()))
    suffix = "." + split.inference.format
    server_file = attempt_dir / f"inference{suffix}"
    rest_file = attempt_dir / f"rl-rest{suffix}"
    run_id = {"PRL_RUN_ID": prl_run_id or uuid.uuid4().hex} if split.version == "main" else {}
    inference = LaunchSpec(
        argv=[*script(profile, "inference"), "@", str(server_file)],
        env={**base, **run_id, **split.inference.env}, cwd=cwd,
        files={server_file: split.inference.text()})
    # The rest runs the orchestrator (and env-server): it gets what the full `rl` would, the
    # task containers' names and the episode log included.
    rest_base = attempt_environment(profile, environ, attempt_dir=attempt_dir,
                                    container_names=container_names)
    rest = LaunchSpec(
        argv=[*script(profile, "rl"), "@", str(rest_file)],
        env={**rest_base, **run_id, **split.rest.env}, cwd=cwd,
        files={rest_file: split.rest.text()})
    return SplitPlan(inference, rest, _reach(split.host), split.port, split.inference_gpus)
