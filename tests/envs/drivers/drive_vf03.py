"""Drive one air-mlgym episode through verifiers 0.3.x (MultiTurnEnv), the way prime-rl's
legacy path does: `vf.load_environment(id, **args)`, then `run_rollout` against an OpenAI
client. Run with a venv's python: drive_vf03.py CONFIG.json OUT.json.

CONFIG: {"env_args": {...}, "replies": [...]}. OUT: reward, metrics, error, stop condition,
completion (as role/content pairs) and the requests the scripted model received.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from scripted_openai import ScriptedOpenAI, container_stopper


def plain(message: Any) -> dict[str, Any]:
    if hasattr(message, "model_dump"):
        message = message.model_dump()
    return {"role": message.get("role"), "content": message.get("content")}


async def main(config: dict[str, Any]) -> dict[str, Any]:
    import verifiers as vf
    from verifiers.types import ClientConfig

    env = vf.load_environment("air-mlgym", **config["env_args"])
    if "episodes" in config:  # several scripted episodes in a row, one per task
        return await run_episodes(vf, ClientConfig, env, config["episodes"])
    row = dict(env.get_dataset(n=1)[0])
    with ScriptedOpenAI(config["replies"], container_stopper(config)) as server:
        os.environ["SCRIPTED_API_KEY"] = "unused"
        client = ClientConfig(
            api_base_url=server.base_url, api_key_var="SCRIPTED_API_KEY", max_retries=0
        )
        group = int(config.get("group", 1))
        if group == 1:
            output = await env.run_rollout(
                input=row, client=client, model="scripted", sampling_args={},
                state_columns=["air_mlgym"],
            )  # fmt: skip
            outputs = [output]
        else:  # concurrent rollouts of one example, as prime-rl's rollouts_per_example
            outputs = await env.run_group(
                group_inputs=[dict(row) for _ in range(group)], client=client,
                model="scripted", sampling_args={}, state_columns=["air_mlgym"],
            )  # fmt: skip
            output = outputs[0]
        requests = server.requests
    await env._teardown()
    error = output.get("error")
    return {
        "verifiers": vf.__version__,
        "reward": output["reward"],
        "metrics": output.get("metrics"),
        "error": None if error is None else str(error),
        "stop_condition": output.get("stop_condition"),
        "is_completed": output.get("is_completed"),
        "completion": [plain(m) for m in output.get("completion") or []],
        "summary": output.get("air_mlgym"),
        "group": [
            {
                "reward": o["reward"],
                "error": None if o.get("error") is None else str(o["error"]),
                "summary": o.get("air_mlgym"),
            }
            for o in outputs
        ],
        "requests": len(requests),
        "last_request_messages": [plain(m) for m in requests[-1]["messages"]] if requests else [],
    }


async def run_episodes(
    vf: Any, client_config: Any, env: Any, episodes: list[Any]
) -> dict[str, Any]:
    """One rollout per {"task_id", "replies"}, on the dataset row of that task."""
    rows = {dict(r)["info"]["task_id"]: dict(r) for r in env.get_dataset()}
    results = []
    os.environ["SCRIPTED_API_KEY"] = "unused"
    for spec in episodes:
        with ScriptedOpenAI(spec["replies"]) as server:
            client = client_config(
                api_base_url=server.base_url, api_key_var="SCRIPTED_API_KEY", max_retries=0
            )
            output = await env.run_rollout(
                input=dict(rows[spec["task_id"]]), client=client, model="scripted",
                sampling_args={}, state_columns=["air_mlgym"],
            )  # fmt: skip
        error = output.get("error")
        results.append(
            {
                "task_id": spec["task_id"],
                "reward": output["reward"],
                "error": None if error is None else str(error),
                "summary": output.get("air_mlgym"),
            }
        )
    await env._teardown()
    return {"verifiers": vf.__version__, "episodes": results}


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:
        cfg = json.load(handle)
    result = asyncio.run(main(cfg))
    with open(sys.argv[2], "w") as handle:
        json.dump(result, handle, indent=2, default=str)
