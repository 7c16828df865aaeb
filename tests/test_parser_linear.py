"""The action parser is linear in its input and applies ``max_subqueries`` first .

Dedup used to be a list lookup over every piece before the limit was checked, so 80k
sub-queries took 27 s. The assertions are on work done (pieces kept, dropped), never on time.
"""

from __future__ import annotations

from parallelsearch.agents.protocol import parse_action, split_subqueries


def test_limit_stops_reading_at_the_first_distinct_piece_past_it():
    # 9 distinct pieces, then 200,000 duplicates: nothing after the 9th distinct piece is looked at
    body = " ## ".join([f"q{i}" for i in range(9)] + ["q0"] * 200_000)
    action = parse_action(f"<search> {body} </search>", max_subqueries=8)
    assert action.kind == "invalid" and action.dropped == ()  # main's parser dropped all 200,000
    assert "200009 sub-queries in one search" in action.reason and "at most 8" in action.reason
    kept, dropped = split_subqueries(body, limit=8)
    assert kept == tuple(f"q{i}" for i in range(9))
    assert dropped == ()


def test_200k_distinct_sub_queries_give_exactly_the_limit_plus_one():
    body = " ## ".join(f"sub-query number {i}" for i in range(200_000))
    kept, dropped = split_subqueries(body, limit=8)
    assert len(kept) == 9 and not dropped
    action = parse_action(f"<think>x</think><search> {body} </search>", max_subqueries=8)
    assert action.kind == "invalid" and action.subqueries == ()


def test_valid_search_with_200k_duplicates_reads_all_of_them_once():
    body = " ## ".join(["a", "b"] * 100_000)
    action = parse_action(f"<search> {body} </search>", max_subqueries=8)
    assert action.kind == "search" and action.subqueries == ("a", "b")
    assert len(action.dropped) == 199_998
    # without a limit (rewards count every distinct sub-query) the split is linear too
    kept, _ = split_subqueries(" ## ".join(f"x{i}" for i in range(20_000)))
    assert len(kept) == 20_000
