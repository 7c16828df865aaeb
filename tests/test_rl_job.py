"""The job folder `train` writes runs as printed, from any path; overrides are discoverable.

Ray and OpenRLHF cannot run here: the folder's ``command.sh`` is run by bash with stand-ins
for the ``ray`` and ``python3`` executables (named as such) that record their working
directory, environment and arguments; the arguments are then checked by OpenRLHF's own
parser and the files they name are opened from the moved folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import fill_batch

from parallelsearch.cli import main
from parallelsearch.demo_data import HOTPOTQA_SAMPLE
from parallelsearch.rl.agent_config import ENV_VAR, load_agent_config
from parallelsearch.rl.data import make_train_data
from parallelsearch.rl.openrlhf_cli import check_command
from parallelsearch.rl.openrlhf_command import openrlhf_args
from parallelsearch.rl.train_config import OPENRLHF_NAMES, TrainConfig, load_train_config, paper_preset

STANDIN = """#!/usr/bin/env bash
# stand-in for the {name} executable (parallelsearch: command.sh's check): records where and how it was
# called, and the runtime env file
{{ echo "cwd=$PWD"; echo "env=${{{env}:-}}"; printf 'arg=%s\\n' "$@"; }} > "$STANDIN_LOG"
prev=""; for a in "$@"; do [ "$prev" = --runtime-env ] && cp "$a" "$STANDIN_LOG.runtime_env"; prev="$a"; done
"""


def standins(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("ray", "python3", "parallelsearch"):
        p = bin_dir / name
        p.write_text(STANDIN.format(name=name, env=ENV_VAR))
        p.chmod(0o755)
    return bin_dir


def run_script(
    script: Path, tmp_path: Path, bin_dir: Path, **env: str
) -> tuple[Path, dict[str, str], list[str]]:
    log = tmp_path / "standin.log"
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STANDIN_LOG": str(log), **env}
    subprocess.run(["bash", str(script)], cwd=tmp_path, env=full, check=True, timeout=30)
    lines = log.read_text().splitlines()
    cwd = Path(lines[0].removeprefix("cwd="))
    return cwd, {"env": lines[1].removeprefix("env=")}, [x.removeprefix("arg=") for x in lines[2:]]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.fixture()
def train_data(tmp_path):
    data = tmp_path / "made" / "train.jsonl"
    # HotpotQA dev questions stand in for the train split here (no train split on this machine)
    make_train_data(
        [HOTPOTQA_SAMPLE], data, recipe="paper", template="official", limit=8, allow_eval_questions=True
    )
    return fill_batch(data)  # the checks --runner print runs refuse a file smaller than a rollout batch


def test_job_folder_moved_elsewhere_runs_as_printed(tmp_path, train_data, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    job = tmp_path / "job"
    argv = ["train", "--preset", "paper", "--runner", "print", "--skip-probe", "--set", f"job_dir={job}"]
    argv += ["--set", f"prompt_data={train_data}", "--set", f"save_path={tmp_path / 'ckpt'}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"run it as: bash {job / 'command.sh'}" in out
    assert "wandb: off (WANDB_API_KEY is not set" in out and "--logger.wandb" not in out
    moved = tmp_path / "elsewhere" / "moved-job"
    shutil.copytree(job, moved)
    shutil.rmtree(job)
    train_data.unlink()  # nothing may point back at the original files

    cwd, env, args = run_script(moved / "command.sh", tmp_path, standins(tmp_path))
    assert cwd == moved  # the script runs from its own folder, wherever it is
    assert args[:3] == ["job", "submit", "--address=http://127.0.0.1:8265"]
    assert flag(args, "--working-dir") == "."
    assert not any(a.startswith("--runtime-env-json") for a in args)
    runtime = yaml.safe_load((tmp_path / "standin.log.runtime_env").read_text())
    assert runtime == {"env_vars": {ENV_VAR: "parallelsearch_agent.yaml"}}  # no key was needed
    agent_file = runtime["env_vars"][ENV_VAR]
    ppo = args[args.index("openrlhf.cli.train_ppo_ray") + 1 :]
    # every file the command names resolves inside the moved folder (Ray's working_dir)
    named = [agent_file, flag(ppo, "--train.agent_func_path"), flag(ppo, "--data.prompt_dataset")]
    for name in named:
        assert not Path(name).is_absolute() and (moved / name).is_file(), name
    assert len((moved / flag(ppo, "--data.prompt_dataset")).read_text().splitlines()) == 512
    parsed = check_command(ppo)  # OpenRLHF's parser, argument checks and train() assertions
    assert parsed.data.apply_chat_template and parsed.ckpt.output_dir == str(tmp_path / "ckpt")
    agent = load_agent_config(moved / agent_file)
    assert agent.reward.mode == "paper-strict" and agent.graph_config.prompt_template == "official"
    resolved = load_train_config(moved / "train_config.yaml")
    # a job folder's config names its paths relative to the folder; read back, they are the folder's
    assert isinstance(resolved, TrainConfig) and resolved.job_dir == str(moved)
    assert resolved.prompt_data == str(moved / flag(ppo, "--data.prompt_dataset"))
    spec = importlib.util.spec_from_file_location(
        "agent_module", str(moved / flag(ppo, "--train.agent_func_path"))
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.AgentExecutor.__name__ == "AgentExecutor"


def test_wandb_key_comes_from_the_environment_never_a_literal(tmp_path, train_data, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_API_KEY", "k-123")
    job = tmp_path / "job"
    argv = ["train", "--preset", "paper", "--runner", "print", "--skip-probe", "--set", f"job_dir={job}"]
    assert main([*argv, "--set", f"prompt_data={train_data}", "--set", f"save_path={tmp_path / 'ckpt'}"]) == 0
    out = capsys.readouterr().out
    assert "wandb: on (WANDB_API_KEY from the environment, shipped in Ray's runtime env)" in out
    assert (
        "runtime env (command.sh writes it from its environment when it runs): PARALLELSEARCH_AGENT_CONFIG, WANDB_API_KEY"
        in out
    )
    script = (job / "command.sh").read_text()
    assert "--logger.wandb.key from-env:WANDB_API_KEY" in script and "k-123" not in script
    _, _, args = run_script(job / "command.sh", tmp_path, standins(tmp_path), WANDB_API_KEY="k-'456")
    # the key is in the runtime env (quoted as YAML), never on the Ray job's command line
    assert flag(args, "--logger.wandb.key") == "from-env:WANDB_API_KEY" and not any("456" in a for a in args)
    assert flag(args, "--logger.wandb.project") == "ParallelSearch"
    runtime = yaml.safe_load((tmp_path / "standin.log.runtime_env").read_text())
    assert runtime["env_vars"]["WANDB_API_KEY"] == "k-'456"
    # run without the key, the script stops with the fix instead of passing an empty key
    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    res = subprocess.run(
        ["bash", str(job / "command.sh")], env=env, capture_output=True, text=True, timeout=30
    )
    assert res.returncode != 0 and "export WANDB_API_KEY" in res.stderr
    # explicitly off, or on without a key
    assert main([*argv, "--set", f"prompt_data={train_data}", "--set", "wandb=off", "--dry-run"]) == 0
    assert "--logger.wandb" not in capsys.readouterr().out
    monkeypatch.delenv("WANDB_API_KEY")
    assert main([*argv, "--set", f"prompt_data={train_data}", "--set", "wandb=on", "--dry-run"]) == 2
    assert "wandb=on but no key: export WANDB_API_KEY" in capsys.readouterr().err


def test_python_runner_script_sets_absolute_paths(tmp_path, train_data, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    job = tmp_path / "job"
    argv = ["train", "--preset", "paper", "--runner", "print", "--skip-probe", "--set", f"job_dir={job}"]
    assert main([*argv, "--set", f"prompt_data={train_data}", "--set", f"save_path={tmp_path / 'c'}"]) == 0
    # --runner print writes the ray form; the python form is what `--runner python` writes and runs
    from parallelsearch.rl.launch import plan_job, write_job

    cfg = paper_preset(
        prompt_data=str(train_data), job_dir=str(tmp_path / "pyjob"), save_path=str(tmp_path / "c")
    )
    script = write_job(plan_job(cfg, "python"))
    moved = tmp_path / "pyjob-moved"
    shutil.copytree(script.parent, moved)
    cwd, env, args = run_script(moved / "command.sh", tmp_path, standins(tmp_path))
    assert cwd == moved and env["env"] == str(moved / "parallelsearch_agent.yaml")
    assert flag(args, "--train.agent_func_path") == str(moved / "parallelsearch_agent.py")
    assert (moved / flag(args, "--data.prompt_dataset")).is_file()


def test_large_data_is_not_copied_into_the_job(tmp_path, monkeypatch):
    import parallelsearch.rl.launch as launch

    data = tmp_path / "big.jsonl"
    data.write_text("x" * 2048)
    monkeypatch.setattr(launch, "COPY_LIMIT_BYTES", 1024)
    with pytest.raises(ValueError, match="copy_data: the data files hold .* set copy_data=false"):
        launch.plan_job(paper_preset(prompt_data=str(data), job_dir=str(tmp_path / "j")))
    job = launch.plan_job(paper_preset(prompt_data=str(data), job_dir=str(tmp_path / "j"), copy_data=False))
    assert job.config.prompt_data == str(data) and not job.copies


# -- discoverable overrides ------------------------------------------------------------------


def test_list_keys_shows_types_defaults_and_aliases(capsys):
    assert main(["train", "--list-keys"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^agent\.search_failures\.max_share +float  = 0\.01  # ", out, re.M)
    modes = r"Literal\['paper', 'paper-strict', 'official', 'dag'\]"
    assert re.search(rf"^agent\.reward\.mode +{modes}  = 'paper-strict'  # ", out, re.M)
    assert re.search(r"^n_samples_per_prompt +int  = 1$", out, re.M)
    assert "grpo -> group_norm" in out and "rollout.batch_size" in out
    assert main(["train", "--list-keys", "--preset", "paper"]) == 0
    out = capsys.readouterr().out
    modes = r"Literal\['paper', 'paper-strict', 'official', 'dag'\]"
    assert re.search(rf"^agent\.reward\.mode +{modes}  = 'paper-strict'  # ", out, re.M)
    assert re.search(r"^apply_chat_template +bool  = True", out, re.M)


def test_unknown_keys_get_suggestions_and_grpo_maps_to_group_norm():
    with pytest.raises(
        ValueError, match=r"preset paper is invalid: actor_lrr: unknown key \(did you mean 'actor_lr'\?\)"
    ):
        load_train_config(preset="paper", overrides=["actor_lrr=1e-6"])
    with pytest.raises(ValueError, match=r"agent\.graph_confg: unknown key \(did you mean 'graph_config'"):
        load_train_config(preset="paper", overrides=["agent.graph_confg.top_k=3"])
    with pytest.raises(
        ValueError, match=r"--set rollout\.batch_sise: unknown key \(did you mean 'rollout\.batch_size'"
    ):
        load_train_config(preset="paper", overrides=["rollout.batch_sise=64"])
    # the empty-location error is gone: the message starts with the key
    with pytest.raises(
        ValueError, match=r"preset paper is invalid: n_samples_per_prompt: algorithm group_norm"
    ):
        load_train_config(preset="paper", overrides=["algorithm=grpo"])
    cfg = load_train_config(preset="paper", overrides=["algorithm=grpo", "rollout.n_samples_per_prompt=8"])
    assert cfg.algorithm == "group_norm" and cfg.n_samples_per_prompt == 8
    assert check_command(openrlhf_args(cfg)).algo.advantage.estimator == "group_norm"


def _flag_values(args: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    key = None
    for a in args:
        if a.startswith("--"):
            key = a[2:]
            out[key] = []
        elif key:
            out[key].append(a)
    return out


def test_openrlhf_dotted_names_set_exactly_their_flag(monkeypatch):
    """Each accepted OpenRLHF name, set through --set, comes out as that flag with that value."""
    monkeypatch.setenv("WANDB_API_KEY", "k")  # wandb on: its project and run name are flags
    values = {
        "str": "/x/y",
        "int": 7,
        "float": 0.25,
    }
    seen = set()
    bases = [
        {
            "eval_data": "e.jsonl",
            "critic_model": "c",
            "max_samples": 100,
            "tensorboard_dir": "/tb",
            "wandb_run_name": "r",
        },
        {"algorithm": "group_norm", "n_samples_per_prompt": 4, "dynamic_filtering": True},
        {"total_training_steps": None},  # num_episodes is derived from the data unless this is unset
    ]
    for base in bases:
        cfg0 = paper_preset(**base)
        flags0 = _flag_values(openrlhf_args(cfg0))
        for name, field in OPENRLHF_NAMES.items():
            if name not in flags0 and not isinstance(getattr(cfg0, field), bool):
                continue
            current = getattr(cfg0, field)
            if isinstance(current, bool):
                new = not current
            elif field == "algorithm":
                new = "rloo"
            elif field == "kl_estimator":
                new = "k3"
            elif field == "param_dtype":
                new = "fp16"
            elif field == "dynamic_filtering_range":
                new = [0.2, 0.8]
            elif field == "is_clip":
                new = [0.2, 3.0]
            elif field == "adam_betas":
                new = [0.8, 0.9]
            elif field == "zero_stage":
                new = 2
            elif field in ("max_len", "rollout_batch_size"):
                new = 4096
            elif field in (
                "actor_warmup_ratio",
                "critic_warmup_ratio",
                "vllm_gpu_memory_utilization",
                "top_p",
            ):
                new = 0.5
            else:
                new = values[type(current).__name__ if current is not None else "str"]
            try:
                cfg = load_train_config(
                    preset="paper",
                    overrides=[f"{k}={json.dumps(v)}" for k, v in base.items()]
                    + [f"{name}={json.dumps(new)}"],
                )
            except ValueError:
                continue  # a value the rest of the config refuses; another base covers the name
            flags = _flag_values(openrlhf_args(cfg))
            if isinstance(new, bool):
                assert (name in flags) == new, name
            else:
                shown = [str(v) for v in new] if isinstance(new, list) else [str(new)]
                assert flags.get(name) == shown, (name, flags.get(name))
            seen.add(name)
    assert seen == set(OPENRLHF_NAMES), set(OPENRLHF_NAMES) - seen


def test_example_config_is_the_paper_preset():
    path = Path(__file__).resolve().parents[1] / "examples" / "train_paper.yaml"
    cfg = load_train_config(path)
    preset = paper_preset()
    assert cfg.model_dump() == preset.model_dump()
    check_command(openrlhf_args(cfg))
