"""vLLM tier: gateway mode through OpenRLHF 0.11.2's own rollout actor over a real vLLM
``AsyncLLM`` on the tiny model (with the Hermes tools template), the README chat agent (LangChain's
``ChatOpenAI`` in-process), a real ``/retrieve`` server, 8 episodes of a prompt at once.

A random model never writes a tool call by itself, so the test's engine wrapper decodes every
turn under the tool-call grammar: episodes really search, every turn but the first is rendered
as a suffix after tool responses, and the final turn's call is refused by the agent. Each engine
call is recorded; every sample's trained span must be exactly a recorded call's output on
exactly the ids it was sent, with vLLM's own log-probs, and nothing re-tokenised.
"""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import UvicornThread, long_work, needs_data
from rollout_actor import responses, rollout_actor

pytestmark = [pytest.mark.vllm, needs_data, long_work]  # 200 episodes on the engine
vllm = pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (make test-vllm)")
pytest.importorskip("openrlhf", reason="OpenRLHF is installed with --no-deps in the vLLM tier")

from parallelsearch.agents.protocol.grammar import tool_call_search_regex  # noqa: E402
from parallelsearch.rl.data import train_record  # noqa: E402
from parallelsearch.rl.executor import turn_params  # noqa: E402

#: episodes in all (8 samples of each prompt at once, as OpenRLHF's n_samples_per_prompt runs them)
EPISODES = int(os.environ.get("GATEWAY_VLLM_EPISODES", "200"))
SAMPLES = 8
MAX_LEN = 4096
#: one or two search calls of up to 24 characters each
GRAMMAR = tool_call_search_regex(2, 1, 24)


@pytest.fixture(scope="module")
def tools_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with the Hermes tools chat template (what ``vllm serve`` with tools uses)."""
    from transformers import AutoTokenizer

    from parallelsearch.rl.tiny_model import TOOLS_CHAT_TEMPLATE

    folder = tmp_path_factory.mktemp("tiny-tools")
    shutil.copytree(tiny_model_dir, folder, dirs_exist_ok=True)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = TOOLS_CHAT_TEMPLATE
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def gateway_actor(tools_model_dir, hotpot_store, module_loop, monkeypatch_module, tmp_path_factory):
    from parallelsearch.stores import create_retrieval_app

    with UvicornThread(create_retrieval_app(hotpot_store)) as srv:
        config = tmp_path_factory.mktemp("agent") / "agent.yaml"
        config.write_text(
            f"retriever_url: {srv.url}/retrieve\nmode: gateway\nreward:\n  mode: paper\n"
            "graph_config:\n  top_k: 1\n  max_turns: 2\n  max_new_tokens: 200\n"
        )
        with rollout_actor(tools_model_dir, config, monkeypatch_module, module_loop) as actor:
            yield actor


def test_gateway_episodes_on_vllm_are_token_exact(
    gateway_actor, tools_model_dir, hotpot_questions, module_loop
):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tools_model_dir)
    calls: list[tuple[list[int], list[int], list[float]]] = []
    real = type(gateway_actor).generate

    async def under_grammar(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        params = turn_params(sampling_params, stop=(), max_tokens=sampling_params.max_tokens, regex=GRAMMAR)
        out = await real(self, prompt_token_ids, params, multi_modal_data)
        o = out.outputs[0]
        lps = [entry[t].logprob for t, entry in zip(o.token_ids, o.logprobs, strict=True)]
        calls.append((list(prompt_token_ids), list(o.token_ids), lps))
        return out

    type(gateway_actor).generate = under_grammar
    try:
        results = []
        for i in range(EPISODES // SAMPLES):
            rec = train_record(
                hotpot_questions[i % len(hotpot_questions)], template="tool_text", tokenizer=tok
            )
            results += responses(gateway_actor, module_loop, rec, tok, samples=SAMPLES, max_len=MAX_LEN)
    finally:
        type(gateway_actor).generate = real
    assert len(results) == EPISODES
    recorded = {(tuple(p), tuple(o)): lps for p, o, lps in calls}
    mismatched = trained = 0
    for r in results:
        seq, lps = r["observation_tokens"], r["rollout_log_probs"]
        for a, b in r["action_ranges"]:
            key = (tuple(seq[:a]), tuple(seq[a:b]))
            mismatched += key not in recorded or recorded[key] != lps[a:b]
            trained += 1
        logs = {k: float(v) for k, v in r["extra_logs"].items()}
        assert logs["gateway_token_mismatches"] == 0 and logs["gateway_retokenized"] == 0
        assert logs["gateway_forks"] == 0 and logs["gateway_failed_closed"] == 0
    searched = sum(float(r["extra_logs"]["search_rounds"]) for r in results)
    print(
        f"\n{EPISODES} gateway episodes on vLLM: {trained} turns trained, {len(calls)} engine calls, "
        f"{searched:.0f} search rounds, {mismatched} turns differing from the engine's recorded calls"
    )
    assert mismatched == 0 and trained == len(calls) and searched > 0
