"""What the policy is told: the prompt templates of every protocol and the search tool's schema.

The tags templates are byte-for-byte the official code's (released checkpoints were trained on
them); the tool-calling ones say the same for a model that calls a ``search`` tool.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from parallelsearch.stores.text import scrub_text

#: The official ParallelSearch code's prompt (scripts/data_process/qa_search_train_merge.py),
#: which released checkpoints were trained on.
OFFICIAL_TEMPLATE = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you "
    "get new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. If the original query is complex or involves multiple parts, you are encouraged to "
    "decompose it into smaller sub-questions, separated by ##. For example: <search> sub-question 1 ## "
    "sub-question 2 </search>. You can search as many times as your want. If you find no further external "
    "knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed "
    "illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
)

#: The paper's Table 1 template (its wording is not available offline; it describes the official
#: code's instructions, so this is that text with the typo fixed).
PAPER_TEMPLATE = OFFICIAL_TEMPLATE.replace("as many times as your want", "as many times as you want")

#: Search-R1's prompt (one query per search; used by the sequential baseline): the official one
#: without its sentences on decomposing.
SEARCH_R1_TEMPLATE = OFFICIAL_TEMPLATE.replace(
    "If the original query is complex or involves multiple parts, you are encouraged to decompose it into "
    "smaller sub-questions, separated by ##. "
    "For example: <search> sub-question 1 ## sub-question 2 </search>. ",
    "",
)

#: The ``dag`` graph's prompt: the paper's plus one sentence teaching ``#k``, so a dependent chain
#: costs one turn, not one per hop.
DAG_TEMPLATE = PAPER_TEMPLATE.replace(
    "sub-question 2 </search>. ",
    "sub-question 2 </search>. If a sub-question needs the answer of an earlier one, refer to that answer "
    "as #k, where k is the earlier sub-question's position in the same search (#1 is the first); it is "
    "searched once #k is known. For example: <search> county of Van Hook Township ## seat of #1 </search>. ",
    1,
)

TEMPLATES = {
    "paper": PAPER_TEMPLATE,
    "official": OFFICIAL_TEMPLATE,
    "search_r1": SEARCH_R1_TEMPLATE,
    "dag": DAG_TEMPLATE,
}

#: The tools protocol's prompt: the same instructions for a chat model that calls a ``search`` tool.
TOOLS_TEMPLATE = (
    "Answer the given question. Think first every time you get new information. If you lack some "
    "knowledge, call the search tool; it returns the top searched results. If the question is complex or "
    "involves multiple parts, decompose it into smaller sub-questions and call search once per sub-question "
    "in the same message: the calls run in parallel. You can search as many times as you want. If you find no "
    "further external knowledge needed, reply with the answer only, without a tool call and without detailed "
    "illustrations. For example: Beijing. Question: {question}\n"
)

SEARCH_TOOL_NAME = "search"
#: The one tool of the tools protocol, in the OpenAI function format every ``bind_tools`` accepts.
SEARCH_TOOL: dict = {
    "type": "function",
    "function": {
        "name": SEARCH_TOOL_NAME,
        "description": (
            "Search the knowledge store for one self-contained query; returns the top passages as "
            "'Doc i(Title: t) text' lines. Call it several times in one message for independent sub-questions."
        ),
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "one self-contained search query"}},
            "required": ["query"],
        },
    },
}

#: The tools protocol's TEXT form, for training a policy that writes text (the Hermes/Qwen form
#: vLLM's ``hermes`` tool parser reads): ``<tool_call>`` JSON blocks, the answer in ``<answer>``.
TOOL_TEXT_TEMPLATE = (
    "Answer the given question. You may think first every time you get new information. If you lack some "
    "knowledge, call the search tool; it returns the top searched results in <tool_response> and "
    "</tool_response>. You are provided with the tool signature within <tools></tools>:\n<tools>\n"
    + json.dumps(SEARCH_TOOL, ensure_ascii=False)
    + "\n</tools>\nFor each call, write a JSON object with the function name and arguments within "
    '<tool_call></tool_call>: <tool_call>\n{"name": "search", "arguments": {"query": "..."}}\n</tool_call>. '
    "If the question is complex or involves multiple parts, decompose it into smaller sub-questions and write "
    "one call per sub-question in the same turn: the calls run in parallel. You can search as many times as "
    "you want. If you find no further external knowledge needed, give the answer inside <answer> and "
    "</answer>, without detailed illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
)

#: prompt templates of the tools protocol (kept apart from :data:`TEMPLATES`, the tags protocol's)
TOOL_TEMPLATES = {"tools": TOOLS_TEMPLATE, "tool_text": TOOL_TEXT_TEMPLATE}


def render_prompt(question: str, template: str = "paper", stores: Sequence[str] = ()) -> str:
    """The initial prompt. ``template`` is a name from :data:`TEMPLATES` or a format string with ``{question}``."""
    text = TEMPLATES.get(template) or TOOL_TEMPLATES.get(template, template)
    if "{question}" not in text:
        names = ", ".join([*TEMPLATES, *TOOL_TEMPLATES])
        raise ValueError(
            f"prompt template {template[:60]!r} is neither a known name ({names}) nor has {{question}}"
        )
    q, _ = scrub_text(question.strip())
    prompt = text.replace("{question}", q)
    if len(stores) > 1:  # the store hint goes before the question (or first, in a template without one)
        hint = (
            f"Available knowledge stores: {', '.join(stores)}. Write 'store: query' to search one store only; "
            "a query without a store name searches all of them. "
        )
        prompt = _before_question(prompt, hint)
    return prompt


def _before_question(prompt: str, text: str) -> str:
    """``text`` inserted before the prompt's ``Question: `` (first, in a template without one)."""
    at = max(prompt.find("Question: "), 0)
    return prompt[:at] + text + prompt[at:]


#: the line before a text prompt's earlier conversation
HISTORY_INTRO = "The conversation so far (the question may refer to it):\n"
#: how each speaker's lines start there
HISTORY_SPEAKERS = {"user": "User: ", "assistant": "Assistant: "}


def render_history(prompt: str, turns: Sequence[tuple[str, str]]) -> str:
    """``prompt`` with the conversation's earlier messages (``(role, text)``, role ``user`` or
    ``assistant``) written just before its question, one ``User:``/``Assistant:`` line each, so
    a follow-up ("Where was he born?") reaches a text policy with what it refers to. No turns:
    the prompt unchanged, byte for byte."""
    lines = []
    for role, text in turns:
        clean, _ = scrub_text(" ".join(text.split()))
        if clean:
            lines.append(HISTORY_SPEAKERS[role] + clean + "\n")
    return _before_question(prompt, HISTORY_INTRO + "".join(lines)) if lines else prompt


#: Qwen2.5's tool layout (what vLLM's hermes parser reads): the tools' signatures in the system
#: turn, calls as ``<tool_call>`` JSON blocks, results as ``<tool_response>`` blocks in one user
#: turn; plain messages render as the ChatML layout ``<|im_start|>role\n...<|im_end|>``. The gateway's tests, its
#: smoke and the tool rendering added to a packaged model's template use it.
TOOLS_CHAT_TEMPLATE = r"""
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' }}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
    {%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments '
        'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
        '"arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for m in messages %}
    {%- if m.role == 'user' or (m.role == 'system' and not loop.first)
        or (m.role == 'assistant' and not m.tool_calls) %}
        {{- '<|im_start|>' + m.role + '\n' + (m.content or '') + '<|im_end|>\n' }}
    {%- elif m.role == 'assistant' %}
        {{- '<|im_start|>assistant' }}
        {%- if m.content %}{{- '\n' + m.content }}{%- endif %}
        {%- for tc in m.tool_calls %}
            {%- set f = tc.function if tc.function is defined else tc %}
            {{- '\n<tool_call>\n{"name": "' + f.name + '", "arguments": ' }}
            {%- if f.arguments is string %}{{- f.arguments }}{%- else %}{{- f.arguments | tojson }}{%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif m.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\n<tool_response>\n' + m.content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
""".strip()
