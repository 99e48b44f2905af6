"""Adapter for the verifiers 0.3.x MultiTurnEnv API (what prime-rl up to v0.8 loads through
`[[orchestrator.env]]`). Imported only by `load_environment`, so the core needs no verifiers.

What the seeds got wrong, and how it is handled here:
- completions are lists of messages (dicts or pydantic messages), never strings: the reply is
  read with `last_assistant_text`, which accepts both and content-part lists;
- an episode the environment could not serve (no container, a reset or an evaluation that
  cannot run) is an errored rollout: `vf.InfraError` from `setup_state` / `env_response`, or
  `state["error"]` set in cleanup, which verifiers 0.3 reports (and prime-rl masks out), never
  a reward of 0 trained on; the agent's own failures are rewards, not errors;
- the reward is the episode's summed metric improvement, so it is not always zero.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import verifiers as vf
from datasets import Dataset

from air_mlgym._core import EnvArgs, MLGymRunner, last_assistant_text
from air_mlgym._episode import Episode
from air_mlgym._report import report_episode

logger = logging.getLogger(__name__)

STATE_KEY = "air_mlgym"


def _summary(state: Any) -> dict[str, Any]:
    value = state.get(STATE_KEY)
    return value if isinstance(value, dict) else {}


def _user(content: str) -> list[Any]:
    """One user message, typed when this verifiers has message classes (avoids re-validation)."""
    message_cls = getattr(vf, "UserMessage", None)
    if message_cls is not None:
        try:
            return [message_cls(content=content)]
        except Exception:  # an older verifiers with a different message model: plain dicts
            pass
    return [{"role": "user", "content": content}]


def _infra_error(message: str) -> Exception:
    """verifiers 0.3's error for infrastructure trouble (`vf.InfraError`), which its rollout
    loop records as `state["error"]` and stops on."""
    cls = getattr(vf, "InfraError", None) or getattr(vf, "Error", None) or RuntimeError
    return cls(f"air-mlgym: {message}")


def mlgym_reward(state: Any) -> float:
    """Summed improvement of the task metric over the episode (baseline first)."""
    return float(_summary(state).get("total_reward", 0.0))


def mlgym_submitted(state: Any) -> float:
    return 1.0 if _summary(state).get("submitted") else 0.0


def mlgym_container_lost(state: Any) -> float:
    return 1.0 if _summary(state).get("end_reason") == "container_unavailable" else 0.0


class MLGymMultiTurnEnv(vf.MultiTurnEnv):  # type: ignore[misc]
    def __init__(self, runner: MLGymRunner, **kwargs: Any) -> None:
        self.runner = runner
        self._episodes: dict[str, tuple[Episode, Any]] = {}
        rows = []
        for task_id in runner.tasks:
            system, user = runner.prompts(task_id)
            for _ in range(runner.args.num_examples):
                rows.append(
                    {
                        "prompt": [
                            {"role": "system", "content": system},
                            {"role": "user", "content": user},
                        ],
                        "answer": "",
                        "info": {"task_id": task_id},
                    }
                )
        rubric = vf.Rubric(funcs=[mlgym_reward], weights=[1.0])
        rubric.add_metric(mlgym_submitted)
        rubric.add_metric(mlgym_container_lost)
        super().__init__(
            dataset=Dataset.from_list(rows),
            rubric=rubric,
            # The episode counts its steps itself (format errors do not use one, as in
            # MLGym) and ends with a final response; this only bounds the model turns.
            max_turns=runner.max_model_turns,
            **kwargs,
        )

    async def setup_state(self, state: Any, **kwargs: Any) -> Any:
        info = state.get("info") or {}
        task_id = info.get("task_id") if isinstance(info, dict) else None
        if task_id not in self.runner.tasks:
            task_id = next(iter(self.runner.tasks))
        # Our own key for this rollout's episode (not every verifiers sets a trajectory id).
        summary: dict[str, Any] = {
            "task_id": task_id,
            "total_reward": 0.0,
            "rollout_key": uuid.uuid4().hex,
        }
        state[STATE_KEY] = summary
        try:
            lease = await self._acquire()
        except Exception as e:  # docker not reachable at all
            logger.exception("air-mlgym: cannot lease a container")
            summary.update(end_reason="container_unavailable", error=str(e))
            report_episode(ok=False, task=task_id, error=f"cannot lease a task container: {e}",
                           end_reason="container_unavailable")
            raise _infra_error(f"cannot lease a task container: {e}") from e
        if lease is None:
            summary.update(end_reason="no_container_free")
            reason = (
                f"no task container became free within lease_timeout "
                f"({self.runner.args.lease_timeout:g}s)"
            )
            report_episode(ok=False, task=task_id, error=reason, end_reason="no_container_free")
            raise _infra_error(reason)
        episode = self.runner.new_episode(
            task_id, lease, meta={"trajectory_id": state.get("trajectory_id")}
        )
        self._episodes[summary["rollout_key"]] = (episode, lease)
        summary["container"] = lease.name
        summary["episode_id"] = episode.episode_id
        if not await asyncio.to_thread(episode.reset):
            summary.update(end_reason=episode.end_reason, error=episode.error)
            raise _infra_error(str(episode.error))  # cleanup still finishes the episode
        return state

    async def _acquire(self) -> Any:
        deadline = asyncio.get_running_loop().time() + self.runner.args.lease_timeout
        while True:
            lease = await asyncio.to_thread(self.runner.try_acquire)
            if lease is not None or asyncio.get_running_loop().time() >= deadline:
                return lease
            await asyncio.sleep(0.5)

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
        entry = self._episodes.get(_summary(state).get("rollout_key", ""))
        if entry is None:
            reason = _summary(state).get("end_reason", "no_container_free")
            observation = (
                f"No task container is available ({reason}); this episode ends here. "
                "No action is needed."
            )
            response = _user(observation)
            state["final_env_response"] = response
            return response
        episode, _ = entry
        reply = last_assistant_text(messages)
        result = await asyncio.to_thread(episode.step, reply)
        summary = _summary(state)
        summary["total_reward"] = episode.total_reward
        if episode.error is not None:
            summary.update(end_reason=episode.end_reason, error=episode.error)
            raise _infra_error(episode.error)
        response = _user(result.observation)
        if result.done:
            state["final_env_response"] = response
        return response

    @vf.cleanup  # type: ignore[untyped-decorator]
    async def finish_episode(self, state: Any) -> None:
        entry = self._episodes.pop(_summary(state).get("rollout_key", ""), None)
        if entry is None:
            return
        episode, lease = entry
        try:
            await asyncio.to_thread(episode.finish, state.get("stop_condition"))
        except Exception:  # never fail the rollout in cleanup
            logger.exception("air-mlgym: finishing episode %s failed", episode.episode_id)
        finally:
            lease.release()
        _summary(state).update(
            total_reward=episode.total_reward,
            best=episode.tracker.best,
            baseline=episode.tracker.baseline,
            submitted=episode.submitted,
            end_reason=episode.end_reason,
            turns=len(episode.steps),
            error=episode.error,
        )
        if episode.error is not None and state.get("error") is None:
            # e.g. the end-of-episode evaluation could not run: the rollout is errored
            state["error"] = _infra_error(episode.error)

    @vf.teardown  # type: ignore[untyped-decorator]
    async def close_containers(self) -> None:
        # Called from atexit too, when no executor threads can start: close synchronously.
        try:
            self.runner.close()
        except Exception:
            logger.exception("air-mlgym: closing containers failed")


def load_environment_vf03(args: EnvArgs, **env_kwargs: Any) -> MLGymMultiTurnEnv:
    return MLGymMultiTurnEnv(MLGymRunner(args), **env_kwargs)
