"""The demo's resolution of a run's halves (issue 30): what the demo's `rl` stand-in would start
as the inference server alone and as `rl` without [inference], given to airvisor as prime-rl's
own resolver gives it (`airvisor/primerl/resolve_config.py --split`), but labelled as the
demo's: `"resolver": "airvisor-demo"`.

The demo profile names it as its "prime-rl interpreter" (`[prime_rl] python`), so a demo run
keeps its inference server across a trainer or orchestrator failure as a real one does:
airvisor calls `<python> <resolve_config.py> --version V --cwd DIR [--split] -- <rl args>`, and
this stand-in ignores the script path and reads the args with the `rl` stand-in's own lenient
reading (`airvisor/demo/_rl.py`). Without `--split` it answers with no halves, and airvisor
reads the run's facts from the files itself either way (it says so: the demo is not prime-rl).

The same refusals as prime-rl's derivation where they apply to the demo: no [inference], an
orchestrator client not on the server's port, and a rest the stand-in reads differently.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from airvisor.demo._layout import DemoVersion
from airvisor.demo._rl import Resolved, lenient_config, resolve_main_lenient, resolve_v04_lenient
from airvisor.primerl._resolve import DEMO_RESOLVER


def _refusal(code: str, detail: str) -> dict[str, str]:
    return {"code": code, "detail": f"{detail} (the demo's resolution)"}


def _resolve(version: DemoVersion, config: Mapping[str, Any]) -> Resolved:
    return resolve_v04_lenient(config) if version == "0.4" else resolve_main_lenient(config)


def _differences(left: Any, right: Any, where: str = "") -> list[str]:
    if isinstance(left, dict) and isinstance(right, dict):
        out: list[str] = []
        for key in sorted(set(left) | set(right)):
            out += _differences(left.get(key), right.get(key), f"{where}.{key}" if where else key)
        return out
    return [] if left == right else [where or "<root>"]


def _client_url(version: DemoVersion, orchestrator: Mapping[str, Any]) -> str:
    if version == "0.4":
        urls = (orchestrator.get("client") or {}).get("base_url") or ["http://localhost:8000/v1"]
        return str(urls[0] if isinstance(urls, list) else urls)
    return str(((orchestrator.get("model") or {}).get("client") or {}).get(
        "base_url", "http://localhost:8000/v1"))


def split(version: DemoVersion, args: Sequence[str]) -> dict[str, Any]:
    """The halves as the demo's `rl` stand-in would start them, or why not."""
    full = _resolve(version, lenient_config(args))
    inference = full.components.get("inference")
    if not isinstance(inference, dict):
        return {"inference": None, "rest": None,
                "refusals": [_refusal("no_inference", "the config starts no inference server")]}
    refusals: list[dict[str, str]] = []
    server = inference.get("server") or {}
    port = int(server.get("port", 8000))
    url = _client_url(version, full.components["orchestrator"])
    if urlparse(url).port != port:
        refusals.append(_refusal("client_elsewhere", f"the orchestrator's client {url} is not "
                                                     f"on the server's port {port}"))
    rest = copy.deepcopy(full.rl)
    rest.pop("inference", None)
    again = _resolve(version, rest)
    diffs = [f"{name}.{key}" for name in ("trainer", "orchestrator")
             for key in _differences(full.components[name], again.components[name])]
    if diffs:
        refusals.append(_refusal("rest_differs", "without [inference] the demo's `rl` reads the "
                                                 f"rest differently: {', '.join(diffs[:20])}"))
    if version == "0.4":  # the stand-in's rl: inference_gpu_ids, TOML sub-configs
        gpus = list(full.rl.get("inference_gpu_ids") or [0])
        half: dict[str, Any] = {"config": inference, "format": "toml"}
        rest_half: dict[str, Any] = {"config": rest, "format": "toml", "env": {}}
    else:  # the stand-in's rl_local: the trimmed inference.json, JSON configs
        deployment = full.rl.get("deployment") or {}
        num_infer = int(deployment.get("num_infer_gpus", 1))
        gpus = list(range(num_infer))
        trimmed = {k: v for k, v in inference.items()
                   if k not in {"deployment", "slurm", "output_dir", "dry_run"}}
        half = {"config": trimmed, "format": "json"}
        trainer_gpus = list(range(num_infer, num_infer + int(deployment.get("num_train_gpus", 1))))
        rest_half = {"config": rest, "format": "json",
                     "env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, trainer_gpus))}}
    half |= {"env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}, "gpus": gpus,
             "host": server.get("host"), "port": port}
    return {"inference": half, "rest": rest_half, "refusals": refusals}


def main(argv: Sequence[str], version: DemoVersion) -> int:
    """`resolve <script> --version V --cwd DIR [--split] -- <rl args>`: one JSON line."""
    args = list(argv)
    if "--" not in args:
        sys.stderr.write("resolve: error: missing `--` before the rl arguments\n")
        return 2
    own, rl_args = args[: args.index("--")], args[args.index("--") + 1:]
    if "--cwd" in own and own.index("--cwd") + 1 < len(own):
        os.chdir(own[own.index("--cwd") + 1])  # the launcher's cwd: relative `@` files
    if "--version" in own and own.index("--version") + 1 < len(own):
        named = own[own.index("--version") + 1]
        version = "0.4" if named == "0.4" else "main"
    payload: dict[str, Any] = {"ok": True, "resolver": DEMO_RESOLVER}
    if "--split" in own:
        payload["split"] = split(version, rl_args)
    sys.stdout.write(json.dumps(payload) + "\n")
    return 0

