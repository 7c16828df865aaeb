"""Constrained decoding: a regular expression of one valid turn, per text protocol. Every part is
bounded, so even a model that never saw the protocol ends its turn with a valid action instead of
running to the token cap; a search names only earlier sub-queries with ``#k``, within
``max_stages``, so the plan refuses nothing the grammar lets through."""

from __future__ import annotations

# Every character str.strip() removes, spelled out: "\s" means another set to xgrammar (no
# \x1c-\x1f), so an engine could end an answer on a character the parser then strips away.
_SPACE = "".join(f"\\u{i:04x}" for i in range(0x3001) if chr(i).isspace())


def _subquery_regex(earlier: int, chars: int, bad: str) -> str:
    """One sub-query (``bad`` characters never) starting and ending with a non-space, of at most
    ``chars`` characters, or three times that when it names earlier results as ``#1`` ..
    ``#earlier``: a reference is never followed by a digit, so none reads as one nobody made."""
    q = max(chars - 2, 0)
    edge, mid = rf"[^{bad}{_SPACE}]", rf"[^{bad}]"
    if earlier == 0:
        return rf"{edge}({mid}{{0,{q}}}{edge})?"
    ref = rf"#[1-{earlier}]"
    glued, glued_end = rf"{ref}[^{bad}0-9]", rf"{ref}[^{bad}0-9{_SPACE}]"
    return rf"({ref}|{edge}|{glued_end}|({edge}|{glued})({mid}|{glued}){{0,{q}}}({edge}|{glued_end}|{ref}))"


def _search_regex(n: int, max_stages: int, chars: int, bad: str, wrap: tuple[str, str], sep: str) -> str:
    """Up to ``n`` sub-queries (each ``wrap``-ped) joined by ``sep``, the k-th naming only
    ``#1`` .. ``#min(k-1, max_stages-1, 9)``: so every plan it allows fits in ``max_stages`` stages.
    Sub-queries past the last distinct one repeat it, so the size does not grow with ``n``."""
    cap = min(max_stages - 1, 9)
    parts = [wrap[0] + _subquery_regex(i, chars, bad) + wrap[1] for i in range(min(n, cap + 1))]
    more = n - len(parts)
    regex = parts[-1] + (rf"({sep}{parts[-1]}){{0,{more}}}" if more else "")
    for part in reversed(parts[:-1]):
        regex = rf"{part}({sep}{regex})?"
    return regex


def check_grammar_limits(max_subqueries: int, max_stages: int) -> None:
    """A ValueError unless both limits are at least one."""
    if max_subqueries < 1 or max_stages < 1:
        raise ValueError(f"max_subqueries and max_stages must be >= 1, got {max_subqueries}, {max_stages}")


def think_regex(think_chars: int) -> str:
    """The bounded ``<think>`` block every grammar starts with."""
    return rf"<think>[^<]{{1,{think_chars}}}</think>\n"


def answer_regex(answer_chars: int) -> str:
    """A non-empty ``<answer>`` that starts and ends with a non-space (the parser strips spaces)."""
    return rf"<answer> [^<{_SPACE}]([^<\n]{{0,{max(answer_chars - 2, 0)}}}[^<{_SPACE}])? </answer>"


def tag_search_regex(n: int, max_stages: int, query_chars: int) -> str:
    """``<search> a ## b </search>`` with up to ``n`` sub-queries."""
    parts = _search_regex(n, max_stages, query_chars, r"<#\n", ("", ""), " ## ")
    return rf"<search> {parts} </search>"


def tool_call_search_regex(n: int, max_stages: int, query_chars: int) -> str:
    """Up to ``n`` ``<tool_call>`` blocks of the search tool, one per line. It ends after the last
    block, so the engine ends the turn with its end-of-turn token."""
    call = (r'<tool_call>\n\{"name": "search", "arguments": \{"query": "', r'"\}\}\n</tool_call>')
    return _search_regex(n, max_stages, query_chars, r'"\\<\x00-\x1f#', call, r"\n")
