"""resolve_config.py against prime-rl's own code (v0.4.0 and main, from ../shared/third_party).

Every shipped user config resolves with the parser of the version it declares, fresh and resumed
at step 5; what prime-rl refuses is refused with prime-rl's own error location; the script writes
nothing outside its temporary directory; stdout is one JSON object in every case.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
RESOLVER = REPO / "airvisor" / "primerl" / "resolve_config.py"

pytestmark = pytest.mark.timeout(600)

# The shipped users' configs, with the command line each runs with (what follows `rl`) and
# what prime-rl must make of it. The GPU lists of swe_grep come from the profile
# (configs/swe_grep.toml); dakota's command line is seed 003's.
SHIPPED: dict[str, dict[str, Any]] = {
    "rl_debug": {
        "version": "0.4",
        "args": ["@", "configs/rl_debug/rl.toml"],
        "facts": {"max_steps": 10, "ckpt_interval": 5, "keep_last": 2,
                  "inference_gpu_ids": [0], "trainer_gpu_ids": [2, 3, 4, 5, 6]},
    },
    "rl": {
        "version": "0.4",
        "args": ["@", "configs/rl/rl.toml"],
        "facts": {"max_steps": 200, "ckpt_interval": 5, "keep_last": 3,
                  "inference_gpu_ids": [0], "trainer_gpu_ids": [2, 3, 4, 5, 6]},
    },
    "demo": {
        "version": "0.4",
        "args": ["@", "configs/demo/rl.toml"],
        "facts": {"max_steps": 30, "ckpt_interval": 5, "inference_port": 18000,
                  "client_base_urls": ["http://localhost:18000/v1"]},
    },
    "dakota": {
        "version": "0.4",
        "args": ["--trainer", "@", "configs/dakota/train.toml",
                 "--orchestrator", "@", "configs/dakota/orch.toml",
                 "--inference", "@", "configs/dakota/infer.toml",
                 "--inference-gpu-ids", "0,1,2,3,4,5", "--trainer-gpu-ids", "6,7",
                 "--inference.parallel.dp", "6",
                 "--output-dir", "outputs/dakota-v12-1000steps"],
        "facts": {"max_steps": 1000, "ckpt_interval": 10, "keep_last": 3,
                  "inference_gpu_ids": [0, 1, 2, 3, 4, 5], "trainer_gpu_ids": [6, 7]},
    },
    "swe_grep": {
        "version": "0.4",
        "args": ["--trainer", "@", "configs/swe_grep/train.toml",
                 "--orchestrator", "@", "configs/swe_grep/orch.toml",
                 "--inference", "@", "configs/swe_grep/infer.toml",
                 "--inference-gpu-ids", "[0]", "--trainer-gpu-ids", "[0]"],
        "facts": {"max_steps": 5, "inference_gpu_ids": [0], "trainer_gpu_ids": [0]},
    },
    "mlgym": {
        "version": "main",
        "args": ["@", "configs/mlgym/rl.toml"],
        "facts": {"max_steps": 100, "ckpt_interval": 5, "keep_last": 3, "num_infer_gpus": 1,
                  "num_train_gpus": 5, "run_name": "mlgym", "run_name_generated": False},
    },
}
RESUME_FLAG = {"0.4": ["--ckpt.resume-step", "5"], "main": ["--resume.step", "5"]}


@pytest.mark.slow
@pytest.mark.parametrize("resume", [False, True], ids=["fresh", "resume5"])
@pytest.mark.parametrize("name", list(SHIPPED))
def test_shipped_config_resolves(resolve: Any, name: str, resume: bool) -> None:
    spec = SHIPPED[name]
    version = spec["version"]
    args = [*spec["args"], *(RESUME_FLAG[version] if resume else [])]
    result = resolve(version, args)
    assert result.ok, f"prime-rl {version} refuses {name}: {result.payload}"
    assert result.payload["version"] == version
    facts = result.facts
    for key, expected in spec["facts"].items():
        assert facts[key] == expected, (key, facts[key])
    assert facts["resume_step"] == (5 if resume else None)
    components = result.payload["components"]
    assert components["trainer"] and components["orchestrator"] and components["inference"]
    if version == "0.4":
        # rl.py:377-386: the orchestrator writes under <output_dir>/run_default
        assert facts["orchestrator_output_dir"] == facts["output_dir"] + "/run_default"
        assert components["orchestrator"]["output_dir"].endswith("/run_default")
        assert facts["log_files"]["trainer"] == facts["output_dir"] + "/logs/trainer.stdout"
        if resume:  # rl.py:278-281: the shared resume step reaches both halves
            assert components["trainer"]["ckpt"]["resume_step"] == 5
            assert components["orchestrator"]["ckpt"]["resume_step"] == 5
        assert facts["first_step"] == 0
    else:
        assert facts["run_dir"] == facts["output_dir"] + "/mlgym"
        assert components["trainer"]["output_dir"].endswith("/mlgym")
        assert facts["attempt_log_dir"].startswith(facts["run_dir"] + "/logs/attempt_")
        if resume:  # configs/rl.py auto_setup_resume
            assert components["trainer"]["resume"]["step"] == 5
            assert components["orchestrator"]["resume"]["step"] == 5
        assert facts["first_step"] == 1


@pytest.mark.slow
def test_v04_launcher_dumps_are_accepted_by_each_component(
    resolve: Any, tmp_path: Path
) -> None:
    """What v0.4's rl writes per component (rl.py:611,684,723, as TOML with tomli_w) parses
    with that component's own entry-point class."""
    tomli_w = pytest.importorskip("tomli_w")
    result = resolve("0.4", ["@", "configs/rl_debug/rl.toml"])
    assert result.ok, result.payload
    for component in ("trainer", "orchestrator", "inference"):
        path = tmp_path / f"{component}.toml"
        path.write_bytes(tomli_w.dumps(result.payload["components"][component]).encode())
        again = resolve("0.4", ["@", str(path)], component=component)
        assert again.ok, (component, again.payload)
        assert again.payload["components"][component] == result.payload["components"][component]


@pytest.mark.slow
def test_main_launcher_dumps_are_accepted_by_each_component(
    resolve: Any, tmp_path: Path
) -> None:
    """main's write_subconfigs output (trainer/orchestrator/inference JSON and one env-server
    JSON per source) parses with each entry point's class: the files `rl` starts them with."""
    result = resolve("main", ["@", "configs/mlgym/rl.toml"])
    assert result.ok, result.payload
    servers = result.payload["env_servers"]
    assert [(s["split"], s["name"], s["address"]) for s in servers] == [
        ("train", "mlgym", "tcp://127.0.0.1:5000")
    ]
    assert servers[0]["config"]["env"]["taskset"]["id"] == "air_mlgym"
    files = {
        "trainer": result.payload["components"]["trainer"],
        "orchestrator": result.payload["components"]["orchestrator"],
        "env-server": servers[0]["config"],
    }
    for component, content in files.items():
        path = tmp_path / f"{component}.json"
        path.write_text(json.dumps(content))
        again = resolve("main", ["@", str(path)], component=component)
        assert again.ok, (component, again.payload)
    assert result.facts["log_files"]["env_servers"] == {
        "train/mlgym": result.facts["attempt_log_dir"] + "/envs/train/mlgym.log"
    }


def _air_mlgym_args_check(python: Path, args: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    code = (
        "import json, sys; from air_mlgym import EnvArgs; "
        "EnvArgs.from_kwargs(**json.loads(sys.argv[1]))"
    )
    return subprocess.run(
        [str(python), "-c", code, json.dumps(args)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rl_debug", "rl"])
def test_v04_mlgym_env_args_are_accepted_by_air_mlgym(
    resolve: Any, primerl_main_python: Path, name: str
) -> None:
    """The [[orchestrator.env]] args of the v0.4 MLGym configs are accepted by the environment
    that loads them (air_mlgym's own argument check, which refuses unknown args)."""
    result = resolve("0.4", SHIPPED[name]["args"])
    assert result.ok, result.payload
    envs = result.payload["components"]["orchestrator"]["env"]
    assert [env["id"] for env in envs] == ["air_mlgym"]
    done = _air_mlgym_args_check(primerl_main_python, envs[0]["args"])
    assert done.returncode == 0, done.stderr
    refused = _air_mlgym_args_check(primerl_main_python, {**envs[0]["args"], "env_gpu": "7"})
    assert refused.returncode != 0 and "env_gpu" in refused.stderr


# --------------------------------------------------------------------------- refusals


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


DAKOTA = {
    "train": (REPO / "configs/dakota/train.toml").read_text(),
    "orch": (REPO / "configs/dakota/orch.toml").read_text(),
    "infer": (REPO / "configs/dakota/infer.toml").read_text(),
}


def _dakota_args(tmp_path: Path, **replace: str) -> list[str]:
    files = {key: _write(tmp_path / f"{key}.toml", replace.get(key, text))
             for key, text in DAKOTA.items()}
    return ["--trainer", "@", str(files["train"]), "--orchestrator", "@", str(files["orch"]),
            "--inference", "@", str(files["infer"]),
            "--inference-gpu-ids", "0,1,2,3,4,5", "--trainer-gpu-ids", "6,7"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "replace", "loc", "message_part"),
    [
        # seed 003's retention key: v0.4 has keep_last, and extra keys are forbidden
        ("ckpt_keep", {"train": "max_steps = 1000\n[ckpt]\ninterval = 10\nkeep = 3\n"},
         "trainer.ckpt.keep", "Extra inputs are not permitted"),
        # v0.4's ClientConfig.base_url is a list
        ("base_url_string",
         {"orch": DAKOTA["orch"] + '\n[client]\nbase_url = "http://localhost:8000/v1"\n'},
         "orchestrator.client.base_url", "valid list"),
        # rl.py:388-401: the trainer must take the orchestrator's sequences
        ("seq_len", {"train": DAKOTA["train"].replace("[model]\n", "[model]\nseq_len = 1024\n")},
         "", "seq_len"),
        # removed before v0.2 (seeds 003 and 004)
        ("mask_truncated_completions",
         {"orch": "mask_truncated_completions = false\n" + DAKOTA["orch"]},
         "orchestrator.mask_truncated_completions", "Extra inputs are not permitted"),
        # seed 004's LoRA table, removed before v0.2
        ("experimental_lora",
         {"train": DAKOTA["train"] + "\n[model.experimental.lora]\nrank = 4\n"},
         "trainer.model.experimental", "Extra inputs are not permitted"),
    ],
)
def test_v04_refuses(
    resolve: Any, tmp_path: Path, case: str, replace: dict[str, str], loc: str, message_part: str
) -> None:
    result = resolve("0.4", _dakota_args(tmp_path, **replace))
    assert result.code == 2, result.payload
    assert result.payload["ok"] is False
    assert loc in result.error_locs(), result.payload
    assert message_part in result.payload["message"]


@pytest.mark.slow
def test_v04_unknown_flag_refused_with_argparse_message(resolve: Any) -> None:
    # seed 003 passed `--trainer.ckpt.keep 3` on the command line
    result = resolve("0.4", ["@", "configs/rl_debug/rl.toml", "--trainer.ckpt.keep", "3"])
    assert result.code == 2
    assert result.payload["message"] == "rl: error: unrecognized arguments: --trainer.ckpt.keep 3"


@pytest.mark.slow
def test_main_refuses_v04_style_env(resolve: Any, tmp_path: Path) -> None:
    """main has no [[env]] / [[orchestrator.env]]: its environments are
    [[orchestrator.train.source]]."""
    overlay = _write(tmp_path / "env.toml", '[[orchestrator.env]]\nid = "air_mlgym"\n')
    result = resolve("main", ["@", "configs/mlgym/rl.toml", "@", str(overlay)])
    assert result.code == 2
    assert "orchestrator.env" in result.error_locs()
    top = _write(tmp_path / "top.toml", '[[env]]\nid = "air_mlgym"\n')
    result = resolve("main", ["@", "configs/mlgym/rl.toml", "@", str(top)])
    assert result.code == 2
    assert "env" in result.error_locs()


@pytest.mark.slow
def test_main_port_mismatch_refused(resolve: Any) -> None:
    """entrypoints/rl.py:163-173: rl refuses a client port that is not the server's."""
    result = resolve("main", ["@", "configs/mlgym/rl.toml", "--inference.server.port", "8001"])
    assert result.code == 2
    assert result.error_locs() == ["orchestrator.model.client.base_url"]
    assert "does not match inference.server.port (8001)" in result.payload["message"]


@pytest.mark.slow
def test_main_random_run_name(resolve: Any, tmp_path: Path) -> None:
    text = (REPO / "configs/mlgym/rl.toml").read_text().replace('[run]\nname = "mlgym"\n', "")
    config = _write(tmp_path / "rl.toml", text)
    result = resolve("main", ["@", str(config)])
    assert result.ok, result.payload
    assert result.facts["run_name_generated"] is True
    assert result.facts["run_name"].startswith("mlgym--qwen3-4b-instruct-2507--")


# --------------------------------------------------------------------------- v0.4 @ composition


@pytest.mark.slow
def test_v04_later_at_file_replaces_whole_tables(resolve: Any, tmp_path: Path) -> None:
    """pydantic-settings merges v0.4's @ files top-level key by top-level key (dict.update): an
    overlay with [orchestrator] drops every orchestrator key of the first file. airvisor must
    therefore pass overrides to v0.4 as CLI flags, which do merge."""
    overlay = _write(tmp_path / "over.toml", "[orchestrator]\nbatch_size = 16\n")
    replaced = resolve("0.4", ["@", "configs/rl_debug/rl.toml", "@", str(overlay)])
    assert replaced.ok, replaced.payload
    orchestrator = replaced.payload["components"]["orchestrator"]
    assert orchestrator["batch_size"] == 16
    assert orchestrator["rollouts_per_example"] == 1  # the default, not rl.toml's 4
    assert [env["id"] for env in orchestrator["env"]] == ["reverse-text"]  # default again
    merged = resolve("0.4", ["@", "configs/rl_debug/rl.toml", "--orchestrator.batch-size", "16"])
    orchestrator = merged.payload["components"]["orchestrator"]
    assert (orchestrator["batch_size"], orchestrator["rollouts_per_example"]) == (16, 4)


# --------------------------------------------------------------------------- the script itself


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.4", "main"])
def test_writes_nothing_outside_its_temp_dir(resolve: Any, tmp_path: Path, version: str) -> None:
    """Run from a directory holding the user's files with a relative output_dir, and with
    nested `--key @ file` (v0.4 writes .pydantic_config/ into the cwd for those): afterwards
    the cwd, the output dir and TMPDIR are exactly as before."""
    work = tmp_path / "work"
    temp = tmp_path / "tmp"
    work.mkdir()
    temp.mkdir()
    if version == "0.4":
        for name in ("train", "orch", "infer"):
            shutil.copy(REPO / f"configs/dakota/{name}.toml", work / f"{name}.toml")
        args = ["--trainer", "@", "train.toml", "--orchestrator", "@", "orch.toml",
                "--inference", "@", "infer.toml", "--output-dir", "outputs/run"]
    else:
        shutil.copy(REPO / "configs/mlgym/rl.toml", work / "rl.toml")
        args = ["@", "rl.toml", "--output-dir", "outputs"]
    before = _tree(work)
    env = {**os.environ, "TMPDIR": str(temp)}
    result = resolve(version, args, cwd=work, env=env)
    assert result.ok, result.payload
    assert result.facts["output_dir"].startswith(str(work) + "/outputs")
    assert _tree(work) == before
    assert not (work / "outputs").exists()
    assert list(temp.iterdir()) == []


def test_not_importable_exit_3(tmp_path: Path) -> None:
    """Under an interpreter without prime-rl (airvisor's own), exit 3 and say which."""
    done = subprocess.run(
        [sys.executable, str(RESOLVER), "--version", "0.4", "--", "@", "x.toml"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert done.returncode == 3
    payload = json.loads(done.stdout)
    assert payload["ok"] is False
    assert payload["message"].startswith(f"prime-rl is not importable with {sys.executable}:")
    assert "Traceback" not in done.stdout


def test_usage_error_is_json(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(RESOLVER), "--version", "0.4", "@", "x.toml"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert done.returncode == 4
    assert json.loads(done.stdout)["ok"] is False


def test_shipped_as_package_data() -> None:
    from importlib import resources

    script = resources.files("airvisor.primerl") / "resolve_config.py"
    assert script.is_file()
    assert Path(str(script)).resolve() == RESOLVER


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.4", "main"])
def test_unquoted_string_names_the_file(resolve: Any, tmp_path: Path, version: str) -> None:
    """Seed 003's TOML mistake (`name = Qwen/Qwen3-0.6B`): refused, naming the file and line."""
    bad = _write(tmp_path / "bad.toml", "[model]\nname = Qwen/Qwen3-0.6B\n")
    result = resolve(version, ["@", str(bad)])
    assert result.code == 2
    assert str(bad) in result.payload["message"]
    assert "line 2" in result.payload["message"]
