"""Resolvers: what a ``#k`` stands for when a dependent sub-query (``seat of #1``) is searched,
made from its parents' results, sync (``__call__``) or async (``aresolve``, what the graph awaits).
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from itertools import product
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from parallelsearch.agents.protocol import TurnRequest, format_passages
from parallelsearch.agents.subquery_plan import REFERENCE_RE, substitute
from parallelsearch.stores.errors import ParallelSearchError
from parallelsearch.stores.passages import Passage

#: the resolver names a setting, a request or a CLI flag may give
ResolverName = Literal["passage", "gold", "policy"]
RESOLVER_NAMES: tuple[str, ...] = get_args(ResolverName)


class ResolverError(ParallelSearchError, ValueError):
    """A resolver cannot be built from what was given, or cannot resolve with what it has."""


@dataclass(frozen=True)
class ParentResult:
    """What one ``#k`` names: the parent's sub-query (``written``; ``searched`` as searched), its
    passages, and in oracle runs the gold intermediate answer."""

    k: int
    searched: str
    passages: tuple[Passage, ...] = ()
    written: str | None = None
    gold: str | None = None


@runtime_checkable
class Resolver(Protocol):
    """Turns a dependent sub-query and its parents' results into the text to search."""

    def __call__(self, sub_query: str, parents: Sequence[ParentResult]) -> str: ...

    async def aresolve(self, sub_query: str, parents: Sequence[ParentResult]) -> str: ...


#: lower-case words that may join the capitalised words of one name ("University of Miami")
_JOINERS = frozenset("of the de du des la le von van der den del da di y upon al el bin ibn &".split())
#: capitalised words that start sentences rather than names
_OPENERS = frozenset(
    "The A An It He She His Her Its They Their This That These Those In On At As After Before "
    "During When While However Although Since From For With By Of And But Some There Other Born "
    "We I Our Following According Despite Upon Between Under Also Then Later".split()
)
#: abbreviations after which a period does not end a name ("Dr. Jennifer Aaker")
_ABBREVIATIONS = frozenset({"Jr", "Sr", "St", "Dr", "Mr", "Mrs", "Ms", "Mt", "Ft"})
_WORD_RE = re.compile(r"[^\W_](?:[\w'’\-]*\w)?|&")
_STOP = frozenset("the a an of in on at to for and or is was by with from as who what which".split())


def _capital(word: str) -> bool:
    return word[:1].isupper() or word[:1].isdigit()


def span_candidates(text: str, *, max_words: int = 8) -> list[str]:
    """The name-like spans of ``text`` in order, each once: runs of capitalised words (or
    numbers) inside one clause, joined by the lower-case words names use (``of``, ``de``,
    ``von``...), a sentence-opening word such as ``The`` or ``It`` dropped from the front."""
    toks = [(m.group(0), m.start(), m.end()) for m in _WORD_RE.finditer(text)]
    out: dict[str, None] = {}
    i = 0
    while i < len(toks):
        if not _capital(toks[i][0]):
            i += 1
            continue
        j = i + 1
        while j < len(toks) and j - i < max_words:
            gap = text[toks[j - 1][2] : toks[j][1]].strip()
            prev = toks[j - 1][0]
            if gap and not (gap == "." and (len(prev) == 1 or prev in _ABBREVIATIONS)):
                break
            word = toks[j][0]
            if _capital(word):
                j += 1
                continue
            joined = j + 1 < len(toks) and not text[toks[j][2] : toks[j + 1][1]].strip()
            if word.lower() in _JOINERS and joined and _capital(toks[j + 1][0]):
                j += 1
                continue
            break
        start = i
        while start < j and toks[start][0] in _OPENERS:
            start += 1
        if start < j:
            out.setdefault(text[toks[start][1] : toks[j - 1][2]], None)
        i = max(j, i + 1)
    return list(out)


def _content_words(text: str) -> set[str]:
    text = re.sub(r"['’]s\b", "", text)
    return {w.casefold() for w in re.findall(r"\w+", text)} - _STOP


def names_the_query(candidate: str, query: str) -> bool:
    """True when more than half of ``candidate``'s words are in ``query``: the parent asked about
    it, so it is not its answer. Half is not enough: relatives share a surname (``Kris Benson``
    is the answer to ``Anna Benson spouse``)."""
    words = _content_words(candidate)
    return bool(words) and len(words & _content_words(query)) > len(words) / 2


def relation_cue(query: str) -> str:
    """What a sub-query asks, without the names it asks about: ``Amy McKenzie place of birth``
    -> ``place of birth``. Falls back to the query when nothing is left."""
    text = REFERENCE_RE.sub(" ", query.replace(">>", " "))
    left = " ".join(re.sub(r"\b[A-Z][\w'’\-]*", " ", text).split())
    return left or " ".join(text.split())


def lead_in(text: str, candidate: str, words: int = 4) -> str:
    """The ``words`` words before ``candidate``'s first occurrence, and the candidate: where a
    passage says how the name relates to its subject (``film directed by Rolf Olsen``)."""
    i = text.find(candidate)
    before = text[: max(i, 0)].split()[-words:]
    return " ".join([*before, candidate])


def title_key(name: str) -> str:
    """A name or a paragraph title as compared with each other: words only, case folded, a
    trailing parenthetical dropped (``Kris Benson (baseball)`` -> ``kris benson``)."""
    return " ".join(re.findall(r"\w+", re.sub(r"\s*\([^)]*\)\s*$", "", name).casefold()))


def answer_candidates(parent: ParentResult, *, passages: int = 1, limit: int = 24) -> list[tuple[str, str]]:
    """(candidate, lead-in) pairs from the parent's top passages: name-like spans that the
    parent sub-query does not itself name, numbers left out (years are seldom a bridge)."""
    out: dict[str, str] = {}
    for p in parent.passages[:passages]:
        for c in span_candidates(p.text):
            if c in out or c[:1].isdigit() or names_the_query(c, parent.searched):
                continue
            out[c] = lead_in(p.text, c)
            if len(out) >= limit:
                return list(out.items())
    return list(out.items())


@dataclass(eq=False)
class PassageResolver:
    """The ``passage`` resolver: no model call. A parent's answer is usually a name inside its top
    passage, so its name-like spans are the candidates; with a ``searcher`` the candidate whose
    search scores best wins, nudged (with an ``embedder``) by ``cue_weight`` x how close its lead-in
    is to what the parent asked, and by ``title_weight`` when a hit is titled with it."""

    searcher: Any = None
    embedder: Any = None
    _: KW_ONLY
    cue_weight: float = 0.5
    title_weight: float = 0.3
    max_candidates: int = 24
    max_combinations: int = 32
    k: int = 3
    name: str = field(default="passage", init=False)

    def __post_init__(self) -> None:
        if self.embedder is None:
            self.embedder = getattr(self.searcher, "embedder", None)

    def _options(self, sub_query: str, parents: Sequence[ParentResult]) -> list[tuple[str, float, set[str]]]:
        """(query to search, prior, its candidates as title keys) for every candidate
        combination, best prior first."""
        per_parent: list[list[tuple[str, float]]] = []
        for parent in parents:
            cands = answer_candidates(parent, limit=self.max_candidates)
            if not cands:
                fallback = parent.passages[0].title if parent.passages else ""
                per_parent.append([(fallback, 0.0)])
                continue
            priors = [0.0] * len(cands)
            if self.embedder is not None and self.cue_weight:
                vecs = self.embedder.encode_queries([relation_cue(parent.searched), *(w for _, w in cands)])
                priors = [float(v @ vecs[0]) for v in vecs[1:]]
            per_parent.append([(c, s) for (c, _), s in zip(cands, priors, strict=True)])
        options: dict[str, tuple[str, float, set[str]]] = {}
        for n, combo in enumerate(product(*per_parent)):
            if n >= self.max_combinations:
                break
            query = substitute(sub_query, {p.k: c for p, (c, _) in zip(parents, combo, strict=True)})
            options.setdefault(query, (query, sum(s for _, s in combo), {title_key(c) for c, _ in combo}))
        return sorted(options.values(), key=lambda o: -o[1])

    def _choose(self, options: list[tuple[str, float, set[str]]], hits: Sequence[Sequence[Passage]]) -> str:
        def value(i: int) -> float:
            top = hits[i][0].score if hits[i] and hits[i][0].score is not None else -1.0
            own = any(title_key(p.title) in options[i][2] for p in hits[i])
            return top + self.cue_weight * options[i][1] + self.title_weight * own

        return options[max(range(len(options)), key=lambda i: (value(i), -i))][0]

    def _unsearched(
        self, sub_query: str, parents: Sequence[ParentResult], options: list[tuple[str, float, set[str]]]
    ) -> str | None:
        """The filled sub-query when choosing needs no search (no option, one, or no searcher)."""
        if not options:
            return substitute(sub_query, {p.k: "" for p in parents})
        if len(options) == 1 or self.searcher is None:
            return options[0][0]
        return None

    def __call__(self, sub_query: str, parents: Sequence[ParentResult]) -> str:
        options = self._options(sub_query, parents)
        if (chosen := self._unsearched(sub_query, parents, options)) is not None:
            return chosen
        queries = [q for q, _, _ in options]
        if hasattr(self.searcher, "search_batch"):
            hits = self.searcher.search_batch(queries, self.k)
        else:
            hits = asyncio.run(_search_all(self.searcher, queries, self.k))
        return self._choose(options, hits)

    async def aresolve(self, sub_query: str, parents: Sequence[ParentResult]) -> str:
        options = await asyncio.to_thread(self._options, sub_query, parents)
        if (chosen := self._unsearched(sub_query, parents, options)) is not None:
            return chosen
        queries = [q for q, _, _ in options]
        if hasattr(self.searcher, "asearch"):
            hits = await _search_all(self.searcher, queries, self.k)
        else:
            hits = await asyncio.to_thread(self.searcher.search_batch, queries, self.k)
        return self._choose(options, hits)


async def _search_all(searcher: Any, queries: list[str], k: int) -> list[list[Passage]]:
    """Concurrent searches: a local store's coalescer turns them into one encoder call."""
    return list(await asyncio.gather(*(searcher.asearch(q, k) for q in queries)))


class GoldResolver:
    """The ``gold`` resolver: each ``#k`` becomes the parent's gold intermediate answer (oracle
    runs: the upper bound of any resolver; ``gold`` comes from the question's ``metadata.hops``)."""

    name = "gold"

    def __call__(self, sub_query: str, parents: Sequence[ParentResult]) -> str:
        missing = [p.k for p in parents if p.gold is None]
        if missing:
            raise ResolverError(
                f"the gold resolver has no gold answer for #{missing[0]} of {sub_query!r}: it needs the "
                "question's metadata.hops (a MuSiQue or 2WikiMultihopQA record) and is for oracle runs; "
                "use --resolver passage or policy otherwise"
            )
        return substitute(sub_query, {p.k: str(p.gold) for p in parents})

    async def aresolve(self, sub_query: str, parents: Sequence[ParentResult]) -> str:
        return self(sub_query, parents)


#: the extraction prompt of the ``policy`` resolver
EXTRACTION_PROMPT = (
    "Answer the question from the passages. Answer only: a short name or phrase, no sentence, "
    "no explanation.\n{passages}\nQuestion: {question}\nAnswer only:"
)


@dataclass
class PolicyResolver:
    """The ``policy`` resolver: one short "answer only" extraction call per parent to a policy,
    counted in ``calls``; the calls are no turns (nothing of them enters the transcript)."""

    policy: Any
    max_tokens: int = 24
    passages: int = 3
    calls: int = 0
    name: str = field(default="policy", init=False)

    async def _answer(self, parent: ParentResult) -> str:
        docs = format_passages(parent.passages[: self.passages]).removesuffix("\n")
        prompt = EXTRACTION_PROMPT.format(passages=docs, question=parent.searched)
        self.calls += 1
        request = TurnRequest.for_prompt(prompt, stop=("\n",), max_tokens=self.max_tokens, role="resolver")
        result = await self.policy.agenerate(request)
        return clean_answer(getattr(result, "text", "") or "")

    async def aresolve(self, sub_query: str, parents: Sequence[ParentResult]) -> str:
        answers = await asyncio.gather(*(self._answer(p) for p in parents))
        return substitute(sub_query, {p.k: a for p, a in zip(parents, answers, strict=True)})

    def __call__(self, sub_query: str, parents: Sequence[ParentResult]) -> str:
        return _run_sync(self.aresolve(sub_query, parents), "the policy resolver")


def clean_answer(text: str) -> str:
    """A model's extraction reply as a name: tags and a leading ``Answer:`` dropped, one line."""
    text = re.sub(r"</?(think|answer|search)>", " ", text)
    text = text.strip().splitlines()[0] if text.strip() else ""
    text = re.sub(r"^(answer( only)?\s*:\s*)", "", text.strip(), flags=re.I)
    return " ".join(text.strip(" .\"'").split())


class CallableResolver:
    """Any function ``(sub_query, parents) -> str``, sync or async, as a resolver."""

    def __init__(self, func: Callable[[str, Sequence[ParentResult]], str | Awaitable[str]]) -> None:
        self.func = func
        self.name = getattr(func, "__name__", type(func).__name__)

    async def aresolve(self, sub_query: str, parents: Sequence[ParentResult]) -> str:
        out = self.func(sub_query, parents)
        if inspect.isawaitable(out):
            out = await out
        return self._checked(out)

    def __call__(self, sub_query: str, parents: Sequence[ParentResult]) -> str:
        out = self.func(sub_query, parents)
        if inspect.isawaitable(out):
            out = _run_sync(out, f"resolver {self.name}")
        return self._checked(out)

    def _checked(self, out: object) -> str:
        if not isinstance(out, str):
            raise ResolverError(f"resolver {self.name} returned {type(out).__name__}, not the text to search")
        return out


def _run_sync(aw: Awaitable[str], what: str) -> str:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(aw))
    if inspect.iscoroutine(aw):
        aw.close()
    raise ResolverError(f"{what} is async: inside a running event loop, await its aresolve(...) instead")


async def _awaited(aw: Awaitable[str]) -> str:
    return await aw


def searcher_encoder(searcher: Any) -> Any:
    """The encoder of the local store behind ``searcher`` (None for a remote one), which the
    passage resolver scores lead-ins with."""
    return getattr(searcher, "embedder", None) or getattr(getattr(searcher, "store", None), "embedder", None)


def as_resolver(spec: object, *, searcher: Any = None, policy: Any = None, embedder: Any = None) -> Resolver:
    """A resolver from a name (``passage`` searches with ``searcher``, ``gold``, ``policy`` asks
    ``policy``), a resolver, or a callable ``(sub_query, parents) -> str``; else a ResolverError."""
    spec = "passage" if spec is None else spec
    if isinstance(spec, str):
        name = spec.strip().lower()
        if name == "passage":
            return PassageResolver(searcher, embedder)
        if name == "gold":
            return GoldResolver()
        if name == "policy":
            if policy is None:
                raise ResolverError(
                    "the policy resolver needs a policy to ask (pass policy=..., or use --resolver passage)"
                )
            return PolicyResolver(policy)
        raise ResolverError(
            f"unknown resolver {spec!r}: use one of {', '.join(RESOLVER_NAMES)} or a function "
            "(sub_query, parents) -> str"
        )
    if hasattr(spec, "aresolve") and callable(spec):
        return spec
    if callable(spec):
        return CallableResolver(spec)
    raise ResolverError(
        f"a resolver must be one of {', '.join(RESOLVER_NAMES)}, an object with aresolve, or a function "
        f"(sub_query, parents) -> str; got {type(spec).__name__}"
    )
