"""``train --check`` in gateway mode: the chat template must be append-only for tool turns (a
generated canonical tool call round-trips; a template that re-renders history, such as one
that drops earlier ``<think>`` blocks, is refused by name); the template's digest is written
into the job folder."""

from __future__ import annotations

import hashlib
import json

import pytest
from engines import SamplingParamsStandIn
from test_training_mistakes import check_lines, write_data

from parallelsearch.cli import main
from parallelsearch.rl.tiny_model import TOOLS_CHAT_TEMPLATE

#: Qwen3's habit, in the tools template: an earlier assistant turn loses its reasoning once a
#: later user message follows
STRIPS_THINKING = TOOLS_CHAT_TEMPLATE.replace(
    "{%- for m in messages %}",
    "{%- set ns = namespace(last=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}{%- for m in messages %}",
    1,
).replace(
    "{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}",
    "{%- set c = m.content or '' %}{%- if m.role == 'assistant' and loop.index0 < ns.last %}"
    "{%- set c = c.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>' + m.role + '\\n' + c + '<|im_end|>\\n' }}",
    1,
)


def _model(tmp_path, tiny_model_dir, name: str, template: str | None):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    if template is not None:
        tok.chat_template = template
    tok.save_pretrained(tmp_path / name)
    return tmp_path / name


def _check(tmp_path, model) -> int:
    data = write_data(tmp_path / "train.jsonl")
    sets = [
        f"prompt_data={data}", f"model={model}", f"job_dir={tmp_path / 'job'}",
        "agent.mode=gateway", "agent.reward.mode=paper",
    ]  # fmt: skip
    return main(
        ["train", "--preset", "paper", "--check", "--skip-probe", *(x for s in sets for x in ("--set", s))]
    )


def test_a_tools_template_passes_and_its_digest_is_in_the_job_folder(tmp_path, capsys, tiny_model_dir):
    model = _model(tmp_path, tiny_model_dir, "tools", TOOLS_CHAT_TEMPLATE)
    assert _check(tmp_path, model) == 0
    out = capsys.readouterr().out
    assert "ok: chat template append-only for tool turns (a canonical tool call round-trips" in out
    written = json.loads((tmp_path / "job" / "chat_template.json").read_text())
    assert written == {
        "model": str(model),
        "chat_template_sha256": hashlib.sha256(TOOLS_CHAT_TEMPLATE.encode()).hexdigest(),
    }


@pytest.mark.parametrize(
    ("template", "named"),
    [
        (None, "is not read back as the call by the Hermes reader"),  # the tiny ChatML template has no tools
        (STRIPS_THINKING, "it strips <think> blocks from earlier assistant turns"),
    ],
    ids=["no_tool_calls", "strips_thinking"],
)
def test_a_template_that_is_not_append_only_is_refused_by_name(
    tmp_path, capsys, tiny_model_dir, template, named
):
    model = _model(tmp_path, tiny_model_dir, "bad", template)
    assert _check(tmp_path, model) == 1
    line = check_lines(capsys)[-1]
    assert (
        line.startswith("check failed: the chat template is not append-only for tool turns") and named in line
    )
    assert not (tmp_path / "job" / "chat_template.json").exists()


def test_the_budget_counts_the_gateway_agents_own_first_prompt(tmp_path, capsys, tiny_model_dir):
    """In gateway mode the context budget starts from the chat agent's first model call (its system
    prompt and the search tool, as the gateway renders them), not the text environment's prompt."""
    import asyncio
    import re

    from gateway_support import END, engine
    from test_training_mistakes import QUESTIONS
    from transformers import AutoTokenizer

    from parallelsearch.graphs.config import GraphConfig
    from parallelsearch.rl.data import train_record
    from parallelsearch.rl.gateway import gateway_chat_model
    from parallelsearch.rl.gateway.executor import GatewayExecutor
    from parallelsearch.rl.gateway.factory import default_agent

    model = _model(tmp_path, tiny_model_dir, "tools", TOOLS_CHAT_TEMPLATE)
    assert _check(tmp_path, model) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("ok: max_len "))
    counted = int(re.search(r">= prompt (\d+) \+", line).group(1))
    assert "the prompt is the gateway agent's first model call" in line
    # the agent's first prompt, from a real episode of the preset's graph through the gateway
    tok = AutoTokenizer.from_pretrained(model)
    gc = GraphConfig(top_k=3, max_turns=4, prompt_template="official")
    executor = GatewayExecutor(default_agent("parallel", gc)(gateway_chat_model(), lambda q: []))
    firsts = []
    for q in QUESTIONS:
        rec = train_record(q, template="official")  # as write_data wrote the run's prompt file
        eng = engine(tok, ["no idea" + END])
        asyncio.run(executor.execute(rec["prompt"], rec["label"], SamplingParamsStandIn(), 8192, tok, eng))
        firsts.append(executor.last_session.ledger.prompt_len)
    assert counted == max(firsts)
    text_prompt = int(re.search(r">= prompt (\d+) \+", _text_mode_line(tmp_path, model, capsys)).group(1))
    assert counted != text_prompt  # what the check counted before: the text environment's prompt


def _text_mode_line(tmp_path, model, capsys) -> str:
    data = write_data(tmp_path / "train.jsonl")
    sets = [f"prompt_data={data}", f"model={model}", "agent.reward.mode=paper"]
    argv = ["train", "--preset", "paper", "--check", "--skip-probe", *(x for s in sets for x in ("--set", s))]
    assert main(argv) == 0
    return next(x for x in capsys.readouterr().out.splitlines() if x.startswith("ok: max_len "))
