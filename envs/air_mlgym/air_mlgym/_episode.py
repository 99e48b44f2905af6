"""One episode of an MLGym task: model replies in, observations and rewards out.

No verifiers here; the adapters call `reset`, `step` and `finish` (from a worker thread, the
calls block on docker). Container trouble never raises out of `step`: the episode tries once to
get its container back (rebuilding the workspace) and otherwise ends with an observation that
says so. An episode that could not be served (no container, a reset or evaluation that cannot
run, an internal error) records why in `error`, and the adapters report it to the orchestrator
as an errored rollout: never a silent reward of 0 that would be trained on.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from air_mlgym._actions import (
    BLOCKLIST_MESSAGE,
    Command,
    NoCommand,
    blocked_command,
    extract_command,
)
from air_mlgym._containers import ContainerUnavailable
from air_mlgym._report import report_episode
from air_mlgym._reward import MetricSpec, RewardConfig, RewardMode, ScoreTracker, baseline_score
from air_mlgym._session import EnvironmentUnusable, Evaluation, TaskSession
from air_mlgym._shell import RunResult
from air_mlgym._tasks import TaskSpec

logger = logging.getLogger(__name__)

TRAIN_WORDS = re.compile(r"\b(python3?|torchrun|accelerate|deepspeed)\b")
# MLGym drops tqdm progress-bar lines from observations (mlgym/environment/utils.py).
TQDM_PATTERN = re.compile(r"(?:.*?:\s*)?(\d+%\|.*?\|.*\[.*?\])")
# What MLGym's `validate` / `submit` shell functions print (tools/validate.sh, submit.sh).
VALIDATION_RE = re.compile(r"<<VALIDATION\|\|.*?\|\|VALIDATION>>\n?", re.DOTALL)
SUBMISSION_RE = re.compile(r"<<SUBMISSION\|\|.*?\|\|SUBMISSION>>\n?", re.DOTALL)


@dataclass(frozen=True)
class EpisodeConfig:
    window: int = 100  # lines shown by open/goto/scroll
    max_observation_chars: int = 12_000
    clip_negative: bool = False
    reward_scale: float = 1.0
    reward_mode: RewardMode = "final"
    failure_reward: float = -1.0  # no valid score; also the floor of valid ones
    evaluate_on_exit: bool = True  # evaluate once more when the episode ends without submit
    trajectory_dir: Path | None = None
    max_steps: int | None = None  # commands per episode; format errors do not count
    format_error_limit: int = 3  # consecutive replies without a usable command (MLGym: 3)
    footer: bool = True  # MLGym's "(Current Step ..., Open file ..., Current directory ...)"

    def reward_config(self) -> RewardConfig:
        return RewardConfig(
            mode=self.reward_mode,
            failure=self.failure_reward,
            clip_negative=self.clip_negative,
            scale=self.reward_scale,
        )


@dataclass(frozen=True)
class StepResult:
    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Editor:
    file: str | None = None
    line: int = 1


class Episode:
    def __init__(
        self,
        task: TaskSpec,
        session: TaskSession,
        metric: MetricSpec,
        config: EpisodeConfig | None = None,
        *,
        episode_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.task = task
        self.session = session
        self.metric = metric
        self.config = config or EpisodeConfig()
        self.episode_id = episode_id or uuid.uuid4().hex[:12]
        self.meta = dict(meta or {})
        self.tracker = ScoreTracker(
            metric, baseline_score(task.baseline_scores, metric), self.config.reward_config()
        )
        # Evaluations of this episode by solution digest: an unchanged solution is not run
        # (or scored differently by Monte Carlo noise) again.
        self._evaluations: dict[str, Evaluation] = {}
        self.done = False
        self.submitted = False
        self.end_reason: str | None = None
        self.steps: list[dict[str, Any]] = []
        self.events: list[str] = []
        self._editor = _Editor()
        self.steps_used = 0
        self.format_errors = 0  # consecutive
        self._finished = False
        self._cwd = session.config.workspace
        self._started = time.time()
        self._ready = False
        self._trajectory_path: Path | None = None
        # Why the environment could not serve this episode (the adapters raise it): None when
        # it could, whatever the agent did.
        self.error: str | None = None
        # Why an evaluation of this episode failed because of the agent (README "Blame"): a
        # failure reward, never an error; the last such reason, for the episode's log.
        self.agent_failure: str | None = None

    @property
    def total_reward(self) -> float:
        return self.tracker.total_reward

    # --- lifecycle ------------------------------------------------------------------------

    def reset(self) -> bool:
        """Prepare the workspace; False (with `end_reason` set) when the container is gone."""
        try:
            self.session.reset(self.task)
        except ContainerUnavailable as e:
            logger.error("episode %s: reset failed: %s", self.episode_id, e)
            self.events.append(f"reset failed: {e}")
            self._fail(f"reset failed: {e}")
            return False
        self._ready = True
        return True

    def step(self, reply: str) -> StepResult:
        """The observation, reward and end flag for one model reply; never raises."""
        began = time.time()
        if self.done:
            return StepResult("The episode is over.", 0.0, True)
        parsed: Command | NoCommand | None = None
        try:
            if not self._ready:
                self._end("container_unavailable")
                result = StepResult(self._unavailable_message(), 0.0, True)
            else:
                parsed = extract_command(reply)
                blocked = (
                    blocked_command(parsed.text)
                    if isinstance(parsed, Command) and parsed.kind == "shell"
                    else None
                )
                if isinstance(parsed, NoCommand) or blocked is not None:
                    message = (
                        parsed.message
                        if isinstance(parsed, NoCommand)
                        else BLOCKLIST_MESSAGE.format(name=blocked)
                    )
                    result = self._format_error(message)
                else:
                    self.format_errors = 0
                    self.steps_used += 1
                    result = self._with_footer(self._run_command(parsed))
        except Exception as e:  # a bug here ends the episode; the adapters report the error
            logger.exception("episode %s: internal error on reply %r", self.episode_id, reply)
            self.events.append(f"internal error: {type(e).__name__}: {e}")
            self._end("internal_error")
            self.error = self.error or f"internal error: {type(e).__name__}: {e}"
            result = StepResult(
                "The environment hit an internal error; the episode ends here.", 0.0, True
            )
        self._record(reply, parsed if isinstance(parsed, Command) else None, result, began)
        return result

    def _format_error(self, message: str) -> StepResult:
        """A reply without a usable command: answered without using a step, as MLGym re-asks
        the model; `format_error_limit` in a row end the episode (MLGym's exit_format)."""
        self.format_errors += 1
        info = {"kind": "no_command", "format_error": True}
        if self.format_errors >= self.config.format_error_limit:
            self._end("format_error_limit")
            return StepResult(
                f"{message}\n{self.format_errors} replies in a row had no usable command; "
                "the episode ends here.",
                0.0,
                True,
                info,
            )
        return StepResult(message, 0.0, False, info)

    def _with_footer(self, result: StepResult) -> StepResult:
        limit = self.config.max_steps
        if limit is not None and self.steps_used >= limit and not self.done:
            self._end("max_steps")  # finish() evaluates, as MLGym's autosubmission
            result = StepResult(result.observation, result.reward, True, result.info)
        if not self.config.footer or self.done:
            return result
        remaining = "unlimited" if limit is None else str(max(limit - self.steps_used, 0))
        footer = (
            f"(Current Step: {self.steps_used}, Remaining Steps: {remaining})\n"
            f"(Open file: {self._editor.file or 'n/a'})\n"
            f"(Current directory: {self._cwd})\n"
            "bash-$"
        )
        return StepResult(f"{result.observation}\n{footer}", result.reward, False, result.info)

    def _run_command(self, command: Command) -> StepResult:
        try:
            result = self._dispatch(command)
        except ContainerUnavailable as e:
            if self.session.disk_limit_hit() is None:
                result = self._recover(e)
            else:  # the disk watcher ended the shell, or its replacement: not a recovery
                result = StepResult("", 0.0, False, {"kind": command.kind})
        if not result.done:
            result = self._check_disk(result)
        if command.note:
            result = StepResult(
                f"{result.observation}\n({command.note})", result.reward, result.done, result.info
            )
        return result

    def _check_disk(self, result: StepResult) -> StepResult:
        """A command after which the episode's files are over its disk limit (the root
        watcher ended the agent's processes and left its mark) ends the episode as the agent's
        failure: its final evaluation fails for the same reason (README "Limits")."""
        why = self.session.disk_limit_hit()
        if why is None:
            return result
        self.agent_failure = why
        self.events.append(f"disk limit: {why}")
        self._end("disk_limit")
        told = (
            "The episode's files passed its disk limit, so every process of yours was ended "
            f"and the episode ends here ({why})."
        )
        text = f"{result.observation}\n{told}" if result.observation.strip() else told
        return StepResult(text, result.reward, True, {**result.info, "disk_limit": why})

    def finish(self, reason: str | None = None) -> float:
        """End the episode (evaluating once more unless it was submitted) and save the
        trajectory; returns the final reward of that last evaluation."""
        if self._finished:
            return 0.0
        self._finished = True
        final_reward = 0.0
        # Without a submit, the episode's end evaluates once more (MLGym's autosubmission at
        # the step limit, the format-error limit or any other end), unless the container failed.
        if (
            self._ready
            and self.config.evaluate_on_exit
            and not self.submitted
            and self.end_reason not in {"container_unavailable", "internal_error"}
        ):
            try:
                evaluation = self._run_evaluation(fresh=True)
                outcome = self.tracker.observe(evaluation.metrics, "final")
                final_reward = outcome.reward
                self.events.append(f"final evaluation: {evaluation.metrics}")
            except ContainerUnavailable as e:
                logger.error("episode %s: final evaluation failed: %s", self.episode_id, e)
                self.events.append(f"final evaluation failed: {e}")
                self._fail(f"final evaluation failed: {e}")
        if not self.done:
            self._end(reason or "finished")
        if self.end_reason != "container_unavailable":
            # Container trouble is nobody's fault: such an episode is not charged a failure.
            final_reward += self.tracker.finalize()
        self.events.append(f"reward {self.tracker.total_reward:+.6g}")
        self.save_trajectory()
        # The supervisor counts errored episodes (airvisor's $AIRVISOR_EPISODE_LOG).
        report_episode(ok=self.error is None, task=self.task.id, error=self.error,
                       container=self.session.container_name, episode_id=self.episode_id,
                       end_reason=self.end_reason, agent_failure=self.agent_failure)
        return final_reward

    # --- commands -------------------------------------------------------------------------

    def _dispatch(self, command: Command) -> StepResult:
        kind = command.kind
        if kind == "validate":
            return self._evaluate(submit=False)
        if kind == "submit":
            return self._evaluate(submit=True)
        if kind == "shell":
            if TRAIN_WORDS.search(command.text):
                # training runs get MLGym's long timeout: the task's training_timeout, unless
                # long_timeout was given explicitly (the same rule as for evaluations)
                timeout = self.session.evaluation_timeout(self.task)
            else:
                timeout = self.session.config.short_timeout
            result, notes = self.session.run(command.text, timeout=timeout)
            if result.cwd:
                self._cwd = result.cwd
            return self._shell_result(result, notes)
        return self._file_command(command)

    def _file_command(self, command: Command) -> StepResult:
        editor = self._editor
        window = str(self.config.window)
        args = command.args
        if command.kind in {"goto", "scroll_up", "scroll_down", "edit", "insert"} and (
            editor.file is None
        ):
            return StepResult(
                f"No file is open. Use `open <path>` first ({command.kind} needs an open file).",
                0.0,
                False,
                {"kind": command.kind},
            )
        payload: str | None = None
        if command.kind == "open":
            line = int(args[1]) if len(args) > 1 else 1
            argv = ["view", args[0], str(line), window]
        elif command.kind == "goto":
            argv = ["view", str(editor.file), args[0], window]
        elif command.kind in {"scroll_up", "scroll_down"}:
            sign = 1 if command.kind == "scroll_down" else -1
            argv = ["view", str(editor.file), str(editor.line + sign * self.config.window), window]
        elif command.kind == "create":
            argv = ["create", args[0], window]
        elif command.kind == "edit":
            payload = command.body or ""
            argv = [
                "edit",
                str(editor.file),
                str(command.start),
                str(command.end),
                "{payload}",
                window,
            ]
        elif command.kind == "insert":
            payload = command.body or ""
            argv = ["insert", str(editor.file), str(command.start), "{payload}", window]
        elif command.kind == "search_file":
            target = args[1] if len(args) > 1 else editor.file
            if target is None:
                return StepResult(
                    "No file is open; give the file: search_file <term> <file>",
                    0.0,
                    False,
                    {"kind": command.kind},
                )
            argv = ["search_file", args[0], target]
        elif command.kind == "search_dir":
            argv = ["search_dir", args[0], args[1] if len(args) > 1 else "."]
        else:  # find_file
            argv = ["find_file", args[0], args[1] if len(args) > 1 else "."]
        result, notes = self.session.tool(argv, payload)
        output = self._take_editor_state(result.output)
        return self._observe(
            RunResult(output=output, exit_code=result.exit_code, timed_out=result.timed_out),
            notes,
            {"kind": command.kind, "exit_code": result.exit_code},
        )

    def _shell_result(self, result: RunResult, notes: list[str]) -> StepResult:
        """A shell command's observation; `validate` / `submit` anywhere in it (MLGym's shell
        functions print a marker) evaluate after it ran."""
        info: dict[str, Any] = {"kind": "shell", "exit_code": result.exit_code}
        output = result.output
        action = None
        if SUBMISSION_RE.search(output):
            action = "submit"
        elif VALIDATION_RE.search(output):
            action = "validate"
        output = SUBMISSION_RE.sub("", VALIDATION_RE.sub("", output))
        lines = [line for line in output.splitlines() if not _is_progress_bar(line)]
        cleaned = RunResult(
            output="\n".join(lines), exit_code=result.exit_code, timed_out=result.timed_out
        )
        if action is None:
            return self._observe(cleaned, notes, info)
        evaluated = self._evaluate(submit=action == "submit")
        before = cleaned.output.rstrip("\n")
        text = f"{before}\n{evaluated.observation}" if before.strip() else evaluated.observation
        merged = {**info, **evaluated.info, "in_shell": True}
        return StepResult(text, evaluated.reward, evaluated.done, merged)

    def _take_editor_state(self, output: str) -> str:
        kept: list[str] = []
        for line in output.splitlines():
            if line.startswith("@@AIR "):
                try:
                    state = json.loads(line[len("@@AIR ") :])
                    self._editor = _Editor(file=str(state["file"]), line=int(state["line"]))
                except (ValueError, KeyError, TypeError):
                    pass
                continue
            kept.append(line)
        return "\n".join(kept)

    def _run_evaluation(self, *, fresh: bool = False) -> Evaluation:
        """`fresh`: the episode's end (a submit or the final evaluation): evaluated again even
        when the solution is unchanged (as MLGym does: a resubmit of an earlier lucky draw's
        bytes gets a new draw), after the agent's processes are ended."""
        # (a submit and the final evaluation end the episode: the agent's processes go first)
        evaluation = self.session.evaluate(None if fresh else self._evaluations, stop=fresh)
        if evaluation.solution_hash is not None and evaluation.agent_failure is None:
            self._evaluations.setdefault(evaluation.solution_hash, evaluation)
        if evaluation.agent_failure is not None:
            self.agent_failure = evaluation.agent_failure
            why = evaluation.agent_failure
            self.events.append(f"evaluation failed because of the agent: {why}")
        return evaluation

    def _evaluate(self, *, submit: bool) -> StepResult:
        evaluation = self._run_evaluation(fresh=submit)
        outcome = self.tracker.observe(evaluation.metrics, "submit" if submit else "validate")
        info = {
            "kind": "submit" if submit else "validate",
            "metrics": evaluation.metrics,
            "score": outcome.score,
            "value": outcome.value,
            "best": outcome.best,
            "cached": evaluation.cached,
        }
        baseline = self.tracker.baseline
        if submit:
            self.submitted = True
            self._end("submitted")
            reward = outcome.reward + self.tracker.finalize()
            text = _clip(
                f"Submitted. Evaluation score: {evaluation.message}",
                self.config.max_observation_chars,
            )
            return StepResult(text, reward, True, info)
        if evaluation.metrics is None:
            return StepResult(
                _clip(evaluation.message, self.config.max_observation_chars),
                outcome.reward,
                False,
                info,
            )
        base = "NA (no baseline)" if baseline is None else f"{{'{self.metric.name}': {baseline}}}"
        text = (
            "Your code produced a valid submission artefact.\n"
            f"Baseline Score: {base}\nEvaluation Score: {evaluation.message}"
        )
        return StepResult(text, outcome.reward, False, info)

    def _observe(self, result: RunResult, notes: list[str], info: dict[str, Any]) -> StepResult:
        text = result.output.rstrip("\n")
        if not text.strip() and not notes:
            text = "Your command ran successfully and did not produce any output."
        text = _clip(text, self.config.max_observation_chars)
        if notes:
            text = (text + "\n" if text else "") + "\n".join(notes)
        return StepResult(text, 0.0, False, info)

    def _recover(self, error: ContainerUnavailable) -> StepResult:
        """The container went away mid-episode: rebuild once if it is back, else end."""
        logger.warning("episode %s: container trouble: %s", self.episode_id, error)
        self.events.append(f"container trouble: {error}")
        if isinstance(error, EnvironmentUnusable):  # a new container would not do better
            self._ready = False
            self._fail(str(error))
            return StepResult(self._unavailable_message(), 0.0, True, {"kind": "container_lost"})
        self.session.close()
        try:
            self.session.reset(self.task)
        except ContainerUnavailable as again:
            self.events.append(f"recovery failed: {again}")
            self._ready = False
            self._fail(f"the container was lost and could not be recovered: {again}")
            return StepResult(self._unavailable_message(), 0.0, True, {"kind": "container_lost"})
        self._editor = _Editor()
        self.events.append("container recovered; workspace rebuilt")
        return StepResult(
            "The task container had a problem and was recovered: the workspace was rebuilt from "
            "the starter code, so your earlier changes are gone. Continue from there.",
            0.0,
            False,
            {"kind": "container_recovered"},
        )

    def _unavailable_message(self) -> str:
        return (
            f"The task container {self.session.container_name} is unavailable, so this episode "
            "ends here. No action is needed."
        )

    def _fail(self, why: str) -> None:
        self.error = self.error or why
        self._end("container_unavailable")

    def _end(self, reason: str) -> None:
        self.done = True
        self.end_reason = self.end_reason or reason

    # --- trajectory -----------------------------------------------------------------------

    def _record(
        self, reply: str, command: Command | None, result: StepResult, began: float
    ) -> None:
        self.steps.append(
            {
                "turn": len(self.steps) + 1,
                "reply": reply,
                "command": None if command is None else asdict(command),
                "observation": result.observation,
                "reward": result.reward,
                "done": result.done,
                "info": result.info,
                "seconds": round(time.time() - began, 3),
            }
        )

    def trajectory(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "task_id": self.task.id,
            "task_config": str(self.task.config_path),
            "container": self.session.container_name,
            "metric": asdict(self.metric),
            "baseline": self.tracker.baseline,
            "best": self.tracker.best,
            "total_reward": self.tracker.total_reward,
            "submitted": self.submitted,
            "end_reason": self.end_reason,
            "error": self.error,
            "agent_failure": self.agent_failure,
            "reward_mode": self.config.reward_mode,
            "steps_used": self.steps_used,
            "started_at": self._started,
            "ended_at": time.time(),
            "events": self.events,
            "meta": self.meta,
            "steps": self.steps,
        }

    def save_trajectory(self) -> Path | None:
        directory = self.config.trajectory_dir
        if directory is None:
            return None
        try:
            directory.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self._started))
            path = directory / f"{stamp}_{self.task.id}_{self.episode_id}.json"
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(self.trajectory(), indent=2, default=str), encoding="utf-8")
            tmp.replace(path)
        except OSError as e:  # a full disk must not fail the rollout
            logger.warning("episode %s: cannot save trajectory: %s", self.episode_id, e)
            return None
        self._trajectory_path = path
        return path


def _is_progress_bar(line: str) -> bool:
    # MLGym's pattern backtracks quadratically on long lines: test only plausible ones.
    return "%|" in line and len(line) < 2000 and TQDM_PATTERN.search(line) is not None


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[: limit // 2]
    tail = text[-limit // 2 :]
    return f"{head}\n[... {len(text) - limit} characters omitted ...]\n{tail}"
