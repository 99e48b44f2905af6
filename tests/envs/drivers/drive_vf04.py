"""Drive one air-mlgym episode through verifiers 0.4 (v1 API), the way current prime-rl loads a
taskset: resolve the env config for taskset id "air-mlgym" (the package's exported Env and
Taskset), then run one episode against an OpenAI-compatible endpoint.
Run with a venv's python: drive_vf04.py CONFIG.json OUT.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from scripted_openai import ScriptedOpenAI, container_stopper


async def main(config: dict[str, Any]) -> dict[str, Any]:
    import verifiers
    import verifiers.v1 as vf
    from verifiers.v1.clients import ModelContext

    env_config = vf.resolve_env_config({"taskset": {"id": "air-mlgym", **config["env_args"]}})
    env = vf.load_environment(env_config)
    if "episodes" in config:  # several scripted episodes in a row, one per task
        return await run_episodes(verifiers, vf, ModelContext, env, config["episodes"])
    task = next(iter(env.taskset))
    with ScriptedOpenAI(config["replies"], container_stopper(config)) as server:
        os.environ["SCRIPTED_API_KEY"] = "unused"
        client = vf.EvalClientConfig(base_url=server.base_url, api_key_var="SCRIPTED_API_KEY")
        ctx = ModelContext(model="scripted", client=client)
        async with env.serving():
            episode = await env.run_episode(task, ctx)
        requests = server.requests
    traces = list(episode.traces)
    trace = traces[0] if traces else None
    return {
        "verifiers": verifiers.__version__,
        "env_class": type(env).__name__,
        "taskset_class": type(env.taskset).__name__,
        "ok": episode.ok,
        "errors": [e.model_dump() if hasattr(e, "model_dump") else str(e) for e in episode.errors],
        "reward": None if trace is None else trace.reward,
        "rewards": None if trace is None else trace.rewards,
        "info": None if trace is None else trace.info.get("air_mlgym"),
        "num_turns": None if trace is None else trace.num_turns,
        "requests": len(requests),
        "last_request_messages": requests[-1]["messages"] if requests else [],
    }


async def run_episodes(
    verifiers: Any, vf: Any, context: Any, env: Any, episodes: list[Any]
) -> dict[str, Any]:
    """One episode per {"task_id", "replies"}, on the taskset's task of that MLGym task."""
    tasks = {t.data.task_id: t for t in env.taskset}
    results = []
    os.environ["SCRIPTED_API_KEY"] = "unused"
    async with env.serving():
        for spec in episodes:
            with ScriptedOpenAI(spec["replies"]) as server:
                client = vf.EvalClientConfig(
                    base_url=server.base_url, api_key_var="SCRIPTED_API_KEY"
                )
                ctx = context(model="scripted", client=client)
                episode = await env.run_episode(tasks[spec["task_id"]], ctx)
            traces = list(episode.traces)
            trace = traces[0] if traces else None
            results.append(
                {
                    "task_id": spec["task_id"],
                    "ok": episode.ok,
                    "reward": None if trace is None else trace.reward,
                    "info": None if trace is None else trace.info.get("air_mlgym"),
                }
            )
    return {"verifiers": verifiers.__version__, "episodes": results}


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:
        cfg = json.load(handle)
    result = asyncio.run(main(cfg))
    with open(sys.argv[2], "w") as handle:
        json.dump(result, handle, indent=2, default=str)
