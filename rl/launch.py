"""The OpenRLHF command builder and launcher: a :class:`TrainConfig` -> OpenRLHF 0.11.2's
``train_ppo_ray`` flags, a job folder holding every file the job reads, and the run itself.

The command names the folder's files relative to it and ships it as Ray's ``working_dir``, so
nothing depends on this checkout's path and the folder can be moved. Every command is checked
by OpenRLHF's own parser and assertions (:mod:`parallelsearch.rl.openrlhf_cli`) first.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from parallelsearch.rl.agent_config import ENV_VAR
from parallelsearch.rl.train_config import OPENRLHF_NAMES, TrainConfig
from parallelsearch.stores.errors import UnavailableError, check_choice


def agent_module_path() -> Path:
    """The file to pass as ``--train.agent_func_path`` (OpenRLHF loads it by path)."""
    return Path(__file__).resolve().parent / "openrlhf_agent.py"


#: the job folder's files (names the command uses, relative to the folder)
AGENT_FILE = "parallelsearch_agent.yaml"
CONFIG_FILE = "train_config.yaml"
AGENT_MODULE_FILE = "parallelsearch_agent.py"
COMMAND_FILE = "command.sh"
#: Ray refuses a working_dir package over 500 MiB; data above this stays on shared storage
COPY_LIMIT_BYTES = 400 * 2**20
Runner = Literal["ray", "python", "print"]
RUNNERS: tuple[str, ...] = get_args(Runner)


def wandb_key_source(cfg: TrainConfig, environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The value for ``--logger.wandb.key`` (None: wandb off) and a line saying why.

    A key from the environment is passed as ``"$WANDB_API_KEY"`` in the written shell script,
    never as a literal ``$VAR`` to a process without a shell.
    """
    env = os.environ if environ is None else environ
    if cfg.wandb == "off" or not cfg.wandb_project:
        return None, "wandb: off" + ("" if cfg.wandb_project else " (no wandb_project)")
    if cfg.wandb_key:
        return cfg.wandb_key, "wandb: on (wandb_key from the config)"
    if env.get("WANDB_API_KEY"):
        return "$WANDB_API_KEY", "wandb: on (WANDB_API_KEY from the environment)"
    if cfg.wandb == "on":
        raise ValueError("wandb=on but no key: export WANDB_API_KEY (or set wandb_key, or wandb=off)")
    return None, "wandb: off (WANDB_API_KEY is not set; export it to log to wandb, or set wandb=off)"


def openrlhf_args(
    cfg: TrainConfig, *, agent_func_path: str | None = None, environ: Mapping[str, str] | None = None
) -> list[str]:
    """The flags after ``python -m openrlhf.cli.train_ppo_ray`` (OpenRLHF 0.11.2's dotted names):
    each field of :data:`OPENRLHF_NAMES` that applies, the layout and the agent module."""
    flags: dict[str, Any] = {}
    for role in ("ref", "actor", "critic"):
        flags[f"{role}.num_nodes"] = cfg.nodes
        flags[f"{role}.num_gpus_per_node"] = cfg.gpus_per_node
    flags["vllm.enable_sleep"] = flags["ds.enable_sleep"] = cfg.colocate_all and not cfg.async_train
    flags["train.agent_func_path"] = agent_func_path or str(agent_module_path())
    flags.update({flag: getattr(cfg, name) for flag, name in OPENRLHF_NAMES.items()})
    flags["critic.model_name_or_path"] = cfg.critic_model or cfg.model
    flags["ckpt.path"] = cfg.ckpt_path or str(Path(cfg.save_path) / "ckpt")
    flags["logger.wandb.key"], _ = wandb_key_source(cfg, environ)
    off = {
        "critic.": cfg.algorithm != "gae",
        "eval.": not cfg.eval_data,
        "algo.dynamic_filtering_range": not cfg.dynamic_filtering,
        "logger.wandb.": not flags["logger.wandb.key"],
    }
    skipped = tuple(prefix for prefix, skip in off.items() if skip)
    a: list[str] = []
    for flag, value in flags.items():
        if value is None or value is False or flag.startswith(skipped):
            continue
        a.append(f"--{flag}")
        if value is not True:
            a.extend(str(v) for v in (value if isinstance(value, list | tuple) else [value]))
    return a


def python_command(cfg: TrainConfig, **kwargs: Any) -> list[str]:
    """``python3 -m openrlhf.cli.train_ppo_ray`` with :func:`openrlhf_args` (``kwargs`` go to it)."""
    return ["python3", "-m", "openrlhf.cli.train_ppo_ray", *openrlhf_args(cfg, **kwargs)]


def runtime_env(cfg: TrainConfig) -> dict[str, Any]:
    """The runtime env of :func:`ray_submit_command`: this checkout's paths (the job folder's command does not)."""
    return {"env_vars": {ENV_VAR: str(cfg.agent_config_path())}}


def ray_submit_command(
    cfg: TrainConfig, *, env: dict[str, Any] | None = None, working_dir: str | None = None, **kwargs: Any
) -> list[str]:
    """``ray job submit`` of :func:`python_command` (``kwargs`` go to it), by default with
    :func:`runtime_env`; the job folder's command ships itself as ``working_dir``."""
    return [
        "ray",
        "job",
        "submit",
        f"--address={cfg.ray_address}",
        *(["--working-dir", working_dir] if working_dir else []),
        f"--runtime-env-json={json.dumps(runtime_env(cfg) if env is None else env)}",
        "--",
        *python_command(cfg, **kwargs),
    ]


def shell(cmd: list[str]) -> str:
    """The command as copy-pasteable shell, one flag (with its values) per line; ``$VAR`` tokens expand."""
    lines: list[list[str]] = [[]]
    for tok in cmd:
        if (
            tok.startswith("--")
            and len(tok) > 2
            and lines[-1]
            and (len(lines) > 1 or tok.startswith("--runtime") or tok.startswith("--working"))
        ):
            lines.append([])
        elif tok in ("--", "python3") and lines[-1]:
            lines.append([])
        lines[-1].append(f'"{tok}"' if tok.startswith("$") else shlex.quote(tok))
    return " \\\n    ".join(" ".join(x) for x in lines)


@dataclass
class Job:
    """What ``train`` writes: the folder, the config as the job sees it, the command, the files to copy."""

    folder: Path
    config: TrainConfig
    command: list[str]
    runner: str
    wandb: str
    copies: dict[str, Path] = field(default_factory=dict)  # name in the folder -> source file

    def script(self) -> str:
        """``command.sh``: runs from any directory, with paths relative to the folder it sits in."""
        lines = [
            "#!/usr/bin/env bash",
            "# written by `parallelsearch train`; run it as: bash command.sh (from any directory)",
            "set -euo pipefail",
            'cd "$(dirname "${BASH_SOURCE[0]}")"',
        ]
        if "$WANDB_API_KEY" in self.command:
            lines.append(': "${WANDB_API_KEY:?wandb is on: export WANDB_API_KEY (or train --set wandb=off)}"')
        if self.runner == "python":
            lines.append(f'export {ENV_VAR}="$PWD/{AGENT_FILE}"')
        return "\n".join(lines) + "\n" + shell(self.command) + "\n"

    def files(self) -> list[str]:
        return [AGENT_FILE, CONFIG_FILE, AGENT_MODULE_FILE, *self.copies, COMMAND_FILE]


def _local(path: str | None) -> Path | None:
    return Path(path) if path and Path(path).is_file() else None


def plan_job(cfg: TrainConfig, runner: str = "ray", environ: Mapping[str, str] | None = None) -> Job:
    """The job folder's contents for ``cfg`` (nothing written): data copied in or absolute, outputs absolute."""
    check_choice(runner, RUNNERS, "runner")
    folder = Path(cfg.job_dir).resolve()
    copies: dict[str, Path] = {}
    updates: dict[str, Any] = {}
    for key, name in (("prompt_data", "data/train"), ("eval_data", "data/eval")):
        src = _local(getattr(cfg, key))
        if src is None:
            continue  # a hub dataset name, or a path only the cluster has
        if cfg.copy_data:
            dest = name + "".join(src.suffixes[-1:])
            copies[dest] = src.resolve()
            updates[key] = dest
        else:
            updates[key] = str(src.resolve())
    size = sum(p.stat().st_size for p in copies.values())
    if size > COPY_LIMIT_BYTES:
        raise ValueError(
            f"copy_data: the data files hold {size / 2**20:.0f} MiB, over the {COPY_LIMIT_BYTES // 2**20} MiB "
            "this job folder may ship (Ray refuses a working_dir over 500 MiB): put them on storage every "
            "node mounts and set copy_data=false"
        )
    # outputs must not land in Ray's temporary working_dir; a local model is named absolutely too
    for key in ("save_path", "ckpt_path", "tensorboard_dir", "model", "critic_model"):
        value = getattr(cfg, key)
        output = key not in ("model", "critic_model")
        if value and not Path(value).is_absolute() and (output or Path(value).exists()):
            updates[key] = str(Path(value).resolve())
    job_cfg = cfg.model_copy(update=updates)
    _, note = wandb_key_source(job_cfg, environ)
    if runner == "python":
        command = python_command(job_cfg, agent_func_path=f"$PWD/{AGENT_MODULE_FILE}", environ=environ)
    else:
        env = {"env_vars": {ENV_VAR: AGENT_FILE}}
        command = ray_submit_command(
            job_cfg, env=env, working_dir=".", agent_func_path=AGENT_MODULE_FILE, environ=environ
        )
    return Job(folder, job_cfg, command, runner if runner != "print" else "ray", note, copies)


def write_job(job: Job) -> Path:
    """Write the job folder; returns the path of ``command.sh``."""
    import yaml

    folder = job.folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / AGENT_FILE).write_text(job.config.agent_config_yaml(), encoding="utf-8")
    resolved = job.config.model_dump(mode="json", exclude_none=True)
    resolved["job_dir"] = "."
    (folder / CONFIG_FILE).write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
    shutil.copyfile(agent_module_path(), folder / AGENT_MODULE_FILE)
    for name, src in job.copies.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, folder / name)
    script = folder / COMMAND_FILE
    script.write_text(job.script(), encoding="utf-8")
    script.chmod(0o755)
    return script


def static_checks(cfg: TrainConfig) -> str:
    """What can be checked without the cluster or the retriever: OpenRLHF's parser, argument checks and
    train() assertions, the GPU sum, and the protocol and reward mode against the prompts. Returns the
    status line."""
    from parallelsearch.rl.preflight import (
        PreflightError,
        check_protocol,
        check_resources,
        check_reward_prompts,
        first_record,
        first_records,
    )
    from parallelsearch.rl.preflight_data import check_template_reward

    try:
        status = "checked against OpenRLHF's own parser, argument checks and train() assertions; " + (
            check_resources(cfg)
        )
    except RuntimeError as e:
        if isinstance(e, PreflightError):
            raise
        status = f"not checked ({e})"
    record = first_record(cfg.prompt_data)
    check_protocol(cfg, record)
    check_reward_prompts(cfg, record)
    records = first_records(cfg.prompt_data)
    if records:
        try:
            check_template_reward(cfg.agent.reward.mode, records, cfg.input_key, cfg.label_key)
        except ValueError as e:
            raise PreflightError(str(e)) from e
    return status


def launch(
    cfg: TrainConfig,
    *,
    dry_run: bool = False,
    runner: str = "ray",
    out: Any = None,
    probe: bool = True,
) -> int:
    """Check, write the job folder and run ``command.sh`` (``runner`` ray or python), or only print
    (``dry_run``: nothing written) or write and print (``runner="print"``)."""
    import subprocess

    from parallelsearch.rl.preflight import preflight, retriever_name

    out = out or sys.stdout
    status = static_checks(cfg)
    job = plan_job(cfg, runner)
    where = "not written: dry run" if dry_run else "written"
    print(f"# job folder {job.folder} ({where}): {', '.join(job.files())}", file=out)
    print(f"# {AGENT_FILE} ({ENV_VAR}):", file=out)
    print(job.config.agent_config_yaml(), file=out)
    print(f"# {job.wandb}", file=out)
    if dry_run or runner == "print":
        print(f"# {retriever_name(cfg.agent)}: not probed here (train --check probes it)", file=out)
    if not Path(cfg.prompt_data).is_file():
        print(
            f"# prompt_data {cfg.prompt_data}: not a file here (make-train-data makes it; "
            "a hub dataset name is passed as is)",
            file=out,
        )
    if cfg.nodes > 1:
        print(
            f"# outputs: {job.config.save_path} must be on storage all {cfg.nodes} nodes can write "
            "(DeepSpeed writes checkpoint shards from every rank)",
            file=out,
        )
    print(f"# command ({status})", file=out)
    print(shell(job.command), file=out)
    if dry_run:
        return 0
    script = write_job(job)
    print(f"# run it as: bash {script}", file=out)
    if runner == "print":
        return 0
    for line in preflight(cfg, probe=probe):
        print(f"# check: {line}", file=out)
    try:
        return subprocess.call(["bash", str(script)])
    except FileNotFoundError as e:
        raise UnavailableError("cannot run bash: run the written command.sh on the GPU machine") from e
