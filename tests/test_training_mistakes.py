"""Ten mistakes that cost a day of GPU time, each stopped before submission with one line naming
the cause and the fix (docs/training.md, "The pre-flight check"). The numbers follow the list the
checks were written against: 1 the install, 2 a reward that inverts the objective, 3 context
overflow, 4 the chat template, 5 contamination, 6 the retriever's identity, 7 the keys, 8 the
OpenRLHF contract, 9 the job folder, 10 rollout's exit code.

Real parts throughout: OpenRLHF's own parser, real ``/retrieve`` servers on 127.0.0.1 over a real
Chroma store, the tiny tokenizer this package builds (rl/tiny_model.py), real benchmark files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import RAW, UvicornThread, free_port, needs_data
from train_args import paper_argv

from parallelsearch.cli import main
from parallelsearch.rl.data import make_train_data, train_record
from parallelsearch.rl.preflight import PreflightError, check_resources
from parallelsearch.rl.train_config import load_train_config, paper_preset

QUESTIONS = [
    {"id": "c1", "question": "Who is older, Ann or Bob", "golden_answers": ["Ann"], "metadata": {"type": "comparison"}},
    {"id": "b1", "question": "Where was the author of Hamlet born", "golden_answers": ["Stratford"], "metadata": {"type": "bridge"}},
    {"id": "n1", "question": "who wrote hamlet", "golden_answers": ["Shakespeare"]},
]  # fmt: skip


def write_data(path, template: str = "official", questions=QUESTIONS, fill: int | None = None, **record_args):
    """A prompt file as make-train-data writes it (hand-written questions: no file of a split),
    the questions repeated to ``fill`` records (default: one rollout batch of the paper preset,
    so the check that a file fills a batch passes; an eval file is written once)."""
    from conftest import fill_batch

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps(train_record(q, template=template, **record_args)) + "\n" for q in questions)
    )
    return path if record_args.get("score") or fill == 0 else fill_batch(path, fill or 512)


@pytest.fixture(scope="module")
def retriever(hotpot_store):
    from parallelsearch.stores import create_retrieval_app

    with UvicornThread(create_retrieval_app(hotpot_store)) as srv:
        yield f"{srv.url}/retrieve"


def check_lines(capsys) -> list[str]:
    return capsys.readouterr().out.strip().splitlines()


def train_check(*settings: str, preset: str = "paper") -> int:
    """``train --preset paper --check`` with each of ``settings`` as a ``--set``."""
    return main(["train", "--preset", preset, "--check", *(x for kv in settings for x in ("--set", kv))])


# -- 9. the job folder and its config -------------------------------------------------------------


def test_set_values_are_yaml_scalars_so_a_prefix_with_a_colon_stays_a_string(tmp_path):
    """``--set agent.query_prefix="query: "`` (the shell strips the quotes) was read as the YAML
    mapping ``{query: None}`` and failed validation; typed values and flow lists still parse."""
    cfg = load_train_config(
        preset="paper",
        overrides=[
            "agent.query_prefix=query: ",
            "agent.graph_config.top_k=5",
            "colocate_all=false",
            "dynamic_filtering_range=[0.1, 0.9]",
        ],
    )
    assert cfg.agent.query_prefix == "query: "  # the trailing space kept
    assert cfg.agent.graph_config.top_k == 5 and cfg.colocate_all is False
    assert cfg.dynamic_filtering_range == (0.1, 0.9)
    quoted = load_train_config(preset="paper", overrides=['agent.query_prefix="query: "'])
    assert quoted.agent.query_prefix == "query: "
    assert "query_prefix: 'query: '" in cfg.agent_config_yaml()


def test_gpu_error_in_async_mode_does_not_advise_the_colocation_already_set():
    with pytest.raises(PreflightError) as err:
        check_resources(paper_preset(async_train=True))
    msg = str(err.value)
    assert "set async_train=false" in msg and "set colocate_all=true" not in msg
    with pytest.raises(PreflightError, match=r"set colocate_all=true"):
        check_resources(paper_preset(colocate_all=False))


# -- 5. contamination: evaluation questions never become training data ---------------------------


@needs_data
def test_make_train_data_refuses_evaluation_files(tmp_path, capsys):
    """FlashRAG's test.jsonl and HotpotQA's dev files used to pass; only holdout/ was refused. The
    file's name (or, for a prepared file, its questions' source) says it is an evaluation split."""
    nq_test = RAW / "nq" / "GaurisankarJ_reason_over_search" / "test.jsonl"
    out = tmp_path / "train.jsonl"
    assert main(["make-train-data", str(nq_test), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "comes from an evaluation file" in err and "its file name says 'test'" in err
    assert "--allow-eval-questions" in err and not out.exists()
    # a prepared copy under an innocent name still carries its source
    assert main(["prepare-data", str(nq_test), "--out", str(tmp_path / "prep")]) == 0
    assert main(["make-train-data", str(tmp_path / "prep" / "nq.jsonl"), "--out", str(out)]) == 2
    assert "test.jsonl" in capsys.readouterr().err
    # positional FlashRAG ids of an evaluation split, under any file name
    renamed = tmp_path / "nq_train.jsonl"
    renamed.write_text(json.dumps({"id": "test_7", "question": "q?", "golden_answers": ["a"]}) + "\n")
    with pytest.raises(ValueError, match=r"its id 'test_7' is an evaluation split's"):
        make_train_data([renamed], out)
    # a train split passes
    train = tmp_path / "nq" / "train.jsonl"
    train.parent.mkdir()
    train.write_text(json.dumps({"id": "train_7", "question": "q?", "golden_answers": ["a"]}) + "\n")
    assert make_train_data([train], out).written == 1


# -- 8. the OpenRLHF contract ----------------------------------------------------------------------


def test_records_name_their_datasource_as_openrlhf_reads_it(tmp_path):
    """Records said ``data_source``; OpenRLHF's PromptDataset reads ``datasource``, so every eval
    metric fell into ``default``. Its own dataset class and eval metrics now group by dataset."""
    from engines import openrlhf_function, openrlhf_prompt_dataset

    files = []
    for dataset, question, answer in (
        ("hotpotqa", "Who is older, A or B?", "A"),
        ("nq", "who wrote hamlet", "X"),
    ):
        path = tmp_path / dataset / "dev.jsonl"  # an evaluation file: welcome as eval records
        path.parent.mkdir()
        path.write_text(
            json.dumps({"id": f"{dataset}1", "question": question, "golden_answers": [answer]}) + "\n"
        )
        files.append(path)
    out = tmp_path / "eval.jsonl"
    make_train_data(files, out, eval_set=True)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert {r["datasource"] for r in records} == {"hotpotqa", "nq"}
    assert all(json.loads(r["label"])["score"] == "em" for r in records)
    dataset = openrlhf_prompt_dataset(records, tokenizer=None)
    batches = [dataset.collate_fn([dataset[i]]) for i in range(len(dataset))]
    compute_eval_metrics = openrlhf_function("trainer/ppo_trainer.py", "compute_eval_metrics")
    samples = [
        SimpleNamespace(prompts=[r["prompt"]], rewards=float(r["datasource"] == "nq"), response_length=None, truncated=None)
        for r in records
    ]  # fmt: skip
    logs = compute_eval_metrics(batches, samples, 1)
    assert logs["eval_nq_pass1"] == 1.0 and logs["eval_hotpotqa_pass1"] == 0.0
    assert not any("default" in k for k in logs)


# -- the five caught before stay caught, each by one line naming the key -------------------------


@pytest.mark.parametrize(
    "settings,needle",
    [
        (["agent.reward.weights.lamda_d=0.3"], "did you mean 'lambda_d'"),
        (["gpus_per_node=4"], "vllm_num_engines * vllm_tensor_parallel_size, got 4 and 8"),
        (
            ["nodes=2", "vllm_num_engines=16", "agent.retriever_url=http://[::1]:8000/retrieve"],
            "is a loopback",
        ),
        (["algorithm=grpo"], "n_samples_per_prompt: algorithm group_norm needs >= 2"),
    ],
)
def test_the_mistakes_caught_before_are_still_caught(settings, needle, tmp_path, capsys):
    data = write_data(tmp_path / "train.jsonl")
    code = train_check(f"prompt_data={data}", "agent.retriever_url=http://10.0.0.5:8000/retrieve", *settings)
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).strip().splitlines()
    assert code != 0 and len(lines) == 1 and needle in lines[0], lines


def test_a_closed_port_is_still_caught(tmp_path, capsys):
    url = f"http://127.0.0.1:{free_port()}/retrieve"
    code = train_check(f"prompt_data={write_data(tmp_path / 'train.jsonl')}", f"agent.retriever_url={url}")
    lines = check_lines(capsys)
    assert code == 1 and lines[-1].startswith(f"check failed: the retriever {url} does not answer")
    assert sum(x.startswith("check failed") for x in lines) == 1


# -- 2. a reward that inverts the paper's objective ----------------------------------------------


@pytest.mark.parametrize("template", ["search_r1", "dag"])
def test_official_reward_refuses_prompts_of_another_template(template, tmp_path, capsys):
    """The official reward counts the prompt's own <search> examples: Search-R1's prompt (one) made a
    second search score 1.35 over one search's 1.00, the dag prompt (three) shifted it the other way."""
    from parallelsearch.rl.rewards import score_trajectory

    q = QUESTIONS[2]
    rec = train_record(q, template=template)
    chat = "<|im_start|>user\n" + rec["prompt"] + "<|im_end|>\n<|im_start|>assistant\n"
    one = (
        chat
        + "<think> t </think><search> hamlet </search><information>x</information><think> t </think><answer> Shakespeare </answer>"
    )
    two = one.replace(
        "<answer>", "<search> more </search><information>y</information><think> t </think><answer>", 1
    )
    scores = [score_trajectory(t, rec["label"], "official").total for t in (one, two)]
    if template == "search_r1":
        assert scores[1] > scores[0]  # the inversion the check exists for
    data = write_data(tmp_path / "train.jsonl", template)
    official = ["--set", "agent.reward.mode=official"]
    code = main(
        ["train", "--preset", "paper", "--check", "--skip-probe", "--set", f"prompt_data={data}", *official]
    )
    lines = check_lines(capsys)
    assert code == 1 and lines[-1].startswith("check failed: reward mode official counts the prompt's own")
    assert f"template {template}" in lines[-1] and "--template official" in lines[-1]
    # the launcher refuses it too, before writing anything
    assert main(["train", "--preset", "paper", "--dry-run", "--set", f"prompt_data={data}", *official]) == 2
    # the same data with the paper reward passes that check (Search-R1's prompt never teaches '##',
    # so only where the reward does not pay for splitting)
    no_split = ["--set", "agent.reward.weights.lambda_d=0"] if template == "search_r1" else []
    ok = main(["train", "--preset", "paper", "--check", "--skip-probe", "--set", f"prompt_data={data}",
               "--set", "agent.reward.mode=paper", *no_split])  # fmt: skip
    out = capsys.readouterr().out
    assert ok == 0 and f"ok: prompts in template {template} (all 512), scored by reward mode paper" in out


# -- 3. context overflow ---------------------------------------------------------------------------


def test_max_len_too_small_for_a_full_episode_is_refused(tmp_path, capsys, tiny_model_dir):
    data = write_data(tmp_path / "train.jsonl")
    argv = ["train", "--preset", "paper", "--check", "--skip-probe", "--set", f"prompt_data={data}"]
    assert main([*argv, "--set", "max_len=64"]) == 1
    line = check_lines(capsys)[-1]
    assert (
        line.startswith("check failed: max_len 64 < the ")
        and "max_turns 4 x (turn 500 + top_k 3 x passage 160)" in line
    )
    assert "estimated at 4 characters a token" in line and "cut inside <information>" in line
    # with the model's tokenizer on this machine the prompt is counted in its tokens
    assert main([*argv, "--set", f"model={tiny_model_dir}"]) == 0
    out = capsys.readouterr().out
    assert (
        f"tokens counted with the tokenizer of {tiny_model_dir}" in out
        and "ok: max_len 6196 >= prompt " in out
    )


# -- 4. the chat template --------------------------------------------------------------------------


def test_a_tokenizer_without_chat_template_or_without_chatml_is_refused(tmp_path, capsys, tiny_model_dir):
    from transformers import AutoTokenizer

    data = write_data(tmp_path / "train.jsonl")
    argv = ["train", "--preset", "paper", "--check", "--skip-probe", "--set", f"prompt_data={data}"]
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    bare, llama = tmp_path / "bare", tmp_path / "llama3"
    tok.chat_template = None
    tok.save_pretrained(bare)
    tok.chat_template = (
        "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}"
        "<|eot_id|>{% endfor %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    tok.save_pretrained(llama)
    assert main([*argv, "--set", f"model={bare}"]) == 1
    assert f"the tokenizer of {bare} has no chat template" in check_lines(capsys)[-1]
    assert main([*argv, "--set", f"model={llama}", "--set", "agent.reward.mode=official"]) == 1
    line = check_lines(capsys)[-1]
    assert "reward mode official scores what follows '<|im_start|>assistant'" in line and "1.70" in line
    assert main([*argv, "--set", f"model={llama}", "--set", "agent.reward.mode=paper"]) == 0
    # the tiny tokenizer carries ChatML
    assert main([*argv, "--set", f"model={tiny_model_dir}", "--set", "agent.reward.mode=official"]) == 0
    assert f"ok: chat template of {tiny_model_dir}: renders the prompts with '<|im_start|>assistant'" in (
        capsys.readouterr().out
    )


# -- 5. contamination (the check) -----------------------------------------------------------------


def test_check_refuses_evaluation_data_in_training(tmp_path, capsys):
    argv = ["train", "--preset", "paper", "--check", "--skip-probe"]
    flashrag = [{**q, "id": f"test_{i}"} for i, q in enumerate(QUESTIONS)]
    ids = write_data(tmp_path / "ids" / "train.jsonl", questions=flashrag)
    assert main([*argv, "--set", f"prompt_data={ids}"]) == 1
    assert "line 1 is evaluation data (id 'test_0')" in check_lines(capsys)[-1]
    train = write_data(tmp_path / "train.jsonl")
    assert main([*argv, "--set", f"prompt_data={train}", "--set", f"eval_data={train}"]) == 1
    assert "is the same data as prompt_data" in check_lines(capsys)[-1]
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(train.read_bytes())
    assert main([*argv, "--set", f"prompt_data={train}", "--set", f"eval_data={copy}"]) == 1
    assert "is the same data as prompt_data" in check_lines(capsys)[-1]
    shared = write_data(tmp_path / "eval.jsonl", questions=QUESTIONS[1:2], score="em")
    assert main([*argv, "--set", f"prompt_data={train}", "--set", f"eval_data={shared}"]) == 1
    assert "1 question(s) are also in prompt_data" in check_lines(capsys)[-1]
    assert main([*argv, "--set", f"prompt_data={shared}"]) == 1  # eval records are not training data
    assert "an eval record (make-train-data --eval)" in check_lines(capsys)[-1]
    held = write_data(
        tmp_path / "held.jsonl", questions=[{"id": "x", "question": "q", "golden_answers": ["a"]}], score="em"
    )
    assert (
        main([*argv, "--set", f"prompt_data={train}", "--set", f"eval_data={held}", "--set", "eval_steps=5"])
        == 0
    )
    assert "eval_data shares no question with it" in capsys.readouterr().out


# -- 6. the retriever's identity -------------------------------------------------------------------


@needs_data
@pytest.mark.slow
def test_a_retriever_of_another_model_or_corpus_is_refused(retriever, hotpot_store, tmp_path, capsys):
    data = write_data(tmp_path / "train.jsonl")
    argv = paper_argv("--check", sets={"prompt_data": data, "agent.retriever_url": retriever})
    assert main(argv) == 0
    out = capsys.readouterr().out
    fingerprint = hotpot_store.fingerprint()
    assert f"ok: retriever {retriever} serves store hotpot: model all-MiniLM-L6-v2 (dimension 384), " in out
    assert f"corpus fingerprint {fingerprint}" in out
    # the config names e5 (and its prefix): the retriever serving MiniLM is refused, not ignored
    assert main([*argv, "--set", "agent.embedding_model=intfloat/e5-base-v2"]) == 1
    line = check_lines(capsys)[-1]
    assert "serves model 'all-MiniLM-L6-v2' but agent.embedding_model is 'intfloat/e5-base-v2'" in line
    assert main([*argv, "--set", "agent.query_prefix=query: "]) == 1
    assert "serves query_prefix '' but agent.query_prefix is 'query: '" in check_lines(capsys)[-1]
    assert main([*argv, "--set", "agent.retriever_fingerprint=sha256:0000000000000000"]) == 1
    assert f"serves fingerprint '{fingerprint}'" in check_lines(capsys)[-1]
    assert main([*argv, "--set", f"agent.retriever_fingerprint={fingerprint}"]) == 0
    assert "checked against fingerprint" in capsys.readouterr().out
    # the executor repeats it when it starts (its file holds only what was set)
    cfg = paper_preset(agent={"retriever_url": retriever, "embedding_model": "intfloat/e5-base-v2"})
    assert "embedding_model: intfloat/e5-base-v2" in cfg.agent_config_yaml()
    assert "embedding_model" not in paper_preset(agent={"retriever_url": retriever}).agent_config_yaml()
    from parallelsearch.rl.preflight import executor_startup

    with pytest.raises(PreflightError, match="agent.embedding_model is 'intfloat/e5-base-v2'"):
        executor_startup(cfg.agent)


# -- 7. the retriever's key ----------------------------------------------------------------------


@needs_data
def test_a_keyed_retriever_without_a_key_is_refused(hotpot_store, tmp_path, capsys, monkeypatch):
    from parallelsearch.stores import create_retrieval_app

    data = write_data(tmp_path / "train.jsonl")
    monkeypatch.delenv("PARALLELSEARCH_RETRIEVER_API_KEY", raising=False)
    with UvicornThread(create_retrieval_app(hotpot_store, api_key="rk-test-key")) as srv:
        argv = ["train", "--preset", "paper", "--check", "--set", f"prompt_data={data}",
                "--set", f"agent.retriever_url={srv.url}/retrieve"]  # fmt: skip
        assert main(argv) == 1
        line = check_lines(capsys)[-1]
        assert "requires an API key and none is set: export PARALLELSEARCH_RETRIEVER_API_KEY" in line
        monkeypatch.setenv("PARALLELSEARCH_RETRIEVER_API_KEY", "rk-test-key")
        assert main(argv) == 0
        assert "rk-test-key" not in capsys.readouterr().out


# -- 7. the keys reach every actor, through Ray's runtime env, never a command line -----------------


def test_the_retriever_key_travels_in_the_runtime_env(tmp_path, monkeypatch, capsys):
    from test_rl_job import flag, run_script, standins

    key = "rk-'secret-42"
    monkeypatch.setenv("PARALLELSEARCH_RETRIEVER_API_KEY", key)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    data = write_data(tmp_path / "train.jsonl")
    job = tmp_path / "job"
    argv = paper_argv("--runner", "print", "--skip-probe", sets={"job_dir": job, "prompt_data": data})
    assert main(argv) == 0
    assert "runtime env (command.sh writes it from its environment when it runs): " in capsys.readouterr().out
    for path in job.rglob("*"):
        assert path.is_dir() or "secret-42" not in path.read_text(errors="replace"), path
    cwd, _, args = run_script(
        job / "command.sh", tmp_path, standins(tmp_path), PARALLELSEARCH_RETRIEVER_API_KEY=key
    )
    assert not any("secret-42" in a for a in args) and flag(args, "--runtime-env").startswith("/")
    runtime = yaml.safe_load((tmp_path / "standin.log.runtime_env").read_text())
    assert runtime["env_vars"] == {
        "PARALLELSEARCH_AGENT_CONFIG": "parallelsearch_agent.yaml",
        "PARALLELSEARCH_RETRIEVER_API_KEY": key,
    }
    assert not Path(flag(args, "--runtime-env")).exists()  # removed when command.sh ends
    # each actor reads it from its environment into the agent config it builds
    monkeypatch.setenv("PARALLELSEARCH_AGENT_CONFIG", str(job / "parallelsearch_agent.yaml"))
    from parallelsearch.rl.agent_config import load_agent_config

    assert load_agent_config().retriever_api_key.get_secret_value() == key
    # without the key, command.sh stops before submitting
    env = {k: v for k, v in os.environ.items() if k != "PARALLELSEARCH_RETRIEVER_API_KEY"}
    res = subprocess.run(
        ["bash", str(job / "command.sh")], env=env, capture_output=True, text=True, timeout=30
    )
    assert res.returncode != 0 and "export PARALLELSEARCH_RETRIEVER_API_KEY" in res.stderr


# -- 9. a job folder that moves and reads back -------------------------------------------------------


def test_relative_outputs_are_the_job_folders_and_its_config_reads_back(tmp_path, monkeypatch, capsys):
    from test_rl_job import flag, run_script, standins

    from parallelsearch.rl.openrlhf_cli import check_command

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    data = write_data(tmp_path / "made" / "train.jsonl")
    job = tmp_path / "job"
    argv = paper_argv("--runner", "print", "--skip-probe", sets={"job_dir": job, "prompt_data": data})
    assert main(argv) == 0  # save_path is the preset's relative ./checkpoints/parallelsearch
    capsys.readouterr()
    assert str(tmp_path) not in (job / "command.sh").read_text().replace(str(job), "")
    moved = tmp_path / "cluster" / "job"
    shutil.copytree(job, moved)
    shutil.rmtree(job)
    bin_dir = standins(tmp_path)
    _, _, args = run_script(moved / "command.sh", tmp_path, bin_dir)
    ppo = args[args.index("openrlhf.cli.train_ppo_ray") + 1 :]
    assert flag(ppo, "--ckpt.output_dir") == str(moved / "checkpoints" / "parallelsearch")
    assert flag(ppo, "--ckpt.path") == str(moved / "checkpoints" / "parallelsearch" / "ckpt")
    check_command(ppo)
    # the folder's config reads back from any directory (it used to resolve against the current one,
    # or copy the data onto itself: "... are the same file"), and writes the same command
    monkeypatch.chdir(tmp_path)
    assert (
        main(["train", "--config", str(moved / "train_config.yaml"), "--runner", "print", "--skip-probe"])
        == 0
    )
    assert f"run it as: bash {moved / 'command.sh'}" in capsys.readouterr().out
    _, _, again = run_script(moved / "command.sh", tmp_path, bin_dir)
    tmp_file = args.index("--runtime-env") + 1  # mktemp's name differs per run
    assert again[:tmp_file] + again[tmp_file + 1 :] == args[:tmp_file] + args[tmp_file + 1 :]
    # with several nodes a relative output would land on one node: refused, naming the fix
    with pytest.raises(ValueError, match=r"save_path \./checkpoints/parallelsearch is relative with nodes=2"):
        from parallelsearch.rl.launch import plan_job

        plan_job(
            paper_preset(
                nodes=2, vllm_num_engines=16, agent={"retriever_url": "http://10.0.0.5:8000/retrieve"}
            )
        )


# -- 10. rollout and eval do not pass when their searches failed ------------------------------------


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize("command", ["rollout", "eval"])
def test_rollout_and_eval_exit_non_zero_when_searches_failed(
    command, hotpot_comparison_file, tmp_path, capsys
):
    """Every search failed (a closed port), the oracle still answered: rollout printed
    ``failed searches 2 of 2`` and a mean reward of 1.35, and exited 0."""
    url = f"http://127.0.0.1:{free_port()}/retrieve"
    common = ["--retriever", url, "--policy", "oracle", "--limit", "2"]
    if command == "rollout":
        argv = [
            "rollout",
            "--data",
            str(hotpot_comparison_file),
            "--out",
            str(tmp_path / "ep.jsonl"),
            *common,
        ]
    else:
        argv = ["eval", "--dataset", str(hotpot_comparison_file), "--graphs", "parallel", "--no-plots",
                "--out", str(tmp_path / "run"), *common]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        err.startswith(f"error: {command}: ")
        and " searches failed (100.0% > --max-failed-search-share 0.01)" in err
    )
    assert f"against retriever {url}" in err
    # a share the user accepts passes (the scores still say how many failed)
    assert main([*argv, "--max-failed-search-share", "1"]) == 0
