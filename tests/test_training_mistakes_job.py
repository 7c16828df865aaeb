"""The job runs what its check promises, and the mistakes that passed ``train --check`` silently
are stopped or named (docs/training.md, "The pre-flight check"): the run's length computed once on
the file the job ships; reward weights far from their mode's; repeated records and colliding ids;
a file whose template changes after its first prompts; a template that never teaches ``##`` under
a reward that pays for it; an observation cap smaller than a passage; a budget with room for one
sub-query; a reused job folder; a gateway factory's module left behind, or a factory returning no
agent; too many passes over a small file.

Real parts: OpenRLHF's own parser, the written ``command.sh`` run by bash with the real
``parallelsearch`` CLI as its check and a stand-in ``ray`` executable (named as such: Ray cannot
run here) recording what it would submit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_rl_job import standins
from test_training_mistakes import write_data
from test_training_mistakes_run import refused, skip_probe_check

from parallelsearch.cli import main
from parallelsearch.rl.schedule import passes, schedule_line
from parallelsearch.rl.train_config import paper_preset

#: the issue's file: 1,300 prompts, 3 rollout steps a pass at 512 a batch, 335 passes for 1,005 steps
PROMPTS = 1300
PASSES = round(1005 / 3)


@pytest.fixture()
def check_data(tmp_path):
    """``train --check`` (the probe skipped) on a written training file, with these settings."""
    data = write_data(tmp_path / "train.jsonl")
    return lambda *sets: skip_probe_check(f"prompt_data={data}", *sets)


def run_command_sh(job: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """``bash command.sh`` from another directory, its check run by the real CLI and ``ray`` a
    stand-in: (what the check printed, the arguments ray was given)."""
    log = tmp_path / "standin.log"
    env = {
        **os.environ,
        "PATH": f"{standins(tmp_path)}:{os.environ['PATH']}",
        "STANDIN_LOG": str(log),
        "PARALLELSEARCH_CLI": str(Path(sys.executable).parent / "parallelsearch"),
    }
    env.pop("PARALLELSEARCH_SKIP_CHECK", None)
    res = subprocess.run(
        ["bash", str(job / "command.sh")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout, [x.removeprefix("arg=") for x in log.read_text().splitlines()[2:]]


def checked_passes(out: str) -> int:
    """The passes of the check's ``run length`` line."""
    found = re.search(r"run length: (\d+) prompts, (\d+) rollout steps a pass x (\d+) passes", out)
    assert found, out
    return int(found.group(3))


# -- the run's length: the command runs what the check says -----------------------------------------


@pytest.mark.parametrize("layout", ["copied", "absolute", "another folder", "not copied"])
def test_command_sh_runs_the_length_its_check_states(layout, tmp_path, monkeypatch, capsys):
    """The job's prompt_data is the folder's copy, ``data/train.jsonl``; it was counted relative to the
    directory ``train`` ran in: missing there (15 passes) or another file (here 300 prompts, 1,005
    passes), while the check counted the real file (335 passes). ``train`` runs in ``here`` (with
    another run's ``data/train.jsonl``), the data lies in it, elsewhere, or is named absolutely."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    here = tmp_path / "here"
    decoy = write_data(here / "data" / "train.jsonl", fill=300)
    inside = write_data(here / "made" / "train.jsonl", fill=PROMPTS)
    outside = write_data(tmp_path / "made" / "train.jsonl", fill=PROMPTS)
    given = {
        "copied": ["--set", "prompt_data=made/train.jsonl"],
        "absolute": ["--set", f"prompt_data={outside}"],
        "another folder": ["--set", "prompt_data=../made/train.jsonl"],
        "not copied": ["--set", "prompt_data=../made/train.jsonl", "--set", "copy_data=false"],
    }[layout]
    monkeypatch.chdir(here)
    job = tmp_path / "job"
    argv = ["train", "--preset", "paper", "--runner", "print", "--skip-probe", "--set", f"job_dir={job}"]
    assert main([*argv, *given]) == 0
    printed = capsys.readouterr().out
    assert decoy.is_file() and inside.is_file() and checked_passes(printed) == PASSES
    out, args = run_command_sh(job, tmp_path)
    episodes = int(args[args.index("--train.num_episodes") + 1])
    assert episodes == checked_passes(out) == PASSES, out
    assert f"--train.num_episodes {PASSES}" in printed.replace(" \\\n    ", " ")


def test_the_docs_state_the_schedule_the_code_computes():
    """docs/training.md's run length and warm-up of the official file are this computation's line."""
    cfg = paper_preset()
    line = schedule_line(cfg, passes(cfg, 169_615))
    docs = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text(encoding="utf-8")
    assert line in " ".join(docs.split()), line


@pytest.mark.parametrize("name", ["PeterJinGo/nq_hotpotqa_train", "folder"])
def test_data_that_cannot_be_counted_needs_num_episodes(name, tmp_path, capsys):
    """A hub dataset name was "not checked" and ran the default 15 passes; a folder the same."""
    if name == "folder":
        (tmp_path / "folder").mkdir()
        name = str(tmp_path / "folder")
    refused(
        capsys,
        skip_probe_check(f"prompt_data={name}"),
        f"prompt_data {name} is not a local file this machine can count",
        "total_training_steps 1005 cannot become whole passes",
        "set total_training_steps=null and num_episodes=N",
    )
    refused(
        capsys,
        skip_probe_check(f"prompt_data={name}", "total_training_steps=null"),
        "the default num_episodes 15 passes of a dataset of unknown size: set num_episodes=N",
    )
    given = ["--set", f"prompt_data={name}", "--set", "total_training_steps=null", "--set", "num_episodes=3"]
    assert main(["train", "--preset", "paper", "--check", "--skip-probe", *given]) == 0
    assert "not checked: run length: " in capsys.readouterr().out
    assert main(["train", "--preset", "paper", "--dry-run", "--skip-probe", *given]) == 0
    assert "--train.num_episodes 3" in capsys.readouterr().out.replace(" \\\n    ", " ")


def test_many_passes_over_a_small_file_are_warned(tmp_path, capsys):
    """335 passes over 1,300 prompts printed an ``ok:`` line."""
    data = write_data(tmp_path / "train.jsonl", fill=PROMPTS)
    assert skip_probe_check(f"prompt_data={data}") == 0
    out = capsys.readouterr().out
    assert (
        f"warning: run length: {PASSES} passes over prompt_data (total_training_steps 1005 over 1300" in out
    )
    assert "more than 50" in out and "fewer total_training_steps" in out
    big = write_data(tmp_path / "big.jsonl", fill=512 * 40)  # 40 steps a pass: 25 passes
    assert skip_probe_check(f"prompt_data={big}") == 0
    assert "warning: run length" not in capsys.readouterr().out


# -- the reward's weights ----------------------------------------------------------------------------


def test_reward_weights_are_printed_and_bounded_against_the_modes_own(check_data, capsys):
    """``lambda_d=1.5`` (10x the mode's 0.15) passed without a word: a wrong answer that splits then
    scores 4.95, far above a right answer's 1."""
    refused(
        capsys,
        check_data("agent.reward.weights.lambda_d=1.5"),
        "agent.reward.weights: lambda_d 1.5 (the mode's 0.15)",
        "pay a wrong answer up to 4.95, not less than a right answer's outcome 1",
        "set agent.reward.weights.lambda_d=0.15",
    )
    assert check_data("agent.reward.weights.lambda_s=0.05") == 0
    out = capsys.readouterr().out
    assert "warning: agent.reward.weights.lambda_s 0.05 is 1/7 of the mode's own 0.35" in out
    assert "lambda_s 0.05 (the mode's 0.35)" in out
    assert check_data() == 0
    assert (
        "ok: reward weights (mode paper-strict, the mode's own): lambda_d 0.15, lambda_s 0.35, alpha 3, "
        "lambda_f 0.1; shaping pays a wrong answer at most 0.90 < a right answer's 1"
    ) in capsys.readouterr().out


# -- the data: repeats, colliding ids, a template that switches, a template without '##' ------------


def numbered(n: int, prefix: str = "q", dataset: str | None = None) -> list[dict]:
    """``n`` distinct comparison questions (ids ``train_0`` ... as FlashRAG numbers each dataset's)."""
    meta = {"type": "comparison", **({"dataset": dataset} if dataset else {})}
    return [
        {"id": f"train_{i}", "question": f"Who is older, {prefix}{i}a or {prefix}{i}b", "golden_answers": ["x"], "metadata": meta}
        for i in range(n)
    ]  # fmt: skip


def test_repeated_records_and_ids_colliding_across_datasets_are_counted(tmp_path, capsys):
    """600 repeated records, or NQ's and HotpotQA's positional ids in one file, passed silently."""
    data = write_data(tmp_path / "train.jsonl", questions=numbered(700), fill=0)
    with data.open("a") as f:
        f.writelines(data.read_text().splitlines(keepends=True)[:600])
    assert skip_probe_check(f"prompt_data={data}") == 0
    out = capsys.readouterr().out
    assert (
        f"warning: prompt_data {data}: 600 of 1300 records repeat an earlier question (first: line 701 repeats line 1)"
        in out
    )
    merged = write_data(
        tmp_path / "merged.jsonl", questions=numbered(300, "n", "nq") + numbered(300, "h", "hotpotqa"), fill=0
    )
    assert skip_probe_check(f"prompt_data={merged}") == 0
    out = capsys.readouterr().out
    assert (
        "300 records reuse the id of an earlier record with another question (first: id 'train_0', lines 1 and 301"
        in out
    )
    assert "repeat an earlier question" not in out


def test_a_file_whose_template_switches_after_16_prompts_is_refused(tmp_path, capsys):
    """Only the first 16 prompts were read: the other 496 in Search-R1's template passed."""
    head = write_data(tmp_path / "head.jsonl", questions=numbered(16), fill=0)
    tail = write_data(tmp_path / "tail.jsonl", "search_r1", questions=numbered(496, "t"), fill=0)
    data = tmp_path / "train.jsonl"
    data.write_text(head.read_text() + tail.read_text())
    refused(
        capsys,
        skip_probe_check(f"prompt_data={data}"),
        "the prompts switch template: template search_r1 (496, first: record 17); template official (16, first: record 1)",
        "make the whole file with one `make-train-data --template`",
    )


def test_a_template_that_never_teaches_splitting_is_refused_under_a_decomposition_reward(tmp_path, capsys):
    """Search-R1's prompt (no '##') under the paper preset: the policy is never told it may split."""
    data = write_data(tmp_path / "train.jsonl", "search_r1")
    refused(
        capsys,
        skip_probe_check(f"prompt_data={data}"),
        "reward mode paper-strict pays for '##' decompositions (weight 0.15) but 512 of 512 prompts never mention '##'",
        "template search_r1",
        "--template official",
        "agent.reward.weights.lambda_d=0",
    )
    assert skip_probe_check(f"prompt_data={data}", "agent.reward.weights.lambda_d=0") == 0


# -- the observation cap and the budget -------------------------------------------------------------


def test_an_observation_cap_below_one_passage_is_refused(check_data, capsys):
    """A 100-token cap was praised as "room for about 8 sub-queries"."""
    refused(
        capsys,
        check_data("agent.max_observation_tokens=100"),
        "agent.max_observation_tokens 100 < one passage (160 tokens;",
        "cut inside its first passage; set agent.max_observation_tokens >= 960",
    )


def test_a_budget_with_room_for_one_sub_query_is_warned(check_data, capsys):
    """top_k=5 leaves one sub-query's passages under the 1,000-token cap: it was reported as ok."""
    assert check_data("agent.graph_config.top_k=5") == 0
    out = capsys.readouterr().out
    assert (
        "warning: budget: one search holds only 1 sub-query's passages whole (max_observation_tokens 1000: 1000 "
        "tokens; top_k 5 x passage 160 = 800 a sub-query)"
    ) in out
    assert "set agent.graph_config.top_k <= 3, or raise agent.max_observation_tokens >= 1600" in out
    assert check_data() == 0
    assert "ok: budget: one search holds 2 sub-queries' passages whole" in capsys.readouterr().out


# -- the job folder --------------------------------------------------------------------------------


def test_a_reused_job_folder_is_refused_unless_resumed(tmp_path, monkeypatch, capsys):
    """A second run written into a used folder shipped the first one's eval file and checkpoints."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    data = write_data(tmp_path / "train.jsonl")
    held = write_data(tmp_path / "eval.jsonl", questions=numbered(1, "e"), score="em")
    job = tmp_path / "job"
    argv = ["train", "--preset", "paper", "--runner", "print", "--skip-probe", "--set", f"job_dir={job}",
            "--set", f"prompt_data={data}"]  # fmt: skip
    assert main([*argv, "--set", f"eval_data={held}", "--set", "eval_steps=5"]) == 0
    assert main([*argv, "--set", f"eval_data={held}", "--set", "eval_steps=5"]) == 0  # the same job again
    capsys.readouterr()
    assert main([*argv, "--set", "actor_lr=2e-6"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: job_dir {job} already holds another job's files")
    assert "pass --resume" in err[0] and (job / "data" / "eval.jsonl").is_file()
    ckpt = job / "checkpoints" / "parallelsearch" / "ckpt" / "_actor"
    ckpt.mkdir(parents=True)
    (ckpt / "latest").write_text("global_step10")
    assert (
        main([*argv, "--set", f"eval_data={held}", "--set", "eval_steps=5"]) == 2
    )  # trained: not the same job
    assert "already holds a checkpoint of a run" in capsys.readouterr().err
    assert main([*argv, "--set", "actor_lr=2e-6", "--resume"]) == 0
    assert not (job / "data" / "eval.jsonl").exists()  # what this run does not use does not ship with it
    assert "--ckpt.load_enable" in (job / "command.sh").read_text()


GATEWAY = ["agent.mode=gateway"]
FACTORIES = '''
from langchain.agents import create_agent
from langchain_core.tools import tool


@tool
def search(query: str) -> str:
    """Search the corpus."""
    return ""


def build(model, searcher):
    return create_agent(model, [search])


def nothing(model, searcher):
    create_agent(model, [search])


def bound(model, searcher):
    return model.bind_tools([search])
'''


@pytest.fixture
def factory_dir(tmp_path, monkeypatch):
    """A folder holding a factory module, the directory ``train`` runs in."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "my_agents.py").write_text(FACTORIES)
    monkeypatch.chdir(here)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield here
    sys.modules.pop("my_agents", None)


def test_a_gateway_factorys_module_ships_in_the_job_folder(factory_dir, tmp_path, capsys):
    """The module stayed in the directory train ran in; every actor runs in its copy of the job folder."""
    data = write_data(tmp_path / "train.jsonl")
    job = tmp_path / "job"
    argv = ["train", "--preset", "paper", "--runner", "print", "--skip-probe", "--set", f"job_dir={job}",
            "--set", f"prompt_data={data}", "--set", "agent.mode=gateway"]  # fmt: skip
    assert main([*argv, "--set", "agent.factory=my_agents:build"]) == 0
    out = capsys.readouterr().out
    assert (
        f"agent.factory my_agents:build: {factory_dir / 'my_agents.py'} ships in the job folder as my_agents.py"
        in out
    )
    assert (job / "my_agents.py").read_text() == FACTORIES
    # the folder's own check finds it there, from the folder (as command.sh runs it)
    res = subprocess.run(
        [str(Path(sys.executable).parent / "parallelsearch"), "train", "--config", "train_config.yaml", "--check",
         "--skip-probe"], cwd=job, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0 and f"{job / 'my_agents.py'} ships in the job folder" in res.stdout, res.stdout
    # a module that cannot be found here is refused by every form, before anything is written
    for how in (["--check"], ["--runner", "print"], ["--runner", "ray"]):
        code = main(["train", "--preset", "paper", "--skip-probe", *how, "--set", f"prompt_data={data}",
                     "--set", f"job_dir={tmp_path / 'other'}", "--set", "agent.mode=gateway",
                     "--set", "agent.factory=elsewhere_agents:build"])  # fmt: skip
        captured = capsys.readouterr()
        said = (captured.out + captured.err).strip().splitlines()[-1]
        assert (
            code != 0
            and "agent.factory 'elsewhere_agents:build': module 'elsewhere_agents' is not found" in said
        ), how
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize(
    "name,needle",
    [("nothing", "returned None (does the function end without `return`?)"),
     ("bound", "returned a chat model (ChatOpenAI, bound to tools), not an agent")],
)  # fmt: skip
def test_a_factory_that_returns_no_agent_is_named(name, needle, factory_dir, tmp_path, capsys):
    """None or ``model.bind_tools(...)`` failed later with a raw traceback that did not name agent.factory."""
    data = write_data(tmp_path / "train.jsonl")
    refused(
        capsys,
        skip_probe_check(f"prompt_data={data}", "agent.mode=gateway", f"agent.factory=my_agents:{name}"),
        f"agent.factory 'my_agents:{name}' {needle}",
        "create_agent(model, tools)",
    )
