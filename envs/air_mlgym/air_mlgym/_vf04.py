"""Adapter for the verifiers 0.4 v1 API (`import verifiers.v1 as vf`), what current prime-rl
loads: a taskset package whose `__all__` exports one `Taskset` and one `Env` subclass.

The env plays MLGym host-side, like verifiers' own TextArena env: the model is the run's
agent (a tool-less chat harness whose one request per turn is made in this process,
`MLGymChatHarness`), `interaction.turn()`
carries each observation back as the next user turn, and the episode's summed metric improvement
is recorded as the trace's reward. An episode the environment could not serve (no container, a
reset or evaluation that cannot run) raises from `run` once the exchange is over: verifiers
records it on the episode (`ok` false) and prime-rl drops it, instead of training on a 0.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.harness import Harness
from verifiers.v1.runtimes import ProgramResult

from air_mlgym._core import EnvArgs, MLGymRunner
from air_mlgym._report import report_episode

logger = logging.getLogger(__name__)

REWARD_NAME = "mlgym_improvement"


class MLGymTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]
    """`[env.taskset]`: the arguments of `load_environment` of the 0.3 adapter, except that the
    MLGym task(s) go in `tasks` (v1 reserves `task` for the per-task config)."""

    mlgym_path: str = ""
    tasks: str | list[str] = ""
    container_names: list[str] = Field(default_factory=list)
    image: str | None = None
    containers: int = 1
    metric: str | None = None
    higher_is_better: bool | None = None
    metrics: dict[str, dict[str, Any]] = Field(default_factory=dict)
    max_turns: int = 30
    num_examples: int = 64
    trajectory_dir: str | None = None
    lock_dir: str | None = None
    short_timeout: float | None = None
    long_timeout: float | None = None
    container_wait: float = 60.0
    lease_timeout: float = 3600.0
    clip_negative_rewards: bool = False
    reward_scale: float = 1.0
    reward_mode: str = "final"
    failure_reward: float = -1.0
    admin_python: str = "auto"
    python_env: str | None = None
    evaluate_on_exit: bool = True
    footer: bool = True
    format_error_limit: int = 3
    user: str = "agent"
    home: str = "/home/agent"
    mlgym_mount: str | None = None
    network: str = "host"
    system_prompt_text: str | None = None  # v1 reserves `system_prompt` (a file path)
    shell_command: list[str] = Field(default_factory=lambda: ["/bin/bash", "-l"])
    setup_commands: list[str] = Field(default_factory=list)
    conda_env: str | None = "mlgym_generic"
    no_output_timeout: float | None = None
    window: int = 100
    max_observation_chars: int = 12_000
    pids_limit: int | None = 1024  # the task containers' limits (README "Limits")
    memory: str | None = "4g"
    cpus: float | None = 1.0
    disk: str | None = "8g"
    freeze: str = "auto"  # README "Freeze"

    def env_args(self) -> EnvArgs:
        fields = set(EnvArgs.__dataclass_fields__)
        dumped = self.model_dump()
        values = {
            k: v
            for k, v in dumped.items()
            if k in fields
            and k not in {"task", "system_prompt"}
            and not (k == "trajectory_dir" and v is None)
        }
        return EnvArgs.from_kwargs(
            task=dumped["tasks"], system_prompt=dumped["system_prompt_text"], **values
        )


class MLGymData(vf.TaskData):  # type: ignore[misc]
    task_id: str


class MLGymTask(vf.Task[MLGymData, vf.State, vf.TaskConfig]):  # type: ignore[misc]
    pass


class MLGymTaskset(vf.Taskset[MLGymTask, MLGymTasksetConfig]):  # type: ignore[misc]
    def load(self) -> Iterator[MLGymTask]:
        runner = _runner_for(self.config)
        for task_id in runner.tasks:
            system, user = runner.prompts(task_id)
            for i in range(runner.args.num_examples):
                yield MLGymTask(
                    MLGymData(
                        id=f"{task_id}#{i}",
                        name=task_id,
                        prompt=user,
                        system_prompt=system,
                        task_id=task_id,
                    ),
                    self.config.task,
                )


MODEL_TRANSPORT_ERROR_EXIT_CODE = 97  # verifiers.v1.errors: "model connection failed"


class MLGymChatHarnessConfig(vf.HarnessConfig):  # type: ignore[misc]
    pass


class MLGymChatHarness(Harness[MLGymChatHarnessConfig]):  # type: ignore[misc]
    """The model's side of an episode: one chat completion per segment, made in this process.

    verifiers runs one harness segment per `interaction.turn()`; the `null` harness's segment
    is a fresh chat-program process (python + openai/httpx/mcp imports, ~1.3 s on the
    development VM), which made the v1 path ~5x slower than the 0.3 one (README
    "Performance"). This harness sends the same request (the conversation so far, streamed,
    through the rollout's interception endpoint, so the trace records it exactly as the
    null harness's would) from the environment's own process, and resumes by replaying the
    conversation (verifiers' default `resume`)."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def setup(self, runtime: Any) -> None:
        return None

    async def launch(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: Any,
        tool_interception_url: str | None = None,
    ) -> ProgramResult:
        from openai import AsyncOpenAI, OpenAIError

        system_prompt, prompt = self.resolve_prompt(data)
        messages: list[Any] = []
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages.extend(message_to_wire(message) for message in prompt)
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=2)
        try:
            stream = await client.chat.completions.create(
                model=ctx.model,
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
            )
            async for _ in stream:
                pass
        except OpenAIError as e:
            return ProgramResult(
                exit_code=MODEL_TRANSPORT_ERROR_EXIT_CODE, stdout="", stderr=str(e)
            )
        finally:
            await client.close()
        return ProgramResult(exit_code=0, stdout="", stderr="")


class MLGymEnvConfig(vf.EnvConfig):  # type: ignore[misc]
    # The policy: a plain chat exchange (no tools, no code run by the harness itself), the
    # request made in this process (MLGymChatHarness); the task container is ours.
    agent: vf.AgentConfig = vf.AgentConfig(
        harness={"id": "air-mlgym"}, runtime={"type": "subprocess"}
    )


class MLGymEnv(vf.Env[MLGymEnvConfig]):  # type: ignore[misc]
    async def run(self, task: Any, agents: Any) -> None:
        runner = _runner_for(self.taskset.config)
        task_id = task.data.task_id
        lease = await _acquire(runner)
        if lease is None:
            reason = (
                f"no task container became free within lease_timeout "
                f"({runner.args.lease_timeout:g}s)"
            )
            report_episode(ok=False, task=task_id, error=reason, end_reason="no_container_free")
            raise _env_error(f"air-mlgym: {reason}")
        episode = runner.new_episode(task_id, lease, meta={"task_name": task.data.id})
        served = False
        try:
            served = await asyncio.to_thread(episode.reset)
            if not served:
                await asyncio.to_thread(episode.finish)  # saves the trajectory
        finally:
            if not served:
                lease.release()
        if not served:  # before any model turn: nothing to train on, an errored rollout
            raise _env_error(f"air-mlgym: {episode.error}")
        try:
            async with agents.agent.interaction(task) as interaction:
                segment = await interaction.turn()
                turns = 1
                while not segment.terminated:
                    if episode is None:
                        break  # no container free: the one model turn ends the exchange
                    result = await asyncio.to_thread(episode.step, segment.last_reply)
                    # The episode counts its steps (format errors do not use one, as in
                    # MLGym); the turn cap only bounds a run of format errors.
                    if result.done or turns >= runner.max_model_turns:
                        break  # finish() below evaluates an unsubmitted episode once more
                    segment = await interaction.turn(result.observation)
                    turns += 1
            trace = interaction.trace
        finally:
            if episode is not None:
                try:
                    await asyncio.to_thread(episode.finish)
                except Exception:  # never fail the episode while finishing
                    logger.exception("air-mlgym: finishing episode %s failed", episode.episode_id)
            if lease is not None:
                lease.release()
        total = episode.total_reward if episode is not None else 0.0
        error = (
            f"no task container became free within lease_timeout "
            f"({runner.args.lease_timeout:g}s)"
            if episode is None
            else episode.error
        )
        trace.info["air_mlgym"] = {
            "task_id": task_id,
            "container": None if lease is None else lease.name,
            "end_reason": "no_container_free" if episode is None else episode.end_reason,
            "submitted": bool(episode and episode.submitted),
            "best": None if episode is None else episode.tracker.best,
            "baseline": None if episode is None else episode.tracker.baseline,
            "error": error,
        }
        if error is not None:
            # An episode the environment could not serve is an errored rollout (`ok` false,
            # the error on the episode), never a reward of 0 trained on.
            raise _env_error(f"air-mlgym: {error}")
        trace.record_reward(REWARD_NAME, total, 1.0)

    async def stop(self) -> None:
        for runner in _RUNNERS.values():
            await asyncio.to_thread(runner.close)
        _RUNNERS.clear()


_RUNNERS: dict[str, MLGymRunner] = {}


def _env_error(message: str) -> Exception:
    try:
        from verifiers.v1.errors import EnvError
    except ImportError:  # a verifiers without the error vocabulary: its boundary wraps any
        return RuntimeError(message)
    return EnvError(message)  # type: ignore[no-any-return]


def _runner_for(config: MLGymTasksetConfig) -> MLGymRunner:
    """One runner (containers, leases, sessions) per distinct taskset config in a process."""
    key = config.model_dump_json()
    runner = _RUNNERS.get(key)
    if runner is None:
        runner = MLGymRunner(config.env_args())
        _RUNNERS[key] = runner
    return runner


async def _acquire(runner: MLGymRunner) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + runner.args.lease_timeout
    while True:
        lease = await asyncio.to_thread(runner.try_acquire)
        if lease is not None or loop.time() >= deadline:
            return lease
        await asyncio.sleep(0.5)
