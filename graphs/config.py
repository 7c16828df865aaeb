"""Graph configuration: :class:`GraphConfig` (the one place the paper's defaults live; the CLI's
flags and the app's settings leave unset fields at these), the builders' typed keyword arguments,
and the per-request knobs a served graph takes (docs/architecture.md, "Configuration").
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Annotated, Any, Literal, TypeAlias, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, with_config
from typing_extensions import TypedDict

from parallelsearch.agents.policies.coerce import protocol_choices
from parallelsearch.agents.protocol import TitleStyle
from parallelsearch.agents.resolvers import ResolverName
from parallelsearch.agents.subquery_plan import DEFAULT_MAX_STAGES
from parallelsearch.stores.errors import check_choice, describe_validation_error

#: the most policy turns any request may ask for; the graphs' recursion limit is sized for it
MAX_TURNS_LIMIT = 64
#: the most passages per sub-query any setting or request may ask for
MAX_TOP_K = 100
#: the most sub-queries one search may hold at any setting
MAX_SUBQUERIES_LIMIT = 256
#: the most search stages one search may take at any setting; the recursion limit is sized for it
MAX_STAGES_LIMIT = 8

#: the largest observation budget (passages per search) a setting or a request may set
MAX_PASSAGE_BUDGET = 10_000

#: what the builders take as ``resolver``: a name, or a function ``(sub_query, parents) -> str``
#: (sync or async) or an object with ``aresolve`` (``parallelsearch.agents.resolvers``)
ResolverChoice: TypeAlias = ResolverName | Callable[..., Any] | None


@dataclass(frozen=True)
class OperatorCap:
    """A per-request knob's operator cap: the ``Settings`` field ``setting`` holds the most a request
    may ask for on this server (a request asking for more is refused before any work starts)."""

    setting: str


@dataclass(frozen=True)
class Uncapped:
    """Why a per-request knob needs no operator cap: its declared bounds are all any request may
    ask for on any server."""

    reason: str


# Each knob's type and bounds, declared once: GraphConfig, GraphOptions and GraphContext use these.
# A knob a request may set also declares its operator cap (OperatorCap) or why it needs none (Uncapped).
TopK = Annotated[
    int, Field(ge=1, le=MAX_TOP_K, description="passages per sub-query"), OperatorCap("server_max_top_k")
]
PassageBudget = Annotated[
    int | None,
    Field(
        ge=1,
        le=MAX_PASSAGE_BUDGET,
        description="passages one search may show in all: a search of k sub-queries fetches "
        "min(top_k, max(1, passage_budget // k)) per sub-query, so a wide search does not flood the "
        "context; None = top_k each (off)",
    ),
    Uncapped("it only lowers what top_k (capped) fetches"),
]
MaxTurns = Annotated[
    int,
    Field(ge=0, le=MAX_TURNS_LIMIT, description="policy turns before the final answer-only turn"),
    OperatorCap("server_max_turns"),
]
MaxSubqueries = Annotated[
    int,
    Field(ge=1, le=MAX_SUBQUERIES_LIMIT, description="more sub-queries in one search is an invalid action"),
    OperatorCap("server_max_subqueries"),
]
MaxConcurrency = Annotated[int | None, Field(ge=1, description="searcher nodes running at once (None = all)")]
SearchTimeout = Annotated[float, Field(gt=0, description="per-attempt searcher timeout")]
SearchRetries = Annotated[int, Field(ge=0, le=5, description="extra attempts after a failed search")]
MaxObservationWords = Annotated[int | None, Field(ge=1, description="cap on one <information> block")]
PromptTemplate = Annotated[
    str | None,
    Field(
        description="'paper', 'official', 'search_r1', 'dag' (teaches #k) or a format string with "
        "{question}; None = the graph's own (search_r1 for the sequential graph, dag for the dag graph, "
        "paper otherwise; under the tools protocol its tools prompt)"
    ),
]
ObservationTitles = Annotated[
    TitleStyle | None,
    Field(
        description="how <information> shows titles: 'official' = the corpus entry's first line verbatim "
        "(quoted, as released checkpoints saw it), 'stripped' = the bare title; None = 'official' with the "
        "official prompt template, else 'stripped'"
    ),
]
MaxNewTokens = Annotated[
    int,
    Field(ge=1, le=32768, description="per-turn token cap"),
    Uncapped("bounded by its declaration and by the model's context length"),
]
Temperature = Annotated[
    float,
    Field(ge=0, le=10, description="policy sampling temperature"),
    Uncapped("sampling: costs nothing"),
]
TopP = Annotated[
    float, Field(gt=0, le=1, description="policy nucleus sampling"), Uncapped("sampling: costs nothing")
]
SplitSubqueries = Annotated[
    bool, Field(description="split '##' into parallel sub-queries (False = Search-R1)")
]
MaxStages = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_STAGES_LIMIT,
        description="search stages one search may take when its sub-queries name earlier ones' results "
        "(#k); more is an invalid action",
    ),
    Uncapped("bounded by MAX_STAGES_LIMIT, which the recursion limit is sized for"),
]
ResolverKnob = Annotated[
    ResolverName | None,
    Field(
        description="what a #k stands for when its sub-query is searched: 'passage' (a name from the "
        "referenced sub-query's top passage, no model call), 'gold' (the question's gold intermediate "
        "answers from metadata.hops; oracle runs), 'policy' (one short extraction call to the answer or "
        "planner model); None = the function given to the builder, else 'passage'"
    ),
    Uncapped("a name, not an amount"),
]
SystemPrompt = Annotated[
    str | None,
    Field(
        description="instructions for the model before the protocol's own: a chat protocol's system "
        "message (with the protocol's instructions and any system messages of the input), a text "
        "protocol's text before its prompt; None = the protocol's alone"
    ),
]
MaxHistoryMessages = Annotated[
    int | None,
    Field(
        ge=0,
        description="earlier messages of the thread the planner sees (a text protocol's written into its "
        "prompt): the newest that fit, starting at a question, each search's calls with their results; "
        "None = all",
    ),
    # a served graph bounds it by default; a request asking for more would widen each model request
    OperatorCap("server_max_history_messages"),
]
MaxHistoryTokens = Annotated[
    int | None,
    Field(
        ge=0,
        description="the same bound in approximate tokens (LangChain's count_tokens_approximately); "
        "None = no token bound",
    ),
    Uncapped("it only narrows the thread the planner sees"),
]
ProtocolName = Annotated[
    str,
    Field(
        description="how the planner searches: 'tags' = <search> a ## b </search> text, 'tools' = parallel "
        "calls of a search tool (a chat model with bind_tools), 'tool_text' = those calls written as text "
        "(<tool_call> blocks, <tool_response> replies; what training uses for 'tools'); 'auto' = tools for "
        "a chat model with bind_tools, tags otherwise (the trained checkpoints behind openai:/vllm:/hf: "
        "speak tags); or the name of a registered protocol"
    ),
]

MiddlewarePrompt = Annotated[
    Literal["with_instructions", "as_given"],
    Field(
        description="a system prompt a middleware writes (@dynamic_prompt, any wrap_model_call that replaces "
        "the system message): 'with_instructions' = the protocol's parallel-search instructions follow it, "
        "so the model still knows how to search; 'as_given' = sent as it is (it words its own instructions)"
    ),
]


class GraphConfig(BaseModel):
    """Knobs of every graph builder (arguments with defaults, validated)."""

    model_config = ConfigDict(extra="forbid")

    top_k: TopK = 3
    passage_budget: PassageBudget = None
    max_turns: MaxTurns = 4
    max_subqueries: MaxSubqueries = 8
    max_concurrency: MaxConcurrency = None
    search_timeout_s: SearchTimeout = 10.0
    search_retries: SearchRetries = 1
    max_observation_words: MaxObservationWords = None
    prompt_template: PromptTemplate = None
    observation_titles: ObservationTitles = None
    max_new_tokens: MaxNewTokens = 500
    temperature: Temperature = 0.0
    top_p: TopP = 1.0
    split_subqueries: SplitSubqueries = True
    max_stages: MaxStages = DEFAULT_MAX_STAGES
    resolver: ResolverKnob = None
    protocol: ProtocolName = "auto"
    system_prompt: SystemPrompt = None
    max_history_messages: MaxHistoryMessages = None
    max_history_tokens: MaxHistoryTokens = None
    middleware_prompt: MiddlewarePrompt = "with_instructions"

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str) -> str:
        return check_choice(value, protocol_choices(), "protocol")

    def search_top_k(self, subqueries: int) -> int:
        """Passages per sub-query in a search of ``subqueries``: ``top_k``, shrunk by the
        observation budget when one is set (never below one passage each)."""
        if self.passage_budget is None:
            return self.top_k
        return min(self.top_k, max(1, self.passage_budget // max(1, subqueries)))

    def recursion_limit(self) -> int:
        """Supersteps an episode can take at the largest ``max_turns`` and ``max_stages`` a request
        may set (per turn the planner, and a search + join per stage)."""
        return (1 + 2 * MAX_STAGES_LIMIT) * (MAX_TURNS_LIMIT + 1) + 10

    def updated(self, **values: Any) -> GraphConfig:
        """A validated copy with ``values`` set (``None`` values are ignored: "not given")."""
        given = {k: v for k, v in values.items() if v is not None}
        if not given:
            return self
        return GraphConfig.model_validate({**self.model_dump(exclude_unset=True), **given})


class _RequestKnobs(TypedDict, total=False):
    """The knobs both a builder and a request may set (the request's ``resolver`` is a name only)."""

    top_k: TopK
    passage_budget: PassageBudget
    max_turns: MaxTurns
    max_subqueries: MaxSubqueries
    max_new_tokens: MaxNewTokens
    temperature: Temperature
    top_p: TopP
    max_stages: MaxStages
    max_history_messages: MaxHistoryMessages
    max_history_tokens: MaxHistoryTokens


class GraphOptions(_RequestKnobs, total=False):
    """The builders' keyword arguments, exactly :class:`GraphConfig`'s fields: typed through this
    (PEP 692 ``Unpack``), editors list the knobs of ``build_parallel_search_graph(..., top_k=5)``."""

    max_concurrency: MaxConcurrency
    search_timeout_s: SearchTimeout
    search_retries: SearchRetries
    max_observation_words: MaxObservationWords
    prompt_template: PromptTemplate
    observation_titles: ObservationTitles
    split_subqueries: SplitSubqueries
    resolver: ResolverChoice  # a builder also takes a function or an object with aresolve
    protocol: ProtocolName | Any  # a name, or a SearchProtocol object (a builder only)
    system_prompt: SystemPrompt
    middleware_prompt: MiddlewarePrompt


@with_config(ConfigDict(extra="allow"))
class GraphContext(_RequestKnobs, total=False):
    """What one request may change, as ``config={"configurable": {"top_k": 5}}`` or LangGraph's
    runtime ``context={"top_k": 5}``; with :class:`GraphConfig`'s types, so the bounds are the same.
    Other ``configurable`` keys (``thread_id``, ...) pass through untouched, but for a misspelt
    knob (``topk``), which fails the run naming the knob it meant (:func:`check_request_keys`)."""

    resolver: ResolverKnob


#: the keys a request may set (the rest of GraphConfig is fixed when the graph is built)
PER_REQUEST_KEYS: tuple[str, ...] = tuple(GraphContext.__annotations__)


def declared_caps(context: type) -> dict[str, OperatorCap | Uncapped]:
    """Each knob of the request schema ``context`` (a TypedDict) with its declared operator cap or
    why it needs none; a knob that declares neither is a TypeError naming it, so a new per-request
    knob cannot reach a server uncapped by omission."""
    out: dict[str, OperatorCap | Uncapped] = {}
    for key, hint in get_type_hints(context, include_extras=True).items():
        marks = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, OperatorCap | Uncapped)]
        if len(marks) != 1:
            raise TypeError(
                f"the per-request knob {key!r} must declare one operator cap in its Annotated type: "
                "OperatorCap('server_max_...') (a Settings field) or Uncapped('why it needs none')"
            )
        out[key] = marks[0]
    return out


#: the per-request knobs an operator caps, by the ``Settings`` field that holds each cap
OPERATOR_CAPS: dict[str, str] = {
    key: mark.setting for key, mark in declared_caps(GraphContext).items() if isinstance(mark, OperatorCap)
}

#: the knobs the command line sets, by flag (its type, choices, help and default come from the field)
CLI_FLAGS: dict[str, str] = {
    "top_k": "--top-k",
    "passage_budget": "--passage-budget",
    "max_turns": "--max-turns",
    "max_subqueries": "--max-subqueries",
    "max_stages": "--max-stages",
    "prompt_template": "--template",
    "resolver": "--resolver",
}


def knob_bounds(keys: tuple[str, ...] = PER_REQUEST_KEYS) -> dict[str, dict[str, Any]]:
    """Each knob's default and JSON-schema bounds, as a form shows them (the page's inputs)."""
    props = GraphConfig.model_json_schema()["properties"]
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        prop = props[key]
        kinds = [prop, *prop.get("anyOf", [])]
        bounds = {b: k[b] for k in kinds for b in ("minimum", "maximum", "exclusiveMinimum") if b in k}
        out[key] = {"default": prop.get("default"), "description": prop.get("description"), **bounds}
    return out


_CONTEXT = TypeAdapter(GraphContext)


def _fields_of(context: Any) -> Mapping[str, Any]:
    """A context object's values by name (a dataclass with slots has no ``__dict__``)."""
    if is_dataclass(context) and not isinstance(context, type):
        return {f.name: getattr(context, f.name) for f in fields(context)}
    return getattr(context, "__dict__", {})


def request_overrides(*sources: Mapping[str, Any] | Any) -> dict[str, Any]:
    """The per-request values found in ``sources`` (configurable dicts or a context; later ones
    win), validated strictly: a bad value is a ``ValueError`` naming the key. Other keys pass
    through (LangGraph's own, a parent graph's, a caller's context)."""
    merged: dict[str, Any] = {}
    for src in sources:  # a None context has no __dict__, so it adds nothing
        items = src if isinstance(src, Mapping) else _fields_of(src)
        merged.update({k: v for k, v in items.items() if k in PER_REQUEST_KEYS and v is not None})
    if not merged:
        return {}
    try:
        checked = _CONTEXT.validate_python(merged, strict=True)  # true is no number, "3" no int
    except ValidationError as e:
        raise ValueError(f"invalid per-request graph configuration: {describe_validation_error(e)}") from e
    return {k: checked[k] for k in PER_REQUEST_KEYS if k in checked}


def _spelling(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")


@functools.lru_cache(maxsize=1024)
def misspelt_knob(key: Any) -> str | None:
    """The per-request knob ``key`` misspells (``topk``, ``top-k``, ``maxTurns``, ``max_turn``:
    case and separators aside, about one letter off), or None. Only a key this close to a knob is
    taken for a mistake (``max_tokens``, a chat model's configurable field, is not): any other passes through,
    since a run's ``configurable`` and ``context`` also carry LangGraph's keys, a parent graph's
    and a caller's own."""
    if not isinstance(key, str) or key in PER_REQUEST_KEYS:
        return None
    spelt = {_spelling(k): k for k in PER_REQUEST_KEYS}
    close = difflib.get_close_matches(_spelling(key), spelt, n=1, cutoff=0.9)  # one letter off
    return spelt[close[0]] if close else None


def check_request_keys(source: Mapping[str, Any] | Any, where: str) -> None:
    """A ``ValueError`` naming the first key of ``source`` (a run's ``configurable`` or its
    ``context``; ``where`` says which) that misspells a per-request knob, with the knob it meant:
    a silently ignored ``topk`` would run with the default."""
    items = source if isinstance(source, Mapping) else getattr(source, "__dict__", None) or {}
    for key in items:
        meant = misspelt_knob(key)
        if meant is not None:
            raise ValueError(
                f"{where} key {key!r} is not a per-request knob (did you mean {meant!r}?); the knobs are "
                f"{', '.join(PER_REQUEST_KEYS)}"
            )
