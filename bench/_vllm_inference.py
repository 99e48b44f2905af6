"""Bench only: prime-rl v0.4's `inference` console script, serving through a real vLLM (CPU build).

`bench/kept_inference_bench.py --real-vllm` installs this as the `inference` of its prime-rl
venv-shaped folder (tests/launchers.py), so both ways a run starts its server reach it:
airvisor's split (`<venv>/bin/inference @ <file>`, airvisor/primerl/_split.py) and v0.4's own
`rl` (`uv run inference @ <file>`, v0.4 rl.py:611-613). It reads the inference config as
prime-rl's `inference` does (`@ file`, v0.4 inference/server.py:6) and replaces itself (exec:
the pid airvisor recorded stays the server's) with vLLM's OpenAI API server, the options taken
as v0.4's `InferenceConfig.to_vllm` maps them (inference/config.py:231-252): `server.host`,
`server.port`, `model.max_model_len`; vLLM serves under `model.name`, as it would, but loads the
tiny test model of the vLLM venv (no model hub here: the name is no model it could load).

What prime-rl's own server adds on top of vLLM's is absent: its `/update_weights` and
`/reload_weights` routes (v0.4 inference/vllm/server.py:68-82) answer 404, which v0.4's client
logs and skips (utils/client.py:221-224,246-249), as the orchestrator stand-in does.

    python bench/_vllm_inference.py --vllm-venv DIR @ inference.toml
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

# As tests/reaper/scenarios/vllm_server.py starts it (../shared/notes/vllm-cpu.md): a 1 GiB KV
# cache, one OpenMP thread (two cores, shared with the trainer and orchestrator), nothing
# fetched or reported over the network.
VLLM_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1",
            "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
DEFAULT_MAX_MODEL_LEN = 512  # the bench's seq_len (tests/box/conftest.py demo_rl_config)


def vllm_argv(venv: Path, config: dict[str, Any]) -> list[str]:
    """The vLLM API server's command line for prime-rl's inference config `config`."""
    model = config.get("model", {})
    server = config.get("server", {})
    argv = [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(venv / "tiny-model"),
            "--served-model-name", str(model.get("name", "tiny-model")),
            "--port", str(server.get("port", 8000)),
            "--max-model-len", str(model.get("max_model_len") or DEFAULT_MAX_MODEL_LEN),
            # the CPU build: no CUDA graphs to capture; the tiny model is stored in float32
            "--enforce-eager", "--dtype", "float32"]
    if server.get("host"):
        argv += ["--host", str(server["host"])]
    return argv


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="inference")
    parser.add_argument("--vllm-venv", type=Path, required=True)
    parser.add_argument("config", nargs=2, metavar=("@", "FILE"))
    args = parser.parse_args(argv)
    at, file = args.config
    if at != "@":
        parser.error("expected `@ FILE` (prime-rl's config-file form)")
    config = tomllib.loads(Path(file).read_text())
    command = vllm_argv(args.vllm_venv, config)
    env = {**os.environ, **VLLM_ENV}
    # airvisor's checkout on the path would shadow nothing of vLLM's, but keep its imports clean.
    env.pop("PYTHONPATH", None)
    print(f"bench inference: exec {' '.join(command)}", flush=True)
    os.execve(command[0], command, env)
    return 1  # not reached: execve replaced this process


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
