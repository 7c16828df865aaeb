"""Resolvers of ``#k``: candidate spans, the passage resolver on a real store of MuSiQue
paragraphs, gold, policy (counted extraction calls), callables, and the coercion's errors."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import RAW, needs_data

from parallelsearch.agents.policies.base import TurnRequest, TurnResult
from parallelsearch.agents.resolvers import (
    GoldResolver,
    ParentResult,
    PassageResolver,
    PolicyResolver,
    ResolverError,
    answer_candidates,
    as_resolver,
    clean_answer,
    lead_in,
    names_the_query,
    relation_cue,
    span_candidates,
    title_key,
)
from parallelsearch.stores import Passage

MUSIQUE = RAW / "musique/AdelWang_MIGRES/musique.json"

HILLAGE = (
    "Green is the fourth studio album by British progressive rock musician Steve Hillage. Written in "
    'spring 1977 at the same time as his previous album, the funk-inflected "Motivation Radio" (1977).'
)


def test_span_candidates_are_names_in_order():
    text = (
        HILLAGE + " It was directed by Xawery Żuławski at the University of Miami in Coral Gables, Florida."
    )
    assert span_candidates(text) == [
        "Green",
        "British",
        "Steve Hillage",
        "Written",
        "1977",
        "Motivation Radio",
        "Xawery Żuławski",
        "University of Miami",
        "Coral Gables",
        "Florida",
    ]
    assert span_candidates("Dr. Jennifer Aaker met George H. W. Bush and Kevin James.") == [
        "Dr. Jennifer Aaker",
        "George H. W. Bush",
        "Kevin James",
    ]
    assert span_candidates("") == [] and span_candidates("no names here") == []


def test_candidates_skip_what_the_parent_asked_about_and_numbers():
    parent = ParentResult(1, "Green performer", (Passage.make("Green (Steve Hillage album)", HILLAGE),))
    cands = [c for c, _ in answer_candidates(parent)]
    assert cands[:2] == ["British", "Steve Hillage"] and "Green" not in cands and "1977" not in cands
    assert names_the_query("McCauley's Mountain", "McCauley Mountain located in")
    assert not names_the_query("Mountrail County", "Van Hook Township located in")
    assert not names_the_query("Kris Benson", "Anna Benson spouse")
    assert relation_cue("Amy McKenzie place of birth") == "place of birth"
    assert relation_cue("#1 >> capital") == "capital"
    assert (
        lead_in("a 1970 film directed by Rolf Olsen and", "Rolf Olsen") == "1970 film directed by Rolf Olsen"
    )


def test_passage_resolver_without_a_searcher_takes_the_first_candidate_or_the_title():
    parent = ParentResult(1, "Green performer", (Passage.make("Green (Steve Hillage album)", HILLAGE),))
    assert PassageResolver()("#1 spouse", [parent]) == "British spouse"
    bare = ParentResult(1, "x", (Passage.make("Some Title", "no names here"),))
    assert PassageResolver()("seat of #1", [bare]) == "seat of Some Title"
    assert PassageResolver()("seat of #1", [ParentResult(1, "x")]) == "seat of"


class _TitledHits:
    """A scripted stand-in searcher: each query's hits as given, in one batch."""

    def __init__(self, hits: dict[str, list[Passage]]) -> None:
        self.hits = hits
        self.batches: list[list[str]] = []

    def search_batch(self, queries, k):
        self.batches.append(list(queries))
        return [self.hits.get(q, [])[:k] for q in queries]


def test_title_key_compares_names_with_paragraph_titles():
    assert title_key("Kris Benson (baseball)") == title_key("Kris  benson") == "kris benson"
    assert title_key("O'Neill, Texas") == "o neill texas"
    assert title_key("(1999)") == ""


def test_passage_resolver_prefers_a_candidate_whose_hit_is_its_own_paragraph():
    text = "Wild Strawberries is a film by Ingmar Bergman, produced by Svensk Filmindustri."
    parent = ParentResult(1, "Wild Strawberries director", (Passage.make("Wild Strawberries", text),))
    own = Passage("b", "Ingmar Bergman (director)", "Ernst Ingmar Bergman was a Swedish director.", 0.55)
    other = Passage("s", "Sweden", "Svensk Filmindustri is a Swedish company ...", 0.60)
    searcher = _TitledHits(
        {"Ingmar Bergman date of birth": [own], "Svensk Filmindustri date of birth": [other, own]}
    )
    # one batch of every candidate's query; the best hit alone picks the company ...
    assert PassageResolver(searcher, title_weight=0.0)("#1 date of birth", [parent]) == (
        "Svensk Filmindustri date of birth"
    )
    assert len(searcher.batches) == 1 and len(searcher.batches[0]) == 2
    # ... a hit titled with the candidate itself (a parenthetical ignored) picks the director,
    # and a hit of another option's own paragraph does not count for this one
    assert PassageResolver(searcher)("#1 date of birth", [parent]) == "Ingmar Bergman date of birth"


@pytest.fixture(scope="module")
def musique_store(tmp_path_factory, embedder):
    """A real store of the paragraphs of the first 3 MuSiQue questions (60 paragraphs)."""
    if not MUSIQUE.is_file():
        pytest.skip(f"benchmark file {MUSIQUE} is missing")
    from parallelsearch.stores import ChromaStore, ingest

    recs = [json.loads(line) for line in MUSIQUE.read_text().splitlines()[:3]]
    small = tmp_path_factory.mktemp("mq") / "musique3.json"
    small.write_text("\n".join(json.dumps(r) for r in recs))
    store = ChromaStore("musique3", path=tmp_path_factory.mktemp("chroma"), embedder=embedder)
    ingest(store, [small], progress=False)
    return store


@needs_data
def test_passage_resolver_resolves_a_bridge_in_a_real_store(musique_store):
    # Anna Benson -> her spouse Kris Benson (a shared surname is no reason to skip him) -> his team
    parent_query = "Anna Benson spouse"
    top = musique_store.search(parent_query, 3)
    assert top[0].title == "Anna Benson"
    parent = ParentResult(1, parent_query, tuple(top))
    resolver = PassageResolver(musique_store)
    options = [q for q, _, _ in resolver._options("#1 member of sports team", [parent])]
    assert "Kris Benson member of sports team" in options
    query = resolver("#1 member of sports team", [parent])
    assert query == "Kris Benson member of sports team"
    # the async form searches every candidate concurrently: one coalesced encoder call
    before = musique_store.coalesced_batches
    assert asyncio.run(resolver.aresolve("#1 member of sports team", [parent])) == query
    assert musique_store.coalesced_batches - before == 1
    # Van Hook Township -> Mountrail County -> its seat: the resolved query finds hop 2's paragraph,
    # which dropping #1 does not
    parent_query = "Van Hook Township located in the administrative territorial entity"
    parent = ParentResult(1, parent_query, tuple(musique_store.search(parent_query, 3)))
    query = resolver("#1 capital", [parent])
    assert "Mountrail County Courthouse" in [p.title for p in musique_store.search(query, 3)]
    assert "Mountrail County Courthouse" not in [p.title for p in musique_store.search("capital", 3)]


def test_gold_resolver_uses_the_gold_answers_and_says_when_it_has_none():
    parents = [ParentResult(1, "a", gold="Mountrail County"), ParentResult(2, "b", gold="X")]
    assert GoldResolver()("seat of #1 near #2", parents) == "seat of Mountrail County near X"
    assert asyncio.run(GoldResolver().aresolve("seat of #1", parents[:1])) == "seat of Mountrail County"
    with pytest.raises(ResolverError, match="metadata.hops"):
        GoldResolver()("seat of #1", [ParentResult(1, "a")])


class _Extractor:
    """A policy that answers every extraction request with a fixed reply and records it."""

    name = "extractor"

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.requests: list[TurnRequest] = []

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        self.requests.append(request)
        return TurnResult(text=self.reply)


def test_policy_resolver_makes_one_counted_extraction_call_per_parent():
    policy = _Extractor("<answer> Mountrail County. </answer>")
    resolver = PolicyResolver(policy)
    parents = [
        ParentResult(
            1, "Van Hook Township located in", (Passage.make("Van Hook Township", "in Mountrail County"),)
        ),
        ParentResult(2, "other", ()),
    ]
    assert resolver("seat of #1 and #2", parents) == "seat of Mountrail County and Mountrail County"
    assert resolver.calls == 2
    req = policy.requests[0]
    assert req.role == "resolver" and req.stop == ("\n",) and req.max_tokens == 24
    assert "Doc 1(Title: Van Hook Township) in Mountrail County" in req.transcript
    assert req.transcript.rstrip().endswith("Question: Van Hook Township located in\nAnswer only:")
    assert clean_answer("Answer: Stanley\nbecause ...") == "Stanley"


def test_policy_resolver_in_a_running_loop_must_be_awaited():
    resolver = PolicyResolver(_Extractor("X"))

    async def inside():
        with pytest.raises(ResolverError, match="aresolve"):
            resolver("#1", [ParentResult(1, "q")])
        return await resolver.aresolve("of #1", [ParentResult(1, "q")])

    assert asyncio.run(inside()) == "of X"


def test_as_resolver_takes_names_resolvers_and_functions():
    assert isinstance(as_resolver(None), PassageResolver)
    assert isinstance(as_resolver("passage"), PassageResolver)
    assert isinstance(as_resolver(" Gold "), GoldResolver)
    assert isinstance(as_resolver("policy", policy=_Extractor("x")), PolicyResolver)
    gold = GoldResolver()
    assert as_resolver(gold) is gold

    def upper(sub_query, parents):
        return sub_query.replace("#1", parents[0].searched.upper())

    async def lower(sub_query, parents):
        return sub_query.replace("#1", parents[0].searched.lower())

    parents = [ParentResult(1, "Abc")]
    assert as_resolver(upper)("x #1", parents) == "x ABC"
    assert as_resolver(lower)("x #1", parents) == "x abc"
    assert asyncio.run(as_resolver(upper).aresolve("x #1", parents)) == "x ABC"
    assert asyncio.run(as_resolver(lower).aresolve("x #1", parents)) == "x abc"
    with pytest.raises(ResolverError, match="returned int"):
        as_resolver(lambda s, p: 3)("x", parents)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("oracle", "unknown resolver 'oracle'"),
        ("policy", "needs a policy"),
        (42, "got int"),
        (["passage"], "got list"),
    ],
)
def test_as_resolver_refuses_anything_else_with_what_it_accepts(spec, words):
    with pytest.raises(ResolverError, match=words) as err:
        as_resolver(spec)
    assert "passage" in str(err.value)
