"""The ``#k`` plan of one search: what is a reference, what is refused, the stages, substitution."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parallelsearch.agents.protocol import parse_action, parse_tool_calls
from parallelsearch.agents.subquery_plan import (
    Reference,
    find_references,
    plan_action,
    plan_search,
    substitute,
    written_pieces,
)


def _plan(body: str, **kw):
    action = parse_action(f"<search> {body} </search>")
    assert action.kind == "search", action.reason
    return plan_action(action, **kw)


@pytest.mark.parametrize(
    ("text", "refs"),
    [
        ("seat of #1", (1,)),
        ("#1's spouse", (1,)),
        ("(#2) and #1, #2.", (2, 1)),
        ("#1-#2", (1, 2)),
        ("C#1 compiler", ()),
        ("issue#12 status", ()),
        ("#1st place", ()),
        ("##1", ()),
        ("_#1", ()),
        ("é#1", ()),
        ("#", ()),
        ("# 1", ()),
        ("#x", ()),
        ("#0", (0,)),
        ("#1234567", (-1,)),
        ("#" + "9" * 5000, (-1,)),
    ],
)
def test_what_counts_as_a_reference(text, refs):
    assert find_references(text) == refs


def test_a_search_without_references_is_one_stage_of_the_parsed_subqueries():
    for body in ["a", "a ## b ## c", "a ## ## b ## a", "C#1 compiler ## issue#12"]:
        action = parse_action(f"<search> {body} </search>")
        plan = plan_action(action)
        assert plan.valid and not plan.dependent
        assert plan.subqueries == action.subqueries
        assert plan.stages == (tuple(range(len(action.subqueries))),)
        assert all(r == () for r in plan.references)


def test_one_subquery_has_no_references():
    plan = _plan("who sang the #1 hit of 1985")
    assert plan.valid and plan.stages == ((0,),)


def test_a_chain_makes_one_stage_per_hop():
    plan = _plan("county of Van Hook Township ## seat of #1 ## mayor of #2")
    assert plan.valid and plan.dependent
    assert plan.stages == ((0,), (1,), (2,))
    assert plan.references[1] == (Reference(1, 0),) and plan.parents(2) == (1,)


def test_independent_parents_share_the_first_stage():
    plan = _plan("director of A ## director of B ## older of #1 and #2 ## films of #1")
    assert plan.stages == ((0, 1), (2, 3))
    assert plan.parents(2) == (0, 1)


def test_a_diamond_waits_for_its_deepest_parent():
    plan = _plan("a ## b of #1 ## c of #1 and #2")
    assert plan.stages == ((0,), (1,), (2,))


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("seat of #2 ## county of X", "later sub-query"),
        ("a ## b of #2", "refers to itself"),
        ("a of #2 ## b", "later sub-query"),
        ("a ## b of #3", "there are 2 sub-queries"),
        ("a ## b of #0", "there are 2 sub-queries"),
        ("a ## b of #99999999", "not a position"),
    ],
)
def test_bad_references_are_invalid_with_a_reason(body, words):
    plan = _plan(body)
    assert not plan.valid and plan.stages == ()
    assert words in plan.error


def test_too_many_stages_is_invalid():
    body = "a ## b #1 ## c #2 ## d #3 ## e #4"
    assert _plan(body, max_stages=5).valid
    plan = _plan(body, max_stages=4)
    assert not plan.valid and "5 stages" in plan.error and "at most 4" in plan.error


def test_k_counts_pieces_as_written_duplicates_and_empties_included():
    # the parser keeps "a" once; "#2" is the second piece as written, i.e. "a" again
    plan = _plan("a ## ## a ## seat of #2")
    assert plan.subqueries == ("a", "seat of #2")
    assert plan.valid and plan.references[1] == (Reference(2, 0),)
    assert plan.stages == ((0,), (1,))
    assert written_pieces(" a ##  ## a ## seat  of #2 ") == ["a", "a", "seat of #2"]


def test_a_written_order_that_does_not_fit_counts_the_subqueries():
    plan = plan_search(["a", "b of #1"], written=["something else"])
    assert plan.valid and plan.references[1] == (Reference(1, 0),)


def test_tool_calls_number_the_calls_of_the_message():
    calls = [
        {"name": "search", "args": {"query": "director of A"}, "id": "c1"},
        {"name": "search", "args": {"query": "director of A"}, "id": "c2"},
        {"name": "search", "args": {"query": "birthplace of #2"}, "id": "c3"},
    ]
    action = parse_tool_calls(calls)
    plan = plan_action(action)
    assert plan.subqueries == ("director of A", "birthplace of #2")
    assert plan.valid and plan.references[1] == (Reference(2, 0),)
    bad = plan_action(
        parse_tool_calls([{"name": "search", "args": {"query": "x of #1"}, "id": "c"}, calls[0]])
    )
    assert not bad.valid and "refers to itself" in bad.error


def test_a_non_search_action_has_no_plan():
    plan = plan_action(parse_action("<answer> x </answer>"))
    assert not plan.valid


def test_substitute_replaces_only_named_tokens():
    assert substitute("seat of #1 and  #2", {1: " Mountrail\nCounty "}) == "seat of Mountrail County and #2"
    assert substitute("C#1 of #1", {1: "X"}) == "C#1 of X"
    assert substitute("#1 >> capital", {1: ""}) == ">> capital"
    assert substitute("no refs", {1: "X"}) == "no refs"


@given(st.text(max_size=200))
def test_policy_text_never_raises(text):
    plan = plan_search([text, text + " ## #1", "#2 " + text])
    assert plan.valid or plan.error
    substitute(text, {1: text})
    find_references(text)
    plan_action(parse_action(f"<search>{text}</search>"))
