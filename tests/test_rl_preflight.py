"""Pre-flight checks and the executor's search-failure guard, against real servers on 127.0.0.1.

The four failures that used to show only on the cluster (or never) are each caught before
submission or when the executor starts, with one line naming the cause; failed searches
during a run stop it instead of becoming training observations.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from conftest import UvicornThread, fill_batch, free_port, needs_data
from engines import SamplingParamsStandIn, ScriptedEngine, load_like_openrlhf
from train_args import paper_argv

from parallelsearch.cli import main
from parallelsearch.rl.agent_config import ENV_VAR, AgentConfig, AgentConfigError, load_agent_config
from parallelsearch.rl.data import make_train_data, train_record
from parallelsearch.rl.preflight import PreflightError, check_resources, check_reward_prompts, probe_retriever
from parallelsearch.rl.search_failures import SearchFailuresError
from parallelsearch.rl.train_config import load_train_config, paper_preset


def closed_url() -> str:
    """A /retrieve URL on a port nothing listens on (a real refused connection)."""
    return f"http://127.0.0.1:{free_port()}/retrieve"


@pytest.fixture(scope="module")
def retriever(hotpot_store):
    from parallelsearch.stores import create_retrieval_app

    with UvicornThread(create_retrieval_app(hotpot_store)) as srv:
        yield srv


class FailsAfter:
    """ASGI wrapper around the real retrieval app: the first ``healthy`` POSTs pass, later ones get a 503."""

    def __init__(self, app, healthy: int):
        self.app, self.healthy, self.posts = app, healthy, 0

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST":
            self.posts += 1
            if self.posts > self.healthy:
                body = b'{"detail": "index shard unavailable"}'
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ]
                await send({"type": "http.response.start", "status": 503, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def write_agent_config(tmp_path, monkeypatch, url: str, **extra) -> None:
    cfg = {
        "retriever_url": url,
        "graph_config": {"top_k": 2, "max_turns": 2, "max_new_tokens": 400, "search_retries": 0},
        **extra,
    }
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(cfg))
    monkeypatch.setenv(ENV_VAR, str(path))


def one_search_episode(executor, tok, q):
    rec = train_record(q)
    turns = [
        f"<think> look it up </think><search> {q['question']} </search>",
        f"<think> done </think><answer> {q['golden_answers'][0]} </answer>",
    ]
    return asyncio.run(
        executor.execute(
            rec["prompt"], rec["label"], SamplingParamsStandIn(), 4096, tok, ScriptedEngine(tok, turns)
        )
    )


# -- the four failures of a GPU run, each caught early with one line ------------------------


def train_check(*settings: str) -> int:
    """``train --preset paper --check`` with each of ``settings`` as a ``--set``."""
    return main(["train", "--preset", "paper", "--check", *(x for kv in settings for x in ("--set", kv))])


def test_unreachable_retriever_is_refused_by_check_and_by_the_executor(tmp_path, monkeypatch, capsys):
    url = closed_url()
    data = tmp_path / "train.jsonl"
    q = {"id": "1", "question": "q", "golden_answers": ["a"]}
    data.write_text(json.dumps(train_record(q, template="official")) + "\n")
    fill_batch(data)
    code = train_check(f"agent.retriever_url={url}", f"prompt_data={data}")
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 1
    assert len(out) == 1 and out[0].startswith("check failed: the retriever ") and url in out[0]
    assert "Connect" in out[0]  # the cause: the connection is refused
    write_agent_config(tmp_path, monkeypatch, url)
    with pytest.raises(PreflightError, match=f"retriever {url} does not answer a probe query"):
        load_like_openrlhf()


def test_typo_in_a_reward_weight_fails_when_the_config_is_built(tmp_path, monkeypatch):
    with pytest.raises(
        ValueError, match=r"agent\.reward\.weights: unknown reward weight 'lamda_d'.*did you mean 'lambda_d'"
    ):
        load_train_config(preset="paper", overrides=["agent.reward.weights.lamda_d=0.3"])
    with pytest.raises(ValueError, match="did you mean 'lambda_d'"):
        AgentConfig(retriever_url="http://h/retrieve", reward={"mode": "paper", "weights": {"lamda_d": 0.3}})
    assert AgentConfig(
        retriever_url="http://h/retrieve", reward={"weights": {"lambda_d": 0.3}}
    ).reward.weights
    # the executor's own file is checked at load, before any episode
    write_agent_config(tmp_path, monkeypatch, "http://h/retrieve", reward={"weights": {"lamda_d": 0.3}})
    with pytest.raises(AgentConfigError, match=r"reward\.weights: unknown reward weight 'lamda_d'"):
        load_agent_config()


def test_gpu_arithmetic_uses_openrlhf_train_assertions(capsys):
    assert main(["train", "--preset", "paper", "--dry-run", "--set", "gpus_per_node=4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "OpenRLHF's train() would fail on the cluster" in err[0]
    assert "vllm_num_engines * vllm_tensor_parallel_size, got 4 and 8" in err[0]
    # the same config with 4 engines adds up
    assert "<= 4 available" in check_resources(paper_preset(gpus_per_node=4, vllm_num_engines=4))
    # no colocation: each group needs GPUs of its own (OpenRLHF has no check; Ray would wait forever)
    with pytest.raises(
        PreflightError, match=r"actor 8 \+ ref 8 \+ critic 8 \+ vLLM 8 x 1 = 8 -> 32 GPUs.*= 8"
    ):
        check_resources(paper_preset(colocate_all=False))
    with pytest.raises(PreflightError, match="vllm_tensor_parallel_size 16 exceeds gpus_per_node 8"):
        check_resources(
            paper_preset(
                vllm_num_engines=1,
                vllm_tensor_parallel_size=16,
                nodes=2,
                agent={"retriever_url": "http://10.0.0.5:8000/retrieve"},
            )
        )


def test_loopback_retriever_with_several_nodes_is_refused():
    with pytest.raises(
        ValueError,
        match=r"agent\.retriever_url http://127\.0\.0\.1:8000/retrieve is a loopback address with nodes=2",
    ):
        load_train_config(preset="paper", overrides=["nodes=2", "vllm_num_engines=16"])
    for host in ("localhost", "[::1]", "127.0.0.2"):
        with pytest.raises(ValueError, match="loopback"):
            paper_preset(
                nodes=2, vllm_num_engines=16, agent={"retriever_url": f"http://{host}:8000/retrieve"}
            )
    cfg = paper_preset(nodes=2, vllm_num_engines=16, agent={"retriever_url": "http://10.0.0.5:8000/retrieve"})
    assert "<= 16 available" in check_resources(cfg)
    assert paper_preset(nodes=1).agent.retriever_url.startswith("http://127.0.0.1")


# -- reward mode and prompts agree ----------------------------------------------------------


def test_reward_mode_and_prompts_must_agree(tmp_path):
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"prompt": "Answer ... Question: q?\n", "label": "{}"}) + "\n")
    templated = tmp_path / "templated.jsonl"
    templated.write_text(
        json.dumps(
            {"prompt": "<|im_start|>user\nQuestion: q?<|im_end|>\n<|im_start|>assistant\n", "label": "{}"}
        )
        + "\n"
    )
    rec = lambda p: json.loads(p.read_text())  # noqa: E731
    official = {"reward": {"mode": "official"}}
    # official reward on raw prompts without OpenRLHF's chat template: every episode would fail the format
    cfg = paper_preset(prompt_data=str(raw), apply_chat_template=False, agent=official)
    with pytest.raises(PreflightError, match="set apply_chat_template=true"):
        check_reward_prompts(cfg, rec(raw))
    # templated twice
    with pytest.raises(PreflightError, match="template them twice"):
        check_reward_prompts(paper_preset(prompt_data=str(templated)), rec(templated))
    # the stated default: raw prompts, OpenRLHF templates them, paper-strict reward (official: also)
    assert "paper-strict" in check_reward_prompts(paper_preset(prompt_data=str(raw)), rec(raw))
    assert "official" in check_reward_prompts(paper_preset(prompt_data=str(raw), agent=official), rec(raw))
    assert check_reward_prompts(
        paper_preset(prompt_data=str(templated), apply_chat_template=False), rec(templated)
    )
    assert check_reward_prompts(
        paper_preset(prompt_data=str(raw), apply_chat_template=False, agent={"reward": {"mode": "paper"}}),
        rec(raw),
    )
    # the launcher refuses the mismatch at the dry run
    assert (
        main(
            [
                "train",
                "--preset",
                "paper",
                "--dry-run",
                "--set",
                f"prompt_data={raw}",
                "--set",
                "apply_chat_template=false",
                "--set",
                "agent.reward.mode=official",
            ]
        )
        == 2
    )


def test_protocol_reward_mode_and_prompts_must_agree(tmp_path, capsys):
    """The tool-call text form (``agent.graph_config.protocol: tools``) is scored in paper mode
    only, and its prompts must teach <tool_call> blocks; the tags' prompts must not."""
    from parallelsearch.rl.preflight import check_protocol

    q = {
        "id": "1",
        "question": "Who is older, A or B",
        "golden_answers": ["A"],
        "metadata": {"type": "comparison"},
    }
    tags_data, tools_data = tmp_path / "tags.jsonl", tmp_path / "tools.jsonl"
    tags_data.write_text(json.dumps(train_record(q)) + "\n")
    tools_data.write_text(json.dumps(train_record(q, template="tool_text")) + "\n")
    rec = lambda p: json.loads(p.read_text())  # noqa: E731
    tools = {"graph_config": {"protocol": "tools"}, "reward": {"mode": "paper"}}
    # the official mode reproduces the official code's numbers for the tags only
    official = paper_preset(
        prompt_data=str(tools_data),
        agent={"graph_config": {"protocol": "tools"}, "reward": {"mode": "official"}},
    )
    with pytest.raises(PreflightError, match="set agent.reward.mode=paper"):
        check_protocol(official, rec(tools_data))
    # the dag mode scores the #k plan of <search> tags: refused here as the environment refuses it
    dag = {"graph_config": {"protocol": "tools"}, "reward": {"mode": "dag"}}
    with pytest.raises(PreflightError, match="reward.mode dag"):
        check_protocol(paper_preset(prompt_data=str(tools_data), agent=dag), rec(tools_data))
    # prompts made with the tags' template would train the policy on a protocol the environment does not read
    with pytest.raises(PreflightError, match="--template tool_text"):
        check_protocol(paper_preset(prompt_data=str(tags_data), agent=tools), rec(tags_data))
    with pytest.raises(PreflightError, match="set agent.graph_config.protocol=tools"):
        check_protocol(paper_preset(prompt_data=str(tools_data)), rec(tools_data))
    good = paper_preset(prompt_data=str(tools_data), agent=tools)
    assert check_protocol(good, rec(tools_data)) == "protocol tools (tool-call text form): reward mode paper"
    assert check_protocol(paper_preset(prompt_data=str(tags_data)), rec(tags_data)).startswith(
        "protocol tags"
    )
    # the YAML key reaches the file every Ray actor reads
    assert "protocol: tools" in good.agent_config_yaml()
    # the launcher refuses the mismatch at the dry run, naming the fix
    argv = ["train", "--preset", "paper", "--dry-run", "--set", f"prompt_data={tools_data}"]
    assert (
        main([*argv, "--set", "agent.graph_config.protocol=tools", "--set", "agent.reward.mode=official"])
        == 2
    )
    assert "set agent.reward.mode=paper" in capsys.readouterr().err


# -- train --check against a real retriever --------------------------------------------------


@needs_data
def test_check_passes_against_a_real_retriever(retriever, hotpot_comparison_file, tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    make_train_data([hotpot_comparison_file], data, template="official", limit=4, allow_eval_questions=True)
    fill_batch(data)
    code = train_check(f"agent.retriever_url={retriever.url}/retrieve", f"prompt_data={data}")
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"ok: retriever {retriever.url}/retrieve answered a probe query" in out
    assert "ok: GPUs: actor/ref/critic/vLLM colocated on 1 x 8 = 8 <= 8 available" in out
    assert "ok: reward mode paper-strict: OpenRLHF chat-templates the prompts" in out
    assert "probe" in probe_retriever(AgentConfig(retriever_url=f"{retriever.url}/retrieve"))


# -- no silent search failures in training ---------------------------------------------------


@needs_data
def test_closed_port_stops_the_run_at_the_first_failed_search(
    tmp_path, monkeypatch, hotpot_questions, tiny_lm
):
    _, tok = tiny_lm
    url = closed_url()
    write_agent_config(tmp_path, monkeypatch, url, search_failures={"probe": False})
    executor = load_like_openrlhf()
    with pytest.raises(SearchFailuresError) as err:
        one_search_episode(executor, tok, hotpot_questions[0])
    msg = str(err.value)
    assert "1 of 1 searches failed in the first 1 episode(s)" in msg and url in msg and "Connect" in msg
    # the run stays stopped: no later episode trains on the failure
    with pytest.raises(SearchFailuresError):
        one_search_episode(executor, tok, hotpot_questions[1])


@contextlib.contextmanager
def guarded_executor(store, tmp_path, monkeypatch, *, healthy: int, max_share: float):
    """(executor loaded as OpenRLHF loads it, server) over a /retrieve server of ``store`` that
    answers ``healthy`` requests and then 503s; the guard judges after 2 episodes."""
    from parallelsearch.stores import create_retrieval_app

    with UvicornThread(FailsAfter(create_retrieval_app(store), healthy=healthy)) as srv:
        failures = {"first_episodes": 2, "max_share": max_share}
        write_agent_config(tmp_path, monkeypatch, f"{srv.url}/retrieve", search_failures=failures)
        yield load_like_openrlhf(), srv


@needs_data
def test_server_failing_midway_stops_the_run_past_the_share(
    hotpot_store, tmp_path, monkeypatch, hotpot_questions, tiny_lm
):
    _, tok = tiny_lm
    # healthy for the probe + 3 episodes (the probe passes)
    with guarded_executor(hotpot_store, tmp_path, monkeypatch, healthy=4, max_share=0.2) as (executor, srv):
        for q in hotpot_questions[:3]:
            result = one_search_episode(executor, tok, q)
            assert result["extra_logs"]["search_errors"].item() == 0
            assert result["extra_logs"]["subqueries"].item() == 1, (result["extra_logs"], result["reward"])
        with pytest.raises(SearchFailuresError) as err:
            one_search_episode(executor, tok, hotpot_questions[3])
    msg = str(err.value)
    assert "1 of 4 searches failed (25.0% > agent.search_failures.max_share=0.2)" in msg
    assert "503" in msg and srv.url in msg


@needs_data
def test_failed_searches_below_the_share_are_logged_per_episode(
    hotpot_store, tmp_path, monkeypatch, hotpot_questions, tiny_lm
):
    _, tok = tiny_lm
    # healthy for the probe + 2 episodes
    with guarded_executor(hotpot_store, tmp_path, monkeypatch, healthy=3, max_share=0.5) as (executor, _):
        logs = [one_search_episode(executor, tok, q)["extra_logs"] for q in hotpot_questions[:3]]
    assert [x["search_errors"].item() for x in logs] == [0, 0, 1]
    assert logs[2]["search_failed_share"].item() == 1.0
    assert executor.search_guard.failed == 1 and executor.search_guard.searches == 3


def test_rollout_summary_counts_failed_searches():
    from parallelsearch.rl.rollout import RolloutSummary

    s = RolloutSummary()
    reward = {
        "total": 0.1,
        "outcome": 0.0,
        "decomposition": 0.0,
        "search_count": 0.0,
        "format": 0.1,
        "format_valid": True,
        "correct": False,
        "question_class": "single",
        "decomposed": False,
    }
    s.add({"reward": reward, "subqueries": 2, "search_errors": 2, "policy_calls": 2})
    s.add({"reward": reward, "subqueries": 1, "search_errors": 0, "policy_calls": 2})
    assert s.to_dict()["failed_searches"] == 2 and s.to_dict()["searches"] == 3
    assert s.lines()[0] == "episodes 2, failures 0, failed searches 2 of 3 (in 1 episodes)"


@needs_data
def test_submission_runs_the_checks_first(retriever, hotpot_comparison_file, tmp_path, monkeypatch, capsys):
    """`train` (runner ray) probes the retriever before `ray job submit`; a dead one stops it there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    ray.write_text('#!/usr/bin/env bash\n# stand-in for the ray CLI\necho "$PWD" > "$STANDIN_LOG"\n')
    ray.chmod(0o755)
    log = tmp_path / "ray.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("STANDIN_LOG", str(log))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    data = tmp_path / "train.jsonl"
    make_train_data([hotpot_comparison_file], data, template="official", limit=4, allow_eval_questions=True)
    fill_batch(data)
    argv = paper_argv(sets={"prompt_data": data, "save_path": tmp_path / "c"})
    dead = [*argv, "--set", f"agent.retriever_url={closed_url()}", "--set", f"job_dir={tmp_path / 'dead'}"]
    assert main(dead) == 2
    assert "does not answer a probe query" in capsys.readouterr().err and not log.exists()
    live = [
        *argv,
        "--set",
        f"agent.retriever_url={retriever.url}/retrieve",
        "--set",
        f"job_dir={tmp_path / 'j'}",
    ]
    assert main(live) == 0
    out = capsys.readouterr().out
    assert "# check: retriever" in out and log.read_text().strip() == str(tmp_path / "j")


@needs_data
def test_failed_search_in_a_truncated_episode_is_counted(tmp_path, monkeypatch, hotpot_questions, tiny_lm):
    _, tok = tiny_lm
    url = closed_url()
    limits = {"probe": False, "first_episodes": 0, "max_share": 1.0}  # count, never stop
    write_agent_config(tmp_path, monkeypatch, url, search_failures=limits)
    executor = load_like_openrlhf()
    q = hotpot_questions[0]
    rec = train_record(q)
    turns = ["<search> x </search>", "<think> " + "very long thinking " * 200 + "</think>"]
    prompt_len = len(tok(rec["prompt"], add_special_tokens=False)["input_ids"])
    result = asyncio.run(
        executor.execute(
            rec["prompt"],
            rec["label"],
            SamplingParamsStandIn(),
            prompt_len + 300,
            tok,
            ScriptedEngine(tok, turns),
        )
    )
    assert result["truncated"] and len(result["action_ranges"]) == 2
    assert (
        result["extra_logs"]["search_errors"].item() == 1 and result["extra_logs"]["subqueries"].item() == 1
    )
    assert executor.search_guard.failed == 1
