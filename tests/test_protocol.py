"""The protocol: parser (property-based: never raises), observation format, prompt."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parallelsearch.agents.protocol import (
    INVALID_FEEDBACK,
    TEMPLATES,
    ObservationStyle,
    format_observation,
    parse_action,
    render_prompt,
    split_subqueries,
    truncate_at_stop,
)
from parallelsearch.stores import Passage

TAGS = [
    "<think>",
    "</think>",
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<information>",
    "</information>",
    "##",
    " ",
    "\n",
    "a",
    "Ed Wood",
    "<",
    ">",
    "/",
]


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_parser_never_raises_on_arbitrary_text(text):
    a = parse_action(text)
    assert a.kind in ("search", "answer", "invalid")
    if a.kind == "invalid":
        assert a.reason


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TAGS), max_size=30).map("".join), st.integers(1, 8))
def test_parser_never_raises_on_tag_soup(text, cap):
    a = parse_action(text, max_subqueries=cap)
    if a.kind == "search":
        assert 1 <= len(a.subqueries) <= cap and all(q and q == q.strip() for q in a.subqueries)
        assert len(set(a.subqueries)) == len(a.subqueries)
    if a.kind == "answer":
        assert a.answer and a.answer == a.answer.strip()


def test_parser_cases():
    a = parse_action(
        "<think>compare</think>\n<search> Monet birth ## Pissarro birth ## Monet birth ## </search>"
    )
    assert a.kind == "search" and a.subqueries == ("Monet birth", "Pissarro birth") and a.think == "compare"
    assert a.dropped == ("Monet birth",)
    assert parse_action("<answer> Paris </answer>").answer == "Paris"
    assert parse_action("no tags").reason == "no <search> or <answer> tag"
    assert parse_action("<search>  ##  </search>").reason == "empty <search>"
    assert "never closed" in parse_action("<search> x").reason
    assert "without a matching" in parse_action("x </answer>").reason
    assert "only the environment" in parse_action("<information>x</information>").reason
    many = "<search> " + " ## ".join(f"q{i}" for i in range(50)) + " </search>"
    assert parse_action(many).kind == "invalid" and "50 sub-queries" in parse_action(many).reason
    # Search-R1 mode: '##' is part of the query
    assert parse_action("<search> a ## b </search>", split=False).subqueries == ("a ## b",)
    assert split_subqueries(" a ##b## ") == (("a", "b"), ())


def test_first_stop_ends_the_turn():
    assert truncate_at_stop("<search> a </search> junk </answer>") == "<search> a </search>"
    assert truncate_at_stop("<answer> x </answer><search>") == "<answer> x </answer>"


def test_observation_matches_the_official_format():
    a = [Passage("1", "Claude Monet", "born 1840"), Passage("2", "Monet (film)", "a film")]
    b = [Passage("3", "Camille Pissarro", "born 1830")]
    obs = format_observation([a, b])
    assert obs == (
        "\n\n<information>Doc 1(Title: Claude Monet) born 1840\nDoc 2(Title: Monet (film)) a film\n"
        "Doc 1(Title: Camille Pissarro) born 1830</information>\n\n"
    )
    err = format_observation([a, None], ["", "timed out"], ["monet", "pissarro"])
    assert "Search failed for 'pissarro': timed out" in err and err.count("<information>") == 1


#: what the dag prompt adds to the paper's, and nothing else
DAG_SENTENCE = (
    "If a sub-question needs the answer of an earlier one, refer to that answer as #k, where k is the earlier "
    "sub-question's position in the same search (#1 is the first); it is searched once #k is known. For example: "
    "<search> county of Van Hook Township ## seat of #1 </search>. "
)


def test_prompt_templates():
    p = render_prompt("Who is older, Monet or Pissarro", "paper")
    assert p.endswith("Question: Who is older, Monet or Pissarro\n") and "separated by ##" in p
    assert "as many times as your want" in render_prompt("q", "official")
    assert "##" not in render_prompt("q", "search_r1")
    multi = render_prompt("q", "paper", ["wiki", "news"])
    assert "Available knowledge stores: wiki, news" in multi
    assert render_prompt("q", "Custom: {question}") == "Custom: q"
    dag = render_prompt("q", "dag")
    assert (
        "#k" in dag and "seat of #1" in dag and dag.replace(DAG_SENTENCE, "") == render_prompt("q", "paper")
    )
    assert set(TEMPLATES) == {"paper", "official", "search_r1", "dag"} and INVALID_FEEDBACK.startswith(
        "\nMy previous action is invalid."
    )


def test_official_title_style_keeps_the_first_line_verbatim():
    ours = Passage("1", "Aaron", "Aaron is a prophet.")  # from a store: the title, quoted as in to_contents
    remote = Passage(
        "2", "Aaron", "Aaron is a prophet.", heading="Aaron (prophet)"
    )  # a first line without quotes
    official = ObservationStyle(titles="official")
    assert format_observation([[ours], [remote]], style=official) == (
        '\n\n<information>Doc 1(Title: "Aaron") Aaron is a prophet.\n'
        "Doc 1(Title: Aaron (prophet)) Aaron is a prophet.</information>\n\n"
    )
    assert "Doc 1(Title: Aaron) " in format_observation([[ours]], style=ObservationStyle(titles="stripped"))
    with pytest.raises(ValueError, match="title style"):
        ObservationStyle(titles="quoted")  # type: ignore[arg-type]


def test_the_style_a_graph_configuration_sets_shapes_every_protocols_observation():
    """The graph's observation knobs reach the formatters as one style: titles and the word cap
    shape the tags block and the tool messages alike."""
    from parallelsearch.agents.protocol import SubqueryResult, get_protocol
    from parallelsearch.graphs.config import GraphConfig

    style = ObservationStyle.of(GraphConfig(observation_titles="official", max_observation_words=4))
    assert style == ObservationStyle(titles="official", max_words=4)
    assert ObservationStyle.of(GraphConfig()) == ObservationStyle()
    results = [SubqueryResult("aaron", [Passage("1", "Aaron", "Aaron is a prophet of old.")])]
    tags = get_protocol("tags").render(results, [], style, "").text
    assert tags == '\n\n<information>Doc 1(Title: "Aaron") Aaron ...</information>\n\n'
    replies = get_protocol("tool_text").render(results, [("c1", 0)], style, "").text
    assert 'Doc 1(Title: "Aaron") Aaron ...' in replies


# -- the grammar of constrained decoding (tags): #k references --------------------------------------


def test_the_grammar_accepts_k_references_and_still_rejects_a_lone_hash():
    import re

    from parallelsearch.agents.protocol import protocol_regex
    from parallelsearch.agents.subquery_plan import plan_action

    grammar = protocol_regex(max_subqueries=3)
    one = protocol_regex(split=False)

    def turn(body: str) -> str:
        return f"<think>x</think>\n<search> {body} </search>"

    accepted = {
        "county of Van Hook Township ## seat of #1": 2,
        "Doctor Strange director ## #1 nationality": 2,
        "a ## b ## (#1) and #2's c": 2,
        "a ## #1 b ## #2 c": 3,
        "a ## b": 1,  # without #k: what it always was
        "a ## #1's spouse": 2,
    }
    for body, stages in accepted.items():
        assert re.fullmatch(grammar, turn(body)), body
        plan = plan_action(parse_action(turn(body), max_subqueries=3))
        assert plan.valid and len(plan.stages) == stages, body
    for junk in (
        "#12 items ## b",  # a reference to no sub-query: the grammar names earlier ones only
        "#1 ## b",  # the first names itself
        "a ## #2 b",
        "a ## #1 ## #3",
        "a ## #12",
        "a # b",  # a lone #
        "a ##1 b",  # ## inside a part
        "C# ## b",
        "a ### b",
        "a ## ## b",
        "a ## b ## c ## d",  # over max_subqueries
        " a ## b",
        "a ## b#",
    ):
        assert not re.fullmatch(grammar, turn(junk)), junk
    # one query per search (the sequential graph): no references, so no # at all, as before
    assert re.fullmatch(one, turn("seat of Mountrail County"))
    assert not re.fullmatch(one, turn("seat of #1")) and not re.fullmatch(one, turn("a ## b"))
    assert re.fullmatch(grammar, "<think>x</think>\n<answer> Stanley </answer>")


def test_what_the_grammar_accepts_is_a_valid_plan_in_both_forms():
    """Random pieces of text, #, digits and separators: every search the grammar lets a model write
    parses and plans within its max_stages (a random model decoding under it writes no reference
    the plan refuses), for few and many sub-queries."""
    import random
    import re

    from parallelsearch.agents.protocol import parse_tool_text, protocol_regex
    from parallelsearch.agents.subquery_plan import plan_action

    rng = random.Random(7)
    for n, stages in ((3, 4), (8, 4), (8, 2), (6, 1)):
        tags, tools = (
            re.compile(protocol_regex(max_subqueries=n, max_stages=stages, protocol=p))
            for p in ("tags", "tool_text")
        )
        accepted = {"tags": 0, "tools": 0}
        for _ in range(2000):
            pieces = [
                "".join(rng.choice("ab #1234('_") for _ in range(rng.randint(1, 5)))
                for _ in range(rng.randint(1, n))
            ]
            text = f"<think>x</think>\n<search> {' ## '.join(pieces)} </search>"
            if tags.fullmatch(text):
                accepted["tags"] += 1
                plan = plan_action(parse_action(text, max_subqueries=n), max_stages=stages)
                assert plan.valid, (text, plan.error)
            calls = [
                f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{q}"}}}}\n</tool_call>'
                for q in pieces
            ]
            text = "<think>x</think>\n" + "\n".join(calls)
            if tools.fullmatch(text):
                accepted["tools"] += 1
                action = parse_tool_text(text, max_subqueries=n)
                assert action.kind == "search" and plan_action(action, max_stages=stages).valid, text
        assert min(accepted.values()) > 200, (n, stages, accepted)  # the property was tried on many turns
    # a chain one stage too deep for max_stages is not in the grammar; one within it is
    chain = protocol_regex(max_subqueries=8, max_stages=4)
    turn = "<think>x</think>\n<search> {} </search>"
    assert re.fullmatch(chain, turn.format("a ## #1 b ## #2 c ## #3 d"))
    assert not re.fullmatch(chain, turn.format("a ## #1 b ## #2 c ## #3 d ## #4 e"))
    # its size does not grow with max_subqueries past the distinct sub-queries
    assert len(protocol_regex(max_subqueries=256)) < 2 * len(protocol_regex(max_subqueries=8))
