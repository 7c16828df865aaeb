"""vLLM tier: OpenRLHF 0.11.2's own rollout, experience and loss code driving our executor.

- ``RolloutRayActor`` (constructed in-process, its ``__init__``, ``generate`` and
  ``generate_responses`` unchanged) over a real vLLM ``AsyncLLM`` on the tiny model, loading
  ``rl/openrlhf_agent.py`` through OpenRLHF's ``_load_agent_executor``, searching a real
  ``/retrieve`` server, n samples per prompt at once, constrained decoding so episodes search;
- ``SamplesGenerator._process_response_into_experience`` turns each result into an
  ``Experience``;
- one policy-gradient step on CPU with OpenRLHF's ``Actor`` log-probs and ``PolicyLoss`` over
  the tiny model as a Hugging Face model.

Ray cannot place OpenRLHF's GPU placement groups here, so the actor is built without Ray
(rl/openrlhf_cpu.py); flash-attn has no CPU build, so stand-ins cover its imports only
while ``openrlhf.models`` imports.
"""

from __future__ import annotations

import json

import pytest
from conftest import UvicornThread, needs_data
from engines import recording_episodes
from rollout_actor import responses, rollout_actor, tokenizer_fixture  # noqa: F401 - the `tokenizer` fixture

pytestmark = [pytest.mark.vllm, needs_data]
vllm = pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (make test-vllm)")
pytest.importorskip("openrlhf", reason="OpenRLHF is installed with --no-deps in the vLLM tier")

import torch  # noqa: E402

from parallelsearch.rl import score_trajectory  # noqa: E402
from parallelsearch.rl.data import train_record  # noqa: E402
from parallelsearch.rl.episode import decode_tokens  # noqa: E402
from parallelsearch.training.one_step import actor_log_probs  # noqa: E402

SAMPLES = 4
MAX_LEN = 8000
TURN_CAP = 1000  # the agent config's max_new_tokens


@pytest.fixture(scope="module")
def retriever(hotpot_store):
    from parallelsearch.stores import create_retrieval_app

    with UvicornThread(create_retrieval_app(hotpot_store)) as srv:
        yield srv


@pytest.fixture(scope="module")
def actor(tiny_model_dir, retriever, module_loop, monkeypatch_module, tmp_path_factory):
    """OpenRLHF's rollout actor with our agent module, the way train_ppo_ray creates it (minus Ray)."""
    config = tmp_path_factory.mktemp("agent") / "agent.yaml"
    config.write_text(
        f"retriever_url: {retriever.url}/retrieve\nconstrained: true\nconstrained_think_chars: 80\n"
        "graph_config:\n  top_k: 1\n  max_turns: 2\n  max_subqueries: 2\n  max_new_tokens: 1000\n"
        "  prompt_template: official\n"
    )
    with rollout_actor(tiny_model_dir, config, monkeypatch_module, module_loop) as actor:
        yield actor


@pytest.fixture(scope="module")
def rollouts(actor, tokenizer, hotpot_questions, module_loop):
    """Records what vLLM generated, then runs n samples of two comparison questions."""
    generated: list[tuple[list[int], list[int]]] = []
    real_generate = type(actor).generate

    async def recording_generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        out = await real_generate(self, prompt_token_ids, sampling_params, multi_modal_data)
        generated.append((list(prompt_token_ids), list(out.outputs[0].token_ids)))
        return out

    type(actor).generate = recording_generate
    try:
        with recording_episodes() as envs:
            questions = [q for q in hotpot_questions if q["metadata"]["type"] == "comparison"][:2]
            records = [train_record(q, template="official", tokenizer=tokenizer) for q in questions]
            results = []
            for rec in records:
                results += responses(actor, module_loop, rec, tokenizer, samples=SAMPLES, max_len=MAX_LEN)
    finally:
        type(actor).generate = real_generate
    return results, generated, envs


def to_experience(result, max_len=MAX_LEN):
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    gen = SamplesGenerator.__new__(SamplesGenerator)  # the method uses no state of the generator
    return gen._process_response_into_experience(result, max_len=max_len)


def test_rollout_actor_runs_our_executor_concurrently_and_episodes_search(rollouts, actor):
    results, generated, envs = rollouts
    assert len(results) == 2 * SAMPLES and len(envs) == 2 * SAMPLES
    assert type(actor.executor).__module__ == "agent_module"  # loaded by OpenRLHF's _load_agent_executor
    assert actor.get_num_unfinished_requests() == 0
    rounds = [float(r["extra_logs"]["search_rounds"]) for r in results]
    assert sum(rounds) >= 2, rounds  # constrained decoding: the random model really searches
    # every turn is a grammatical action unless the token cap cut it (a byte-level token can be less
    # than a character, so the grammar's longest turn is not a bound in tokens)
    for r in results:
        cut = r["truncated"] or any(b - a >= TURN_CAP for a, b in r["action_ranges"])
        assert float(r["extra_logs"]["format_valid"]) == 1.0 or cut
    assert any('<information>Doc 1(Title: "' in e.transcript for e in envs)  # official rendering


def test_experiences_mask_exactly_what_vllm_generated(rollouts, tokenizer):
    results, generated, envs = rollouts
    by_prompt: dict[tuple[int, ...], list[list[int]]] = {}
    for p, ids in generated:  # the n samples of one prompt share their first request's prompt
        by_prompt.setdefault(tuple(p), []).append(ids)
    for result in results:
        exp = to_experience(result)
        seq = exp.sequences[0].tolist()
        assert seq == result["observation_tokens"][:MAX_LEN]
        # action_mask (shifted by one, as OpenRLHF aligns it with next-token log-probs) is 1 exactly
        # on the tokens vLLM generated: each range is one engine call's output, in order
        expected = [0] * len(seq)
        for a, b in result["action_ranges"]:
            assert seq[a:b] in by_prompt[tuple(seq[:a])]
            expected[a:b] = [1] * (b - a)
        assert exp.action_mask[0].tolist() == expected[1:]
        # rollout log-probs line up with the mask: vLLM's values on actions, zeros elsewhere
        lps = exp.rollout_log_probs[0].tolist()
        assert len(lps) == len(expected) - 1
        assert all((lp <= 0) if m else lp == 0.0 for lp, m in zip(lps, expected[1:], strict=True))
        assert any(lp < 0 for lp, m in zip(lps, expected[1:], strict=True) if m)
        # rewards and scores are score_trajectory on the decoded sequence, the prompt's end known in tokens
        prompt_len = result["action_ranges"][0][0]
        text = decode_tokens(tokenizer, seq)
        want = score_trajectory(
            text, json.loads(result["label"]), "paper", prompt=decode_tokens(tokenizer, seq[:prompt_len])
        )
        assert exp.rewards.item() == pytest.approx(want.total) and exp.scores.item() == pytest.approx(
            want.outcome
        )
        assert exp.info["reward_format"].item() == pytest.approx(want.format)
    # sequences decode to prompt + the transcript the environment kept (no token/text drift)
    for result, env in zip(results, envs, strict=True):
        if not (result["truncated"] or result["extra_logs"]["overflowed"].item()):  # nothing cut
            text = decode_tokens(tokenizer, result["observation_tokens"])
            assert text == result["prompt"] + env.transcript[len(env.prompt) :]


def test_truncation_at_max_len_is_flagged(actor, tokenizer, hotpot_questions, module_loop):
    q = next(q for q in hotpot_questions if q["metadata"]["type"] == "comparison")
    rec = train_record(q, template="official", tokenizer=tokenizer)
    prompt_len = len(tokenizer(rec["prompt"], add_special_tokens=False)["input_ids"])
    max_len = prompt_len + 40
    [result] = responses(actor, module_loop, rec, tokenizer, samples=1, max_len=max_len)
    exp = to_experience(result, max_len=max_len)
    assert result["truncated"] and exp.truncated.item() is True
    assert exp.sequences.shape[1] <= max_len


def test_one_policy_gradient_step_on_cpu(rollouts, tiny_model_dir):
    """OpenRLHF's Actor log-probs and PolicyLoss over the tiny model: a finite loss, parameters that
    change, and a loss that does not depend on retrieved (masked) tokens."""
    results, _, _ = rollouts
    actor, batch, log_probs = actor_log_probs(tiny_model_dir, [to_experience(r) for r in results])
    from openrlhf.models import PolicyLoss

    assert log_probs.shape == batch.action_mask.shape
    # advantages: each episode's reward minus the mean of its prompt's samples (GRPO-style), spread over
    # EVERY position (not masked), so only the loss's own action mask can keep retrieved tokens out
    rewards = batch.rewards.view(-1, SAMPLES)
    adv = (rewards - rewards.mean(dim=1, keepdim=True)).view(-1, 1) + 0.5 * torch.ones_like(log_probs)
    loss_fn = PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.28)
    loss = loss_fn(log_probs, log_probs.detach(), adv, action_mask=batch.action_mask)[0]
    assert torch.isfinite(loss)
    before = {n: p.detach().clone() for n, p in actor.named_parameters()}
    opt = torch.optim.SGD(actor.parameters(), lr=1.0)
    opt.zero_grad()
    loss.backward()
    opt.step()
    changed = sum(not torch.equal(before[n], p.detach()) for n, p in actor.named_parameters())
    assert changed > 0
    # the loss ignores retrieved tokens: change a log-prob where the action mask is 0
    retrieved = (batch.action_mask == 0) & (batch.attention_mask[:, 1:] == 1)
    assert retrieved.any()
    pos = retrieved.nonzero()[0].tolist()
    lp = log_probs.detach().clone()
    shifted = lp.clone()
    shifted[pos[0], pos[1]] -= 5.0
    same_old = lp.clone()
    a = loss_fn(lp, same_old, adv, action_mask=batch.action_mask)[0]
    b = loss_fn(shifted, same_old, adv, action_mask=batch.action_mask)[0]
    assert a.item() == pytest.approx(b.item())
    action = (batch.action_mask == 1).nonzero()[0].tolist()
    moved = lp.clone()
    moved[action[0], action[1]] -= 0.1
    c = loss_fn(moved, same_old, adv, action_mask=batch.action_mask)[0]
    assert c.item() != pytest.approx(a.item())  # the same change on an action token does move it
