"""The graph's node functions, bound to one policy, searcher and config: ``begin`` opens an
episode, the planner makes one policy turn, the router fans a search out with ``Send``, a searcher
node runs one sub-query, the join writes the round's results in sub-query order, the answer node
finishes the episode. A search with ``#k`` runs in stages inside its round (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import replace
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Overwrite, Send

from parallelsearch.agents.policies.base import Policy, TurnRequest
from parallelsearch.agents.protocol import (
    INVALID_FEEDBACK,
    STOP_STRINGS,
    TOOL_STOP_STRINGS,
    TOOL_TEXT_RETRY,
    TOOL_TURN_END,
    Protocol,
    check_protocol,
    content_text,
    format_observation,
    format_passages,
    format_tool_response,
    parse_action,
    parse_tool_calls,
    parse_tool_text,
    render_prompt,
    render_tool_calls,
    searched_as_line,
    tool_feedback,
    tool_text_observation,
)
from parallelsearch.agents.resolvers import (
    ParentResult,
    Resolver,
    ResolverError,
    as_resolver,
    searcher_encoder,
)
from parallelsearch.agents.searchers.base import Searcher, guarded_search, store_names
from parallelsearch.agents.subquery_plan import plan_action
from parallelsearch.graphs.config import PER_REQUEST_KEYS, GraphConfig, request_overrides
from parallelsearch.graphs.state import ObservationRecord, SearchState, SearchTask, TurnRecord
from parallelsearch.stores.passages import Passage
from parallelsearch.stores.text import scrub_text

log = logging.getLogger(__name__)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _turn_record(res: Any, action: Any, *, index: int, final: bool, ms: float) -> TurnRecord:
    """The trajectory's record of one policy turn (a search in the final turn is invalid)."""
    kind = "invalid" if final and action.kind == "search" else action.kind
    return {
        "type": "turn",
        "index": index,
        "final": final,
        "text": res.text if isinstance(res.text, str) else "",
        "action": kind,
        "subqueries": list(action.subqueries),
        "answer": action.answer,
        "reason": action.reason
        if action.kind == "invalid"
        else ("searching is disabled in the final turn" if kind == "invalid" else None),
        "finish_reason": res.finish_reason,
        "ms": ms,
        "labels": list(res.labels),
    }


def _passages(row: dict[str, Any]) -> list[Passage]:
    """A searcher result row's passages as objects again (the row's dicts carry a ``source``)."""
    return [Passage(**{k: v for k, v in p.items() if k != "source"}) for p in row["passages"]]


def _usage(st: Any, res: Any) -> dict[str, Any]:
    """Labels and token counts after turn ``res``, written only when changed (a write costs time)."""
    update: dict[str, Any] = {}
    labels = st.get("labels") or []
    if not set(res.labels) <= set(labels):
        update["labels"] = sorted(set(labels) | set(res.labels))
    if res.prompt_tokens is not None:
        update["tokens_in"] = (st.get("tokens_in") or 0) + res.prompt_tokens
    if res.completion_tokens is not None:
        update["tokens_out"] = (st.get("tokens_out") or 0) + res.completion_tokens
    return update


#: an episode's counts as it begins
_ZERO_COUNTS = dict.fromkeys(
    ("policy_calls", "search_rounds", "subqueries", "resolver_calls", "passages", "errors"), 0
)

#: what a tools-protocol planner is told after a reply with neither a tool call nor an answer
TOOLS_RETRY = "Your reply had no tool call and no answer. Call search, or reply with the answer only."
#: what a tools-protocol reply cut at the token limit without a call is told
TOOLS_CUT = "Your reply was cut at the token limit before it finished. Call search, or reply with a short answer only."
#: appended to the tools protocol's final (answer-only) turn; the tags protocol's has no such note
TOOLS_FINAL = "No more searches are possible. Reply now with the answer only, without a tool call."
#: the AI message of an episode that ended without an answer
NO_ANSWER = "No answer: the planner did not give one within its turns."


def _tool_text_note(action: Any, text: str) -> str:
    """The text form's reply to an invalid turn (the policy's text stays verbatim, as training
    tokenised it): one ``<tool_response>`` per call, or one retry note for a turn without calls."""
    closed = text.rstrip().endswith(TOOL_TURN_END)
    if action.calls:
        return tool_text_observation([note for _, note in tool_feedback(action)], closed)
    return tool_text_observation([], closed, TOOL_TEXT_RETRY.format(reason=action.reason or "invalid turn"))


def _planned(action: Any, cfg: GraphConfig, final: bool) -> tuple[Any, dict[str, Any] | None]:
    """A search's ``#k`` plan as ``last_action`` carries it (stages, references by index), or None;
    a bad plan makes the turn invalid, with the reason. A search without ``#k`` is unchanged."""
    if action.kind != "search" or final or not any("#" in q for q in action.subqueries):
        return action, None
    plan = plan_action(action, max_stages=cfg.max_stages)
    if not plan.valid:
        return replace(action, kind="invalid", reason=f"invalid #k reference: {plan.error}"), None
    if not plan.dependent:
        return action, None
    refs = [[[ref.k, ref.target] for ref in refs] for refs in plan.references]
    return action, {"stages": [list(s) for s in plan.stages], "refs": refs}


class Nodes:
    def __init__(
        self,
        policy: Policy,
        searcher: Searcher | None,
        config: GraphConfig,
        answer_policy: Policy | None = None,
        pinned: tuple[str, ...] = (),
        protocol: Protocol = "tags",
        resolver: Any = None,
    ):
        check_protocol(protocol, " (the builders resolve 'auto' first)")
        self.tools = protocol == "tools"
        # the tools protocol's text form: the policy (training's) writes <tool_call> blocks as text
        self.tool_text = self.tools and bool(getattr(policy, "tool_text", False))
        self.protocol = protocol
        self._warned = False  # the all-invalid warning is given once per graph
        self.graph_name = "parallelsearch"  # the answer message's ``name``; builders set their graph's
        self.references = False  # the dag graph's turns tell the policy #k references are welcome
        self.policy = policy
        self.searcher = searcher
        self.cfg = config
        self.answer_policy = answer_policy
        self.pinned = frozenset(pinned)  # per-request keys this graph kind does not let a request change
        self._stores = store_names(searcher) if searcher is not None else []
        self._sems: dict[int, asyncio.Semaphore] = {}
        self._resolver_given = None if resolver is None else as_resolver(resolver)  # the builder's
        self._resolvers: dict[str, Resolver] = {}  # the named ones, made on first use, once

    # -- helpers -------------------------------------------------------------------------
    def _configured(self, config: RunnableConfig | None, runtime: Runtime | None) -> GraphConfig:
        """This run's config: the graph's, with the request's overrides from ``configurable`` and
        LangGraph's runtime ``context`` (which wins), except the keys this graph kind pins."""
        configurable = (config or {}).get("configurable") or {}
        context = getattr(runtime, "context", None)
        if context is None and not any(k in configurable for k in PER_REQUEST_KEYS):
            return self.cfg  # most runs set none: nothing is validated or copied
        overrides = request_overrides(configurable, context)
        return self.cfg.updated(**{k: v for k, v in overrides.items() if k not in self.pinned})

    # -- nodes ---------------------------------------------------------------------------
    async def begin(self, state: SearchState, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        """Open an episode: every run with input passes here once (a resumed run does not). On a
        thread that holds one, the episode's channels are reset; the earlier stays in ``history``."""
        cfg = self._configured(config, runtime)
        history = state.get("history") or []
        last = (state.get("messages") or [None])[-1]
        consumed = history[-1].get("asked") if history else None
        # the question is the last message when it is a human message no earlier episode answered
        asked = last if isinstance(last, HumanMessage) and (last.id is None or last.id != consumed) else None
        q = content_text(asked.content) if asked is not None else state.get("question")
        if not isinstance(q, str) or not q.strip():
            raise ValueError(
                "the graph input needs a non-empty 'question' string or 'messages' ending in a new human message"
            )
        meta = state.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise ValueError(f"the graph input's 'metadata' must be an object, got {type(meta).__name__}")
        prompt = render_prompt(q, cfg.prompt_template or "paper", self._stores)  # builders set it
        started = time.time()
        if asked is None:  # a {"question"} input: the question joins the conversation
            asked = HumanMessage(content=q, id=str(uuid.uuid4()))
        episode = history[-1]["episode"] + 1 if history else 0
        records: list[dict[str, Any]] = []
        if history and history[-1].get("status") == "running":
            # the previous episode never reached its answer (an error, or new input while it waited)
            records.append({"episode": episode - 1, "status": "abandoned"})
        records.append(
            {
                "episode": episode,
                "question": q,
                "metadata": dict(meta or {}),
                "status": "running",
                "started_at": started,
                "asked": asked.id,
            }
        )
        update: dict[str, Any] = {
            "history": records,
            "protocol": self.protocol,
            "transcript": prompt,
            "segments": [("prompt", prompt)],
            "round": 0,
            "started_at": started,
            **_ZERO_COUNTS,
            "labels": [],
            "tokens_in": None,
            "tokens_out": None,
            "policy": getattr(self.policy, "name", type(self.policy).__name__),
        }
        if state.get("question") != q:
            update["question"] = q
        if asked is not last:
            update["messages"] = [asked]
        if self.tools:
            update["chat"] = [HumanMessage(content=prompt)]
        if meta:
            update["metadata"] = {}  # consumed: a later question on the thread does not inherit it
        if state.get("transcript"):
            # the thread holds an earlier episode: its reducer channels start empty again
            update.update(
                dict.fromkeys(("answer", "status", "total_ms", "last_action", "next_stage")),
                stage=0,
                trajectory=Overwrite([]),
                results=Overwrite([]),
                node_ms=Overwrite({}),
            )
        return update

    def _request(
        self, st: dict[str, Any], cfg: GraphConfig, final: bool, role: str = "planner"
    ) -> TurnRequest:
        history = st.get("history") or [{}]
        meta = dict(history[-1].get("metadata") or {})  # the episode's (begin consumed the input's)
        return TurnRequest(
            transcript=st["transcript"],
            segments=list(st.get("segments") or []),
            stop=TOOL_STOP_STRINGS if self.tool_text else STOP_STRINGS,
            max_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            turn_index=st.get("policy_calls", 0),
            final=final,
            allow_split=cfg.split_subqueries,
            references=self.references and cfg.split_subqueries,
            max_subqueries=cfg.max_subqueries,
            max_stages=cfg.max_stages,
            question=st.get("question", ""),
            metadata=meta,
            role=role,
        )

    async def planner(self, state: SearchState, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        t0 = time.perf_counter()
        cfg = self._configured(config, runtime)
        st: dict[str, Any] = state  # type: ignore[assignment]
        if not st.get("transcript"):
            raise RuntimeError("the planner ran before an episode began (wire START -> begin -> planner)")
        update: dict[str, Any] = {}
        final = st["policy_calls"] >= cfg.max_turns
        request = self._request(st, cfg, final)
        if self.tools:
            request.messages = list(st["chat"]) + ([HumanMessage(content=TOOLS_FINAL)] if final else [])
        res = await self.policy.agenerate(request)
        text = res.text if isinstance(res.text, str) else ""
        limits = {"max_subqueries": cfg.max_subqueries, "split": cfg.split_subqueries}
        if self.tools and not self.tool_text:
            cut = res.finish_reason == "length"
            action = parse_tool_calls(res.tool_calls, text, res.invalid_tool_calls, cut=cut, **limits)
        else:
            action = (parse_tool_text if self.tool_text else parse_action)(text, **limits)
        action, stages = _planned(action, cfg, final)
        feedback = action.kind == "invalid" and not final  # the final turn gets no corrective note
        # what the turn said (the tools protocol's in its text form) and the corrective note it gets
        if self.tool_text:
            said, note = text, _tool_text_note(action, text) if feedback else ""
        elif self.tools:
            said, note = self._tool_turn(st, res, action, text, feedback, update)
        else:
            said, note = text, INVALID_FEEDBACK if feedback else ""
        ms = _ms(t0)
        turn = _turn_record(res, action, index=st["policy_calls"], final=final, ms=ms)
        last_action: dict[str, Any] = {
            "kind": turn["action"],
            "subqueries": list(action.subqueries),
            "answer": action.answer,
            "final": final,
            "calls": [[c.id, c.index] for c in action.calls],
        }
        if stages is not None:  # only a search with #k carries a plan: any other is as it always was
            turn["stages"] = [list(s) for s in stages["stages"]]
            last_action.update(stages)
        update.update(
            transcript=st["transcript"] + said + note,
            segments=[*st["segments"], ("policy", said), *([("feedback", note)] if feedback else [])],
            policy_calls=st["policy_calls"] + 1,
            last_action=last_action,
            trajectory=[turn],
            node_ms={"planner": ms},
            **_usage(st, res),
        )
        if action.kind == "answer":
            update["answer"] = action.answer
        return update

    def _tool_turn(
        self, st: dict[str, Any], res: Any, action: Any, text: str, feedback: bool, update: dict[str, Any]
    ) -> tuple[str, str]:
        """A tools-protocol turn: the AI message joins the episode's chat (with one corrective
        ``ToolMessage`` per call when it is invalid); returns its text form and the note's."""
        calls = res.tool_calls or []
        msg = res.message if res.message is not None else AIMessage(content=text, tool_calls=calls)
        update["chat"] = chat = [*st["chat"], msg]
        written = ""
        if feedback and action.calls:
            notes = tool_feedback(action)
            chat.extend(ToolMessage(content=note, tool_call_id=cid, status="error") for cid, note in notes)
            written = "".join(format_tool_response(note) for _, note in notes)
        elif feedback:
            note = TOOLS_CUT if res.finish_reason == "length" else TOOLS_RETRY
            chat.append(HumanMessage(content=note))
            written = f"\n{note}\n"
        return render_tool_calls(text, [*calls, *res.invalid_tool_calls]), written

    def route(self, state: SearchState) -> Any:
        act = state.get("last_action") or {}
        if act.get("kind") == "answer" or act.get("final"):
            return "answer"
        if act.get("kind") == "search":
            r = state.get("round", 0)
            first = act["stages"][0] if act.get("stages") else range(len(act["subqueries"]))
            width = len(act["subqueries"])
            return [
                Send("search", {"query": act["subqueries"][i], "index": i, "round": r, "width": width})
                for i in first
            ]
        return "planner"

    def after_join(self, state: SearchState) -> Any:
        """The next stage of a search with ``#k`` (its resolved sub-queries, fanned out with
        ``Send`` like the first), or the planner once the round is complete."""
        tasks = state.get("next_stage")
        if tasks:
            return [Send("search", dict(t)) for t in tasks]
        return "planner"

    def _sem(self) -> asyncio.Semaphore | None:
        """This loop's limit on searcher nodes running at once (``max_concurrency``), if any."""
        if not self.cfg.max_concurrency:
            return None
        # one per event loop: a semaphore belongs to the loop it is first awaited on
        loop = id(asyncio.get_running_loop())
        if loop not in self._sems:
            self._sems[loop] = asyncio.Semaphore(self.cfg.max_concurrency)
        return self._sems[loop]

    async def search(self, task: SearchTask, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        t0 = time.perf_counter()
        # the search's width sizes the observation budget's share; it is not part of the result row
        top_k = self._configured(config, runtime).search_top_k(task.get("width", 1))
        task = {k: v for k, v in task.items() if k != "width"}  # type: ignore[assignment]
        async with self._sem() or contextlib.nullcontext():
            out = await self._one(task, top_k)
        out["ms"] = _ms(t0)
        # the join adds the round's searcher milliseconds to node_ms in its own single write
        return {"results": [out]}

    async def _one(self, task: SearchTask, top_k: int) -> dict[str, Any]:
        if task.get("error"):  # a dependent sub-query whose #k could not be resolved
            return {**task, "passages": [], "attempts": 0}
        if self.searcher is None:
            return {**task, "passages": [], "error": "no searcher configured"}
        outcome = await guarded_search(
            self.searcher,
            task["query"],
            top_k,
            timeout_s=self.cfg.search_timeout_s,
            retries=self.cfg.search_retries,
        )
        return {
            **task,
            "passages": [p.to_dict() for p in outcome.passages],
            "error": outcome.error,
            "attempts": outcome.attempts,
            **({"note": outcome.note} if outcome.note else {}),
        }

    async def join(self, state: SearchState, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        t0 = time.perf_counter()
        r = state.get("round", 0)
        rows = sorted((x for x in state.get("results", []) if x.get("round") == r), key=lambda x: x["index"])
        act = state.get("last_action") or {}
        stages: list[list[int]] = act.get("stages") or []
        stage = state.get("stage", 0) if stages else 0
        if stage + 1 < len(stages):
            resolver = self._resolver(self._configured(config, runtime))
            return await self._next_stage(state, resolver, rows, t0)
        searched_as = (
            [row["query"] if act["refs"][row["index"]] and not row.get("error") else None for row in rows]
            if stages
            else []
        )
        errors = [row.get("error") for row in rows]
        update: dict[str, Any] = {}
        if self.tools:
            obs, update["chat"] = self._tool_results(state, rows, searched_as)
        else:
            obs = format_observation(
                [_passages(row) for row in rows],
                errors,
                [row["query"] for row in rows],
                self.cfg.max_observation_words,
                self.cfg.observation_titles or "stripped",
                searched_as,
            )
        entry: ObservationRecord = {
            "type": "observation",
            "round": r,
            "text": obs,
            "results": [
                {
                    "query": row["query"],
                    "error": row.get("error"),
                    "ms": row.get("ms"),
                    "passages": [
                        {k: p[k] for k in ("title", "score", "id", "store")} for p in row["passages"]
                    ],
                    **({"note": row["note"]} if row.get("note") else {}),
                }
                for row in rows
            ],
        }
        if stages:  # the round of a search with #k: how many stages it took, and no stage pending
            entry["stages"] = len(stages)
            update.update(stage=0, next_stage=None)
        return {
            **update,
            "transcript": state["transcript"] + obs,
            "segments": list(state.get("segments") or []) + [("observation", obs)],
            "round": r + 1,
            "search_rounds": state.get("search_rounds", 0) + max(len(stages), 1),
            "subqueries": state.get("subqueries", 0) + len(rows),
            "passages": state.get("passages", 0) + sum(len(row["passages"]) for row in rows),
            "errors": state.get("errors", 0) + sum(1 for e in errors if e),
            "trajectory": [entry],
            "node_ms": {"search": sum(row.get("ms") or 0.0 for row in rows), "join": _ms(t0)},
        }

    def _resolver(self, cfg: GraphConfig) -> Resolver:
        """The run's resolver: the request's or the config's name, else the builder's function,
        else ``passage``; each named one is made once per graph."""
        name = cfg.resolver
        if name is None and self._resolver_given is not None:
            return self._resolver_given
        name = name or "passage"
        if name not in self._resolvers:
            extractor = self.answer_policy if self.answer_policy is not None else self.policy
            if name == "policy" and getattr(extractor, "name", None) == "external":
                raise ResolverError(
                    "resolver 'policy' asks the model for each #k, but this graph's policy is supplied by a "
                    "trainer turn by turn; use resolver 'passage' (or a function) in the RL environment"
                )
            self._resolvers[name] = as_resolver(
                name, searcher=self.searcher, policy=extractor, embedder=searcher_encoder(self.searcher)
            )
        return self._resolvers[name]

    async def _next_stage(
        self, state: SearchState, resolver: Resolver, rows: list[dict[str, Any]], t0: float
    ) -> dict[str, Any]:
        """The join of a stage that is not the last: resolve the next stage's ``#k`` (concurrently)
        and hand its tasks to :meth:`after_join`. Nothing reaches the transcript yet."""
        act, stage = state["last_action"], state.get("stage", 0)
        by_index = {row["index"]: row for row in rows}
        history = state.get("history") or [{}]
        hops = (history[-1].get("metadata") or {}).get("hops") or []
        r = state.get("round", 0)

        def parent(k: int, target: int) -> ParentResult:
            row = by_index.get(target) or {"query": act["subqueries"][target], "passages": []}
            hop = hops[k - 1] if 0 < k <= len(hops) and isinstance(hops[k - 1], dict) else {}
            return ParentResult(
                k=k,
                searched=row["query"],
                passages=tuple(_passages(row)),
                written=act["subqueries"][target],
                gold=str(hop["answer"]) if hop.get("answer") is not None else None,
            )

        async def resolve(i: int) -> dict[str, Any]:
            # its resolved query, or (a parent or the resolver failed) why it is not searched
            written = act["subqueries"][i]
            task = {"query": written, "index": i, "round": r, "width": len(act["subqueries"])}
            failed = [(k, t) for k, t in act["refs"][i] if (by_index.get(t) or {}).get("error")]
            if failed:
                k, t = failed[0]
                return {**task, "error": f"not searched: #{k} ({by_index[t]['query']!r}) failed"}
            try:
                text = await resolver.aresolve(written, [parent(k, t) for k, t in act["refs"][i]])
            except ResolverError:
                raise  # a resolver that cannot work here (gold without hops, a non-text result)
            except Exception as e:  # a model or function that failed this time: the episode goes on
                why = f"not searched: resolving its #k failed ({type(e).__name__}: {e})"
                return {**task, "error": why, "resolved": True}
            query = " ".join(str(text).split())
            if not query:
                raise ResolverError(
                    f"resolver {getattr(resolver, 'name', type(resolver).__name__)} turned sub-query "
                    f"{written!r} into empty text; it must return the query to search"
                )
            return {**task, "query": query, "resolved": True}

        tasks = await asyncio.gather(*(resolve(i) for i in act["stages"][stage + 1]))
        calls = sum(1 for t in tasks if t.pop("resolved", False))
        return {
            "stage": stage + 1,
            "next_stage": list(tasks),
            "resolver_calls": state.get("resolver_calls", 0) + calls,
            "node_ms": {"resolve": _ms(t0)},
        }

    def _tool_results(
        self, state: SearchState, rows: list[dict[str, Any]], searched_as: list[str | None]
    ) -> tuple[str, list[AnyMessage]]:
        """One ``ToolMessage`` per call of the round (a duplicate call gets its sub-query's result;
        a ``#k`` call first what it was searched with), and the round's text form."""
        texts: list[str] = []
        for i, row in enumerate(rows):
            if row.get("error"):
                body = f"Search failed for '{row['query']}': {row['error']}"
            else:
                body = format_passages(_passages(row), self.cfg.observation_titles or "stripped").strip()
                body = scrub_text(body)[0] or "No passages found."
            if i < len(searched_as) and searched_as[i] is not None:
                body = searched_as_line(searched_as[i] or "") + body
            if self.cfg.max_observation_words is not None:
                words = body.split(" ")
                if len(words) > self.cfg.max_observation_words:
                    body = " ".join(words[: self.cfg.max_observation_words]) + " ..."
            texts.append(body)
        calls = (state.get("last_action") or {}).get("calls") or []
        tool_msgs = [
            ToolMessage(
                content=texts[i] if i is not None and i < len(texts) else "Not searched.",
                tool_call_id=cid,
                status="error" if i is not None and i < len(rows) and rows[i].get("error") else "success",
            )
            for cid, i in calls
        ]
        if self.tool_text:  # the text form: one ChatML user turn of <tool_response> blocks, in call order
            closed = state["transcript"].rstrip().endswith(TOOL_TURN_END)
            obs = tool_text_observation([str(m.content) for m in tool_msgs], closed)
            return obs, list(state.get("chat") or [])
        obs = "".join(format_tool_response(str(m.content)) for m in tool_msgs) + "\n"
        return obs, list(state.get("chat") or []) + tool_msgs

    async def retrieve_once(
        self, state: SearchState, config: RunnableConfig, runtime: Runtime
    ) -> dict[str, Any]:
        """RAG baseline: search the question itself once, before the (answer-only) turn."""
        update = await self.begin(state, config, runtime)
        task: SearchTask = {"query": state["question"].strip(), "index": 0, "round": 0}
        found = await self.search(task, config, runtime)
        merged = {**state, **update, "results": found["results"]}
        joined = await self.join(merged, config, runtime)  # type: ignore[arg-type]
        joined["results"] = found["results"]
        if isinstance(update.get("trajectory"), Overwrite):
            # a reset episode: this node's reducer writes replace the old values, not add to them
            for key in ("trajectory", "results", "node_ms"):
                joined[key] = Overwrite(joined[key])
        return {**update, **joined}

    def _warn_unanswered(self, state: SearchState) -> None:
        """Say once per graph when every turn of an unanswered episode was invalid: a planner that
        never speaks the protocol (a chat model under tags) would otherwise fail silently."""
        turns = [t for t in state.get("trajectory") or [] if t.get("type") == "turn"]
        if turns and all(t.get("action") == "invalid" for t in turns):
            self._warned = True
            log.warning(
                "%s: every one of %d planner turns was invalid (first: %s); the episode ended unanswered. "
                "Does the planner speak the %s protocol?%s",
                getattr(self.policy, "name", type(self.policy).__name__),
                len(turns),
                turns[0].get("reason"),
                self.protocol,
                " A chat model that supports bind_tools can use protocol='tools'." if not self.tools else "",
            )

    async def answer(self, state: SearchState, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        t0 = time.perf_counter()
        cfg = self._configured(config, runtime)
        update: dict[str, Any] = {}
        answer = state.get("answer")
        if self.answer_policy is not None:
            st = dict(state)
            last = (st.get("segments") or [])[-1:]
            if answer is not None and last and last[0][0] == "policy":
                # hand the answer turn to the answer model, on the transcript before the planner's answer
                st["transcript"] = st["transcript"][: len(st["transcript"]) - len(last[0][1])]
                st["segments"] = st["segments"][:-1]
            res = await self.answer_policy.agenerate(self._request(st, cfg, final=True, role="answer"))
            act = parse_action(res.text, max_subqueries=cfg.max_subqueries)
            answer = act.answer if act.kind == "answer" else answer
            update.update(
                policy_calls=state.get("policy_calls", 0) + 1,
                trajectory=[
                    _turn_record(res, act, index=state.get("policy_calls", 0), final=True, ms=_ms(t0))
                    | {"role": "answer"}
                ],
                **_usage(state, res),
            )
        started = state.get("started_at") or time.time()
        status = "answered" if answer is not None else "unanswered"
        if answer is None and not self._warned:
            self._warn_unanswered(state)
        total_ms = round((time.time() - started) * 1000, 3)
        history = state.get("history") or [{"episode": 0}]
        calls = update.get("policy_calls", state.get("policy_calls", 0))
        reply = AIMessage(
            content=answer if answer is not None else NO_ANSWER,
            name=self.graph_name,
            response_metadata={"status": status},
        )
        update.update(
            messages=[reply],
            answer=answer,
            status=status,
            total_ms=total_ms,
            node_ms={"answer": _ms(t0)},
            history=[
                {
                    "episode": history[-1]["episode"],
                    "status": status,
                    "answer": answer,
                    "policy_calls": calls,
                    **{k: state.get(k, 0) for k in ("search_rounds", "subqueries", "resolver_calls")},
                    "total_ms": total_ms,
                }
            ],
        )
        return update
