"""Where each prime-rl version keeps checkpoints, weights, logs and metrics, read from its code.

One table (`RULES`), one row per fact and version, each citing the prime-rl source it comes from
(`v0.4`: `third_party/prime-rl-v0.4.0/src/prime_rl/...`; `main`: `third_party/prime-rl-main/
src/prime_rl/...`, config classes under `packages/prime-rl-configs/src/prime_rl/configs/...`).
`RunLayout` applies the rows to one run's directories. A step counts as complete only if that
version's own resume would succeed from it: both halves, plus whatever else its resume reads
(v0.4's orchestrator also loads its buffer and the step's weights).

Everything here is a pure function of the paths and of what exists on disk at call time; no
file is written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from airvisor.policy import CheckpointHalves

Version = Literal["0.4", "main"]
Component = Literal["inference", "orchestrator", "trainer"]
VERSIONS: tuple[Version, ...] = ("0.4", "main")


@dataclass(frozen=True)
class Rule:
    rule: str
    source: str  # prime-rl file:line(s), relative to that version's source root


V04 = "prime-rl-v0.4.0/src/prime_rl/"
MAIN = "prime-rl-main/src/prime_rl/"
MAIN_CONFIGS = "prime-rl-main/packages/prime-rl-configs/src/prime_rl/configs/"

# The table. Keys are what airvisor asks; `source` is where that version's code answers it.
RULES: Mapping[Version, Mapping[str, Rule]] = {
    "0.4": {
        "trainer_output_dir": Rule(
            "<output_dir> (rl sets trainer.output_dir = output_dir)", V04 + "rl.py:377-386"),
        "orchestrator_output_dir": Rule(
            "<output_dir>/run_default (rl sets it; validate_shared_output_dir enforces it)",
            V04 + "rl.py:382"),
        "trainer_half": Rule(
            "<output_dir>/checkpoints/step_N/trainer, a torch DCP checkpoint: complete once "
            "`.metadata` exists (DCP writes it last); RL resume loads no dataloader state",
            V04 + "trainer/ckpt.py:111-125,156; trainer/rl/train.py:123,186"),
        "orchestrator_half": Rule(
            "<output_dir>/run_default/checkpoints/step_N/orchestrator: progress.pt written IN "
            "PLACE first, then buffer/{easy_examples,hard_examples,rollout_buffer}.jsonl "
            "(rollout_buffer last); resume reads all four",
            V04 + "orchestrator/ckpt.py:24-30,41-46,59-70; orchestrator/buffer.py:86-112"),
        "orchestrator_weights": Rule(
            "the orchestrator's resume loads the step's weights: run_default/broadcasts/step_N/"
            "STABLE, or run_default/checkpoints/step_N/STABLE plus .../step_N/weight; it fails "
            "at once (FileNotFoundError) unless ckpt.wait_for_weights_timeout is set; not needed "
            "with NCCL weight broadcast",
            V04 + "orchestrator/orchestrator.py:248-263; orchestrator/utils.py:173-215"),
        "broadcast_retention": Rule(
            "filesystem broadcasts are deleted async_level+1 steps later except at multiples of "
            "ckpt.interval, so a checkpoint step keeps its broadcast",
            V04 + "trainer/rl/train.py:220-231; trainer/utils.py:323-331"),
        "keep_last": Rule(
            "the trainer deletes the whole <output_dir>/checkpoints/step_K (keep_last newest, "
            "keep_interval multiples kept); the orchestrator never prunes its half",
            V04 + "trainer/ckpt.py:231-263; orchestrator/ckpt.py:21-90 (no clean)"),
        "save_points": Rule(
            "both save step N at the top of iteration N (N steps done) every ckpt.interval, "
            "not at the first or last iteration, plus a final checkpoint after a normal finish",
            V04 + "trainer/rl/train.py:238-251,586-589; "
            "orchestrator/orchestrator.py:306-317,700-702"),
        "step_base": Rule(
            "0-based: a fresh run prints `Step 0` first; resuming from N prints `Step N` first",
            V04 + "trainer/runs.py:22-23; orchestrator/ckpt.py:13-15; "
            "trainer/rl/train.py:184-191,484-490,570; "
            "orchestrator/orchestrator.py:246-251,667-671"),
        "resume_flag": Rule("`--ckpt.resume-step N` (top level; propagated to both)",
                            V04 + "rl.py:76-78,277-280"),
        "clean": Rule(
            "clean=true (default): rl deletes <output_dir>/logs, run_default/logs, run_default/"
            "rollouts, and run_default/broadcasts unless resuming with filesystem broadcast",
            V04 + "rl.py:137-142,573-598"),
        "logs": Rule(
            "<output_dir>/logs/{inference,orchestrator,trainer}.stdout (stdout and stderr)",
            V04 + "rl.py:568,617,695,747"),
        "launcher_log": Rule(
            "<output_dir>/logs/rl.log when log.file (default true), but with clean=true (the "
            "default) rl deletes logs/ right after its logger opened rl.log (loguru opens file "
            "sinks at once; checked with loguru 0.7.3), so the file is gone: launcher stdout only",
            V04 + "rl.py:53,137-142,558-580"),
        "metrics_jsonl": Rule(
            "none: v0.4 has only W&B and Prime monitors, no metrics.jsonl",
            V04 + "utils/monitor/ (wandb.py, prime.py, multi.py)"),
    },
    "main": {
        "trainer_output_dir": Rule(
            "<run_dir> = <output_dir>/<run.dir or run.name>; checkpoints under ckpt.output_dir "
            "when set",
            MAIN_CONFIGS + "rl.py:249-252,388-405; " + MAIN + "trainer/ckpt.py:309-317"),
        "orchestrator_output_dir": Rule("<run_dir>", MAIN_CONFIGS + "rl.py:388-405"),
        "trainer_half": Rule(
            "<ckpt dir>/checkpoints/step_N/trainer, a torch DCP checkpoint: complete once "
            "`.metadata` exists", MAIN + "trainer/ckpt.py:150-165,195,237-252"),
        "orchestrator_half": Rule(
            "<run_dir>/checkpoints/step_N/orchestrator/progress.pt, written to a temp name and "
            "renamed; resume reads only it", MAIN + "orchestrator/ckpt.py:27-40,49-55"),
        "orchestrator_weights": Rule(
            "not needed on disk: the resumed trainer broadcasts v{N} at startup and the "
            "orchestrator waits for it (ckpt.wait_for_weights_timeout or 1200 s)",
            MAIN + "trainer/rl/train.py:271-277; orchestrator/orchestrator.py:109,333-347"),
        "keep_last": Rule(
            "the trainer deletes the whole <ckpt dir>/checkpoints/step_K (with the orchestrator "
            "half when both share run_dir); steps above the resume step are not tracked, so never "
            "pruned; the orchestrator never prunes",
            MAIN + "trainer/ckpt.py:157-161,274-306; orchestrator/ckpt.py:22-77 (no clean)"),
        "save_points": Rule(
            "step N is saved after step N finished, every ckpt.interval, plus a final checkpoint "
            "(the orchestrator writes its final one even on a forced exit)",
            MAIN + "trainer/rl/train.py:602-614,727-731; "
            "orchestrator/orchestrator.py:509-515,952-968"),
        "step_base": Rule(
            "1-based: a fresh run prints `Step 1` first; resuming from N prints `Step N+1` first",
            MAIN + "trainer/ckpt.py:29-30; orchestrator/types.py:27-30; "
            "trainer/rl/train.py:218-231; orchestrator/orchestrator.py:314-321"),
        "resume_flag": Rule("`--resume.step N` (N >= 1)", MAIN_CONFIGS + "shared.py:48-53"),
        "clean": Rule(
            "a used run dir is refused without resume or clean; then rollouts/ and broadcasts/ "
            "step dirs past the resume step (all of them when fresh) are deleted",
            MAIN + "entrypoints/rl.py:622-651; utils/pathing.py:142-214"),
        "logs": Rule(
            "<run_dir>/logs/attempt_<n>/{inference,orchestrator,trainer}.log and envs/<split>/"
            "<name>.log, n = 1 + highest existing; logs/latest links to the newest",
            MAIN + "utils/pathing.py:14-39; entrypoints/rl.py:176,199,257,287,338"),
        "launcher_log": Rule("none: the launcher logs to its stdout only",
                             MAIN + "entrypoints/rl.py:117-120"),
        "metrics_jsonl": Rule(
            "<run_dir>/metrics.jsonl, appended by both trainer and orchestrator (monitors.file is "
            "on by default)",
            MAIN + "monitors/file.py:25-41; " + MAIN_CONFIGS + "monitors.py:26-40"),
    },
}

# The lowest step each version's resume option accepts (RULES[v]["resume_flag"]): v0.4 takes any
# step >= 0 (its steps start at 0; -1, "latest", is never passed); main's `ResumeConfig.step` is
# `Field(None, ge=1)`, its steps start at 1 (RULES[v]["step_base"]).
FIRST_RESUMABLE_STEP: Mapping[str, int] = {"0.4": 0, "main": 1}


def resume_step_refusal(version: str, step: int) -> str | None:
    """Why `version` cannot resume from checkpoint `step` (None when it can)."""
    if version not in VERSIONS:
        return f"unknown prime-rl version {version!r}; supported: {', '.join(VERSIONS)}"
    lowest = FIRST_RESUMABLE_STEP[version]
    if step >= lowest:
        return None
    if version == "main":
        return (f"prime-rl main cannot resume from step {step}: its steps start at 1, so its "
                "first checkpoint is step_1, and it refuses `--resume.step` below 1")
    return f"prime-rl {version} cannot resume from step {step}: its steps start at {lowest}"


def resume_flags(version: str, step: int) -> list[str]:
    """That version's option to resume from checkpoint `step`, never -1 / "latest"
    (RULES[v]["resume_flag"]). A step the version refuses raises ValueError (the reason)."""
    refusal = resume_step_refusal(version, step)
    if refusal is not None:
        raise ValueError(refusal)
    if version == "0.4":
        return ["--ckpt.resume-step", str(step)]
    return ["--resume.step", str(step)]


STEP_DIR = re.compile(r"^step_(\d+)$")
TRAINER_MARKER = ".metadata"
PROGRESS_FILE = "progress.pt"
V04_BUFFER_FILES = ("easy_examples.jsonl", "hard_examples.jsonl", "rollout_buffer.jsonl")
STABLE = "STABLE"
LOG_FILE_SUFFIX: Mapping[Version, str] = {"0.4": ".stdout", "main": ".log"}


def step_numbers(names: Iterable[str]) -> list[int]:
    """Steps named by `step_N` entries, ascending (prime-rl's own `get_all_ckpt_steps` glob)."""
    return sorted({int(m.group(1)) for m in (STEP_DIR.match(n) for n in names) if m})


def _list_steps(parent: Path) -> list[int]:
    try:
        return step_numbers(entry.name for entry in os.scandir(parent) if entry.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []


@dataclass(frozen=True)
class RunLayout:
    """One run's files, as its prime-rl version lays them out (paths absolute or cwd-relative)."""

    version: Version
    run_dir: Path  # v0.4: output_dir; main: output_dir/run.dir
    trainer_output_dir: Path
    orchestrator_output_dir: Path  # v0.4: output_dir/run_default; main: run_dir
    trainer_ckpt_root: Path  # the dir holding the trainer's checkpoints/ (main: ckpt.output_dir)
    weights_required: bool = True  # v0.4 only: False with NCCL broadcast or a weights wait
    launcher_log_enabled: bool = False  # v0.4: log.file and not clean (see RULES)

    @property
    def step_base(self) -> int:
        """The first step number a fresh run prints (RULES[v]["step_base"])."""
        return step_base_of(self.version)

    def first_step(self, resume_step: int | None) -> int:
        """The first `Step N` line of an attempt started fresh (None) or resumed from a step."""
        if resume_step is None:
            return self.step_base
        return resume_step if self.version == "0.4" else resume_step + 1

    def resume_flags(self, step: int) -> list[str]:
        return resume_flags(self.version, step)

    # -- checkpoints ----------------------------------------------------------------------------

    def trainer_ckpt_dir(self) -> Path:
        return self.trainer_ckpt_root / "checkpoints"

    def orchestrator_ckpt_dir(self) -> Path:
        return self.orchestrator_output_dir / "checkpoints"

    def trainer_half(self, step: int) -> Path:
        return self.trainer_ckpt_dir() / f"step_{step}" / "trainer"

    def orchestrator_half(self, step: int) -> Path:
        return self.orchestrator_ckpt_dir() / f"step_{step}" / "orchestrator"

    def broadcast_dir(self, step: int) -> Path:
        return self.orchestrator_output_dir / "broadcasts" / f"step_{step}"

    def rollouts_dir(self, step: int) -> Path:
        return self.orchestrator_output_dir / "rollouts" / f"step_{step}"

    def checkpoint_status(self, step: int) -> CheckpointHalves:
        """Both halves of step N and what this version's resume needs besides; reasons if not."""
        missing: list[str] = []
        trainer_marker = self.trainer_half(step) / TRAINER_MARKER
        trainer_ok = trainer_marker.is_file()
        if not trainer_ok:
            if self.trainer_half(step).is_dir():
                missing.append(f"trainer half has no {TRAINER_MARKER} (DCP save unfinished)")
            else:
                missing.append(f"no trainer half ({self.trainer_half(step)})")
        orchestrator_ok = self._orchestrator_half_ok(step, missing)
        if self.version == "0.4" and self.weights_required and not self._v04_weights_ok(step):
            orchestrator_ok = False
            missing.append(
                f"no weights for step {step} (neither {self.broadcast_dir(step) / STABLE} nor "
                f"{self.orchestrator_ckpt_dir() / f'step_{step}' / STABLE} with weight/)"
            )
        return CheckpointHalves(
            trainer_complete=trainer_ok, orchestrator_complete=orchestrator_ok,
            missing=tuple(missing),
        )

    def _orchestrator_half_ok(self, step: int, missing: list[str]) -> bool:
        half = self.orchestrator_half(step)
        if not (half / PROGRESS_FILE).is_file():
            missing.append(
                f"orchestrator half has no {PROGRESS_FILE}" if half.is_dir()
                else f"no orchestrator half ({half})"
            )
            return False
        if self.version == "main":
            return True
        absent = [name for name in V04_BUFFER_FILES if not (half / "buffer" / name).is_file()]
        if absent:
            # v0.4 writes progress.pt in place before the buffer: progress.pt alone proves nothing.
            listed = ", ".join(f"buffer/{name}" for name in absent)
            missing.append(f"orchestrator buffer incomplete (missing {listed})")
            return False
        return True

    def _v04_weights_ok(self, step: int) -> bool:
        # orchestrator/utils.py get_weight_dir: checkpoint weights first, then the broadcast.
        ckpt_step = self.orchestrator_ckpt_dir() / f"step_{step}"
        if (ckpt_step / STABLE).exists() and (ckpt_step / "weight").exists():
            return True
        return (self.broadcast_dir(step) / STABLE).exists()

    def checkpoint_steps(self) -> list[int]:
        """Every step with a step_N directory of either half (what prime-rl's `-1` would see)."""
        return sorted(set(_list_steps(self.trainer_ckpt_dir()))
                      | set(_list_steps(self.orchestrator_ckpt_dir())))

    def scan(self) -> dict[int, CheckpointHalves]:
        return {step: self.checkpoint_status(step) for step in self.checkpoint_steps()}

    # -- logs and metrics -----------------------------------------------------------------------

    def log_dir(self) -> Path | None:
        """Where the children's logs of the current attempt are (main: resolved from disk now)."""
        if self.version == "0.4":
            return self.run_dir / "logs"
        logs = self.run_dir / "logs"
        latest = logs / "latest"
        if latest.is_dir():
            return logs / os.readlink(latest) if latest.is_symlink() else latest
        attempts = [
            int(p.name.removeprefix("attempt_")) for p in _safe_iterdir(logs)
            if p.name.startswith("attempt_") and p.name.removeprefix("attempt_").isdigit()
        ]
        return logs / f"attempt_{max(attempts)}" if attempts else None

    def log_file(self, component: Component) -> Path | None:
        directory = self.log_dir()
        if directory is None:
            return None
        return directory / f"{component}{LOG_FILE_SUFFIX[self.version]}"

    def run_dirs(self) -> list[Path]:
        """Every directory this run writes: the run directory, and main's `ckpt.output_dir`
        when it lies outside it (RULES["main"]["trainer_output_dir"]). A used run is moved
        aside or refused as a whole, never half."""
        dirs = [self.run_dir]
        root = self.trainer_ckpt_root
        if root != self.run_dir and not root.is_relative_to(self.run_dir):
            dirs.append(root)
        return dirs

    def launch_clean(self, *, clean: bool, resume_step: int | None,
                     broadcast_type: str | None) -> tuple[list[Path], list[Path]]:
        """What v0.4's `rl` deletes before it starts its children (RULES["0.4"]["clean"]), as
        (deleted, deleted then created again): its log dirs (recreated), the broadcasts unless
        resuming with filesystem broadcast (`resume_step` as rl.py tests it: step 0 is
        falsy), the rollouts. Component mode does exactly this before each launch; main's
        launcher has no such clean (it is never run in component mode)."""
        if self.version != "0.4" or not clean:
            return [], []
        logs = [self.run_dir / "logs", self.orchestrator_output_dir / "logs"]
        deleted = list(logs)
        if not (resume_step and broadcast_type == "filesystem"):
            deleted.append(self.orchestrator_output_dir / "broadcasts")
        deleted.append(self.orchestrator_output_dir / "rollouts")
        return deleted, logs

    def rewritten_logs(self) -> list[Path]:
        """The component logs the next launch writes at the same paths (v0.4 opens
        `logs/*.stdout` with "w" at each launch, RULES["0.4"]["logs"], and deletes them first
        with clean=true); main writes each launch into a new `logs/attempt_<n>`, so none."""
        if self.version != "0.4":
            return []
        return [path for name in ("inference", "orchestrator", "trainer")
                if (path := self.log_file(name)) is not None]

    def env_server_log(self, split: str, name: str) -> Path | None:
        """main only: one log per launcher-managed env server."""
        if self.version == "0.4":
            return None
        directory = self.log_dir()
        return None if directory is None else directory / "envs" / split / f"{name}.log"

    def launcher_log(self) -> Path | None:
        if self.version == "0.4" and self.launcher_log_enabled:
            return self.run_dir / "logs" / "rl.log"
        return None

    def metrics_file(self) -> Path | None:
        return self.run_dir / "metrics.jsonl" if self.version == "main" else None


def step_base_of(version: str) -> int:
    """The first step number a fresh run of that version prints (RULES[v]["step_base"]): the
    last of max_steps steps is `Step max_steps - 1 + base`."""
    return 0 if version == "0.4" else 1


def _safe_iterdir(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _fact(facts: Mapping[str, Any] | object, name: str) -> Any:
    if isinstance(facts, Mapping):
        return facts.get(name)
    return getattr(facts, name, None)


def layout_for(version: str, facts: Mapping[str, Any] | object, *, cwd: Path | None = None
               ) -> RunLayout:
    """The layout of a run from its resolved facts (resolve_config.py's `facts`, or an object
    with the same attribute names). Relative paths are taken against `cwd` (the launcher's).

    Optional facts: `trainer_ckpt_dir` or `ckpt_output_dir` (main's ckpt.output_dir),
    `weight_broadcast_type`
    ("nccl" needs no weights on disk for a v0.4 resume), `wait_for_weights_timeout` (v0.4: the
    orchestrator waits for the trainer's rebroadcast instead of failing), `log_file` and
    `clean` (v0.4: rl.log survives only with log.file true and clean false).
    """
    if version not in VERSIONS:
        raise ValueError(f"unknown prime-rl version {version!r}; supported: {', '.join(VERSIONS)}")
    base = cwd or Path.cwd()

    def path(name: str, default: Path | None = None) -> Path:
        value = _fact(facts, name)
        if value is None or value == "":
            if default is None:
                raise ValueError(f"the resolved facts lack {name!r}")
            return default
        return base / Path(str(value))

    output_dir = path("output_dir", base / "outputs")
    if version == "0.4":
        run_dir = path("run_dir", output_dir)
        orchestrator_dir = path("orchestrator_output_dir", run_dir / "run_default")
        trainer_root = run_dir
    else:
        run_dir = path("run_dir")
        orchestrator_dir = path("orchestrator_output_dir", run_dir)
        ckpt_dir = _fact(facts, "trainer_ckpt_dir")  # resolve_config.py names the dir itself
        trainer_root = (base / Path(str(ckpt_dir))).parent if ckpt_dir else path(
            "ckpt_output_dir", run_dir)
    nccl = str(_fact(facts, "weight_broadcast_type") or "filesystem") == "nccl"
    waits = bool(_fact(facts, "wait_for_weights_timeout"))
    log_file = _fact(facts, "log_file")
    return RunLayout(
        version=version,
        run_dir=run_dir,
        trainer_output_dir=run_dir,
        orchestrator_output_dir=orchestrator_dir,
        trainer_ckpt_root=trainer_root,
        weights_required=not (nccl or waits),
        launcher_log_enabled=log_file is not False and _fact(facts, "clean") is False,
    )
