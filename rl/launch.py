"""The OpenRLHF launcher: a :class:`TrainConfig` -> OpenRLHF 0.11.2's
``train_ppo_ray`` flags, a job folder holding every file the job reads, and the run itself.

The command names the folder's files relative to it and ships it as Ray's ``working_dir``, so
nothing depends on this checkout's path and the folder can be moved; relative outputs are the
folder's, expanded where ``command.sh`` runs. Keys (the retriever's, wandb's) travel in Ray's
runtime env, written by ``command.sh`` from its environment, never on a command line or in a file
of the folder. Every command is checked by OpenRLHF's own parser and assertions
(:mod:`parallelsearch.rl.openrlhf_cli`) first.
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

from parallelsearch.rl.agent_config import ENV_VAR, KEY_ENV_VAR
from parallelsearch.rl.job_folder import check_reuse
from parallelsearch.rl.openrlhf_command import (
    WANDB_FROM_ENV,
    agent_module_path,
    openrlhf_args,
    wandb_key_source,
)
from parallelsearch.rl.schedule import Schedule, plan
from parallelsearch.rl.train_config import TrainConfig
from parallelsearch.stores.errors import UnavailableError, check_choice

#: the job folder's files (names the command uses, relative to the folder)
AGENT_FILE = "parallelsearch_agent.yaml"
CONFIG_FILE = "train_config.yaml"
AGENT_MODULE_FILE = "parallelsearch_agent.py"
COMMAND_FILE = "command.sh"
#: Ray refuses a working_dir package over 500 MiB; data above this stays on shared storage
COPY_LIMIT_BYTES = 400 * 2**20
Runner = Literal["ray", "python", "print"]
RUNNERS: tuple[str, ...] = get_args(Runner)
#: the shell variable holding the runtime env file ``command.sh`` writes for ``ray job submit``
RUNTIME_ENV_VAR = "$runtime_env"


def python_command(cfg: TrainConfig, **kwargs: Any) -> list[str]:
    """``python3 -m openrlhf.cli.train_ppo_ray`` with :func:`openrlhf_args` (``kwargs`` go to it)."""
    return ["python3", "-m", "openrlhf.cli.train_ppo_ray", *openrlhf_args(cfg, **kwargs)]


def runtime_env(cfg: TrainConfig) -> dict[str, Any]:
    """The runtime env of :func:`ray_submit_command`: this checkout's paths (the job folder's command does not)."""
    return {"env_vars": {ENV_VAR: str(cfg.agent_config_path())}}


def ray_submit_command(
    cfg: TrainConfig,
    *,
    env: dict[str, Any] | None = None,
    working_dir: str | None = None,
    runtime_env_file: str | None = None,
    **kwargs: Any,
) -> list[str]:
    """``ray job submit`` of :func:`python_command` (``kwargs`` go to it), by default with
    :func:`runtime_env`; the job folder's command ships itself as ``working_dir`` and its runtime
    env as ``runtime_env_file`` (written when it runs: it holds the keys)."""
    runtime = (
        ["--runtime-env", runtime_env_file]
        if runtime_env_file
        else [f"--runtime-env-json={json.dumps(runtime_env(cfg) if env is None else env)}"]
    )
    return [
        "ray",
        "job",
        "submit",
        f"--address={cfg.ray_address}",
        *(["--working-dir", working_dir] if working_dir else []),
        *runtime,
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
    probe: bool = True  # command.sh's check probes the retriever (train --skip-probe: not)
    schedule: Schedule | None = None  # the run's length, counted on the data the folder ships

    def keys(self) -> dict[str, str]:
        """Environment variables the job's actors need from ``command.sh``'s environment -> why."""
        keys = {}
        if self.config.agent.retriever_api_key is not None:
            keys[KEY_ENV_VAR] = f"the retriever requires a key: export {KEY_ENV_VAR}"
        if WANDB_FROM_ENV in self.command:
            keys["WANDB_API_KEY"] = "wandb is on: export WANDB_API_KEY (or train --set wandb=off)"
        return keys

    def script(self) -> str:
        """``command.sh``: runs from any directory, with paths relative to the folder it sits in;
        the keys come from its environment into Ray's runtime env (a file outside the folder,
        removed on exit), never onto a command line."""
        lines = [
            "#!/usr/bin/env bash",
            "# written by `parallelsearch train`; run it as: bash command.sh (from any directory)",
            "set -euo pipefail",
            'cd "$(dirname "${BASH_SOURCE[0]}")"',
        ]
        lines += [f': "${{{var}:?{why}}}"' for var, why in self.keys().items()]
        lines += [
            "# the checks of `train --check` first (PARALLELSEARCH_SKIP_CHECK=1 skips them)",
            'if [ -z "${PARALLELSEARCH_SKIP_CHECK:-}" ]; then',
            f'    "${{PARALLELSEARCH_CLI:-parallelsearch}}" train --config {CONFIG_FILE} --check'
            + ("" if self.probe else " --skip-probe"),
            "fi",
        ]
        if self.runner == "python":  # OpenRLHF starts Ray here: its workers inherit this environment
            lines.append(f'export {ENV_VAR}="$PWD/{AGENT_FILE}"')
        else:
            lines += runtime_env_lines(self.keys())
        return "\n".join(lines) + "\n" + shell(self.command) + "\n"

    def files(self) -> list[str]:
        return [AGENT_FILE, CONFIG_FILE, AGENT_MODULE_FILE, *self.copies, COMMAND_FILE]


def runtime_env_lines(keys: dict[str, str]) -> list[str]:
    """Shell lines writing Ray's runtime env (YAML) to a private temporary file: the agent config's
    name and each key's value, single-quoted (a quote doubled)."""
    put = "".join(f"\n    printf \"  {var}: '%s'\\n\" \"${{{var}//\\'/\\'\\'}}\"" for var in keys)
    return [
        "umask 077",
        f'{RUNTIME_ENV_VAR[1:]}="$(mktemp)"',
        f"trap 'rm -f \"{RUNTIME_ENV_VAR}\"' EXIT",
        f'{{\n    echo "env_vars:"\n    echo "  {ENV_VAR}: {AGENT_FILE}"{put}\n}} > "{RUNTIME_ENV_VAR}"',
    ]


def _local(path: str | None) -> Path | None:
    return Path(path) if path and Path(path).is_file() else None


def plan_job(
    cfg: TrainConfig,
    runner: str = "ray",
    environ: Mapping[str, str] | None = None,
    schedule: Schedule | None = None,
) -> Job:
    """The job folder's contents for ``cfg`` (nothing written): data copied in or absolute, outputs
    absolute, a gateway factory's module shipped. The run's length is ``schedule``, else
    :func:`~parallelsearch.rl.schedule.plan` of ``cfg``: counted on the file the folder ships (its
    source here), never on a path the job's config names relative to the folder."""
    check_choice(runner, RUNNERS, "runner")
    folder = Path(cfg.job_dir).resolve()
    copies, updates = data_files(cfg)
    copies.update(factory_copies(cfg))
    updates.update(output_paths(cfg))
    schedule = schedule or plan(cfg)  # on the source of the copy: the same records
    job_cfg = cfg.model_copy(update=updates)
    _, note = wandb_key_source(job_cfg, environ)
    if runner == "python":
        command = python_command(
            job_cfg, agent_func_path=f"$PWD/{AGENT_MODULE_FILE}", environ=environ, schedule=schedule
        )
    else:
        command = ray_submit_command(
            job_cfg,
            working_dir=".",
            runtime_env_file=RUNTIME_ENV_VAR,
            agent_func_path=AGENT_MODULE_FILE,
            environ=environ,
            schedule=schedule,
        )
    runner = runner if runner != "print" else "ray"
    return Job(folder, job_cfg, command, runner, note, copies, schedule=schedule)


def data_files(cfg: TrainConfig) -> tuple[dict[str, Path], dict[str, Any]]:
    """The data files the folder ships (name in the folder -> source) and the config's data paths as
    the job names them: a copy's name in the folder, else an absolute path (a hub name as given)."""
    copies: dict[str, Path] = {}
    updates: dict[str, Any] = {}
    for key, name in (("prompt_data", "data/train"), ("eval_data", "data/eval")):
        value = getattr(cfg, key)
        src = _local(value)
        if src is None:
            if value and Path(value).is_dir():  # a dataset saved to disk, named absolutely
                updates[key] = str(Path(value).resolve())
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
    return copies, updates


def factory_copies(cfg: TrainConfig) -> dict[str, Path]:
    """A gateway-mode factory's module files, shipped in the folder (every actor imports it from its
    copy of the folder); a module that cannot be found here is refused at every runner."""
    if cfg.agent.mode != "gateway" or not cfg.agent.factory:
        return {}
    from parallelsearch.rl.preflight_factory import factory_files

    files, _ = factory_files(cfg.agent.factory)
    clash = sorted(set(files) & {AGENT_FILE, CONFIG_FILE, AGENT_MODULE_FILE, COMMAND_FILE})
    if clash:
        raise ValueError(
            f"agent.factory {cfg.agent.factory!r}: its module {clash[0]} is a file the job writes; rename it"
        )
    return files


def output_paths(cfg: TrainConfig) -> dict[str, str]:
    """Where the job writes, as its command names it: an absolute path as given, a relative one
    the job folder's (``$PWD/...``, expanded where ``command.sh`` runs: not Ray's temporary
    working_dir); a local model, absolute. With several nodes outputs must be named absolutely,
    on storage every node writes (DeepSpeed writes checkpoint shards from every rank)."""
    out: dict[str, str] = {}
    folder = Path(cfg.job_dir).resolve()
    for key in ("save_path", "ckpt_path", "tensorboard_dir"):
        value = getattr(cfg, key)
        if value and cfg.nodes == 1 and Path(value).is_absolute() and Path(value).is_relative_to(folder):
            out[key] = "$PWD/" + Path(value).relative_to(folder).as_posix()  # a read-back job's own outputs
        elif value and not Path(value).is_absolute():
            if cfg.nodes > 1:
                raise ValueError(
                    f"{key} {value} is relative with nodes={cfg.nodes}: name an absolute path on storage every "
                    "node can write (DeepSpeed writes checkpoint shards from every rank)"
                )
            out[key] = "$PWD/" + Path(value).as_posix().removeprefix("./")
    for key in ("model", "critic_model"):
        value = getattr(cfg, key)
        if value and not Path(value).is_absolute() and Path(value).exists():
            out[key] = str(Path(value).resolve())
    return out


def config_text(job: Job) -> str:
    """The folder's ``train_config.yaml``: the resolved config, paths relative to the folder."""
    import yaml

    # with total_training_steps the passes are derived from the data, so num_episodes is not written
    derived = {"num_episodes"} if job.config.total_training_steps is not None else set()
    resolved = job.config.model_dump(mode="json", exclude_none=True, exclude={"agent", *derived})
    resolved["agent"] = job.config.agent.file_dump()
    resolved["job_dir"] = "."  # paths relative to this folder (load_train_config reads them so)
    for key in ("save_path", "ckpt_path", "tensorboard_dir"):
        if isinstance(resolved.get(key), str):
            resolved[key] = resolved[key].removeprefix("$PWD/")
    return yaml.safe_dump(resolved, sort_keys=False)


def check_folder(job: Job) -> None:
    """The folder is this job's to write: empty, the same job again, or resumed (else a ValueError)."""
    check_reuse(job.folder, CONFIG_FILE, config_text(job), job.config)


def write_job(job: Job) -> Path:
    """Write the job folder; returns the path of ``command.sh``. Data files of an earlier write that
    this job does not ship are removed (they would travel with it)."""
    folder = job.folder
    text = config_text(job)
    check_reuse(folder, CONFIG_FILE, text, job.config)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / AGENT_FILE).write_text(job.config.agent_config_yaml(), encoding="utf-8")
    (folder / CONFIG_FILE).write_text(text, encoding="utf-8")
    shutil.copyfile(agent_module_path(), folder / AGENT_MODULE_FILE)
    for stale in (folder / "data").glob("*"):
        if stale.is_file() and f"data/{stale.name}" not in job.copies:
            stale.unlink()
    for name, src in job.copies.items():
        dest = folder / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not (dest.exists() and dest.samefile(src)):  # a job re-run from its own folder's config
            shutil.copyfile(src, dest)
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


def job_notes(cfg: TrainConfig, job: Job) -> list[str]:
    """What ``train`` says of the job beside its checks: data that is not a file here, shared outputs."""
    notes = []
    if not Path(cfg.prompt_data).is_file():
        notes.append(
            f"prompt_data {cfg.prompt_data}: not a file here (make-train-data makes it; a hub dataset name is "
            "passed as is)"
        )
    if cfg.nodes > 1:
        notes.append(
            f"outputs: {job.config.save_path} must be on storage all {cfg.nodes} nodes can write (DeepSpeed "
            "writes checkpoint shards from every rank)"
        )
    return notes


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

    from parallelsearch.rl.preflight import job_schedule, preflight

    out = out or sys.stdout
    status = static_checks(cfg)
    schedule = job_schedule(cfg)  # once: the command, the check's line and the warm-up state it
    checks = preflight(cfg, probe=probe, schedule=schedule)  # the checks of train --check, every runner
    job = plan_job(cfg, runner, schedule=schedule)
    job.probe = probe
    if not dry_run:
        check_folder(job)
    where = "not written: dry run" if dry_run else "written"
    print(f"# job folder {job.folder} ({where}): {', '.join(job.files())}", file=out)
    print(f"# {AGENT_FILE} ({ENV_VAR}):", file=out)
    print(job.config.agent_config_yaml(), file=out)
    print(f"# {job.wandb}", file=out)
    if job.runner == "ray":
        shipped = ", ".join([ENV_VAR, *job.keys()])
        print(
            f"# Ray's runtime env (command.sh writes it from its environment when it runs): {shipped}",
            file=out,
        )
    for line in [*(f"check: {x}" for x in checks), *job_notes(cfg, job)]:
        print(f"# {line}", file=out)
    print(f"# command ({status})", file=out)
    print(shell(job.command), file=out)
    if dry_run:
        return 0
    script = write_job(job)
    print(f"# run it as: bash {script}", file=out)
    if runner == "print":
        return 0
    try:
        # the checks ran above, in this process: command.sh need not run them again
        return subprocess.call(["bash", str(script)], env={**os.environ, "PARALLELSEARCH_SKIP_CHECK": "1"})
    except FileNotFoundError as e:
        raise UnavailableError("cannot run bash: run the written command.sh on the GPU machine") from e
