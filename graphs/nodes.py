"""The graph's node functions, bound to one policy, searcher and config.

Small private steps, one job each: ``begin`` opens an episode for the run's question
(on a thread that already holds one it resets the episode's channels and keeps the
old episode in ``history``); the planner makes one policy turn; the router fans a
search out with ``Send``; a searcher node runs one sub-query; the join node puts the
round's results back in sub-query order as one ``<information>`` block; the answer
node finishes the episode.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Overwrite, Send

from parallelsearch.agents.policies.base import Policy, TurnRequest
from parallelsearch.agents.protocol import (
    INVALID_FEEDBACK,
    STOP_STRINGS,
    format_observation,
    parse_action,
    render_prompt,
)
from parallelsearch.agents.searchers.base import Searcher, guarded_search, store_names
from parallelsearch.graphs.config import PER_REQUEST_KEYS, GraphConfig, request_overrides
from parallelsearch.graphs.state import SearchState, SearchTask
from parallelsearch.stores.passages import Passage


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _add(a: int | None, b: int | None) -> int | None:
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)


def _configured(
    base: GraphConfig, config: RunnableConfig | None, runtime: Runtime | None, pinned: frozenset[str]
) -> GraphConfig:
    """The config of this run: ``base`` with the request's per-request overrides, if any.

    Overrides come from ``config["configurable"]`` (LangServe, ``ainvoke(config=...)``) and
    from LangGraph's runtime ``context`` (Agent Server, ``ainvoke(context=...)``); the
    context wins. Keys the graph kind ``pinned`` (the one-turn baselines' ``max_turns``) are
    not changed. Most runs set none, and then nothing is validated or copied.
    """
    configurable = (config or {}).get("configurable") or {}
    context = getattr(runtime, "context", None)
    if context is None and not any(k in configurable for k in PER_REQUEST_KEYS):
        return base
    overrides = {k: v for k, v in request_overrides(configurable, context).items() if k not in pinned}
    return base.updated(**overrides) if overrides else base


class Nodes:
    def __init__(
        self,
        policy: Policy,
        searcher: Searcher | None,
        config: GraphConfig,
        answer_policy: Policy | None = None,
        pinned: tuple[str, ...] = (),
    ):
        self.policy = policy
        self.searcher = searcher
        self.cfg = config
        self.answer_policy = answer_policy
        self.pinned = frozenset(pinned)  # per-request keys this graph kind does not let a request change
        self._stores = store_names(searcher) if searcher is not None else []
        self._sems: dict[int, asyncio.Semaphore] = {}

    # -- helpers -------------------------------------------------------------------------
    def _begin(self, state: SearchState, cfg: GraphConfig) -> dict[str, Any]:
        """The writes that open an episode for ``state["question"]`` (see :meth:`begin`)."""
        q = state.get("question")
        if not isinstance(q, str) or not q.strip():
            raise ValueError("the graph input needs a non-empty 'question' string")
        meta = state.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise ValueError(f"the graph input's 'metadata' must be an object, got {type(meta).__name__}")
        prompt = render_prompt(q, cfg.prompt_template or "paper", self._stores)  # builders set it
        started = time.time()
        history = state.get("history") or []
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
            }
        )
        update: dict[str, Any] = {
            "history": records,
            "transcript": prompt,
            "segments": [("prompt", prompt)],
            "round": 0,
            "started_at": started,
            "policy_calls": 0,
            "search_rounds": 0,
            "subqueries": 0,
            "passages": 0,
            "errors": 0,
            "labels": [],
            "tokens_in": None,
            "tokens_out": None,
            "policy": getattr(self.policy, "name", type(self.policy).__name__),
        }
        if meta:
            update["metadata"] = {}  # consumed: a later question on the thread does not inherit it
        if state.get("transcript"):
            # the thread holds an earlier episode: its reducer channels start empty again
            update.update(
                answer=None,
                status=None,
                total_ms=None,
                last_action=None,
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
            stop=STOP_STRINGS,
            max_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            turn_index=st.get("policy_calls", 0),
            final=final,
            allow_split=cfg.split_subqueries,
            max_subqueries=cfg.max_subqueries,
            question=st.get("question", ""),
            metadata=meta,
            role=role,
        )

    # -- nodes ---------------------------------------------------------------------------
    async def begin(self, state: SearchState, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        """Open an episode: every run with input passes here once (START -> begin).

        A resumed run (``Command(resume=...)``, the RL environment) continues at the
        planner and does not. On a thread that already holds an episode, the episode's
        channels are reset (reducer channels with ``Overwrite``), so the state after
        this run is this run's; the earlier episode stays in ``history`` and in the
        thread's checkpoints.
        """
        return self._begin(state, _configured(self.cfg, config, runtime, self.pinned))

    async def planner(self, state: SearchState, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        t0 = time.perf_counter()
        cfg = _configured(self.cfg, config, runtime, self.pinned)
        st: dict[str, Any] = state  # type: ignore[assignment]
        if not st.get("transcript"):
            raise RuntimeError("the planner ran before an episode began (wire START -> begin -> planner)")
        update: dict[str, Any] = {}
        final = st["policy_calls"] >= cfg.max_turns
        res = await self.policy.agenerate(self._request(st, cfg, final))
        text = res.text if isinstance(res.text, str) else ""
        action = parse_action(text, max_subqueries=cfg.max_subqueries, split=cfg.split_subqueries)
        transcript = st["transcript"] + text
        segments = list(st["segments"]) + [("policy", text)]
        invalid = action.kind == "invalid" or (final and action.kind != "answer")
        if action.kind == "invalid" and not final:
            transcript += INVALID_FEEDBACK
            segments.append(("feedback", INVALID_FEEDBACK))
        ms = _ms(t0)
        turn = {
            "type": "turn",
            "index": st["policy_calls"],
            "final": final,
            "text": text,
            "action": action.kind if not (final and action.kind == "search") else "invalid",
            "subqueries": list(action.subqueries),
            "answer": action.answer,
            "reason": action.reason
            if action.kind == "invalid"
            else ("searching is disabled in the final turn" if invalid else None),
            "finish_reason": res.finish_reason,
            "ms": ms,
            "labels": list(res.labels),
        }
        update.update(
            transcript=transcript,
            segments=segments,
            policy_calls=st["policy_calls"] + 1,
            last_action={
                "kind": turn["action"],
                "subqueries": list(action.subqueries),
                "answer": action.answer,
                "final": final,
            },
            trajectory=[turn],
            node_ms={"planner": ms},
        )
        # unchanged values are not written again: every channel write costs LangGraph time
        labels = st.get("labels") or []
        if not set(res.labels) <= set(labels):
            update["labels"] = sorted(set(labels) | set(res.labels))
        if res.prompt_tokens is not None:
            update["tokens_in"] = _add(st.get("tokens_in"), res.prompt_tokens)
        if res.completion_tokens is not None:
            update["tokens_out"] = _add(st.get("tokens_out"), res.completion_tokens)
        if action.kind == "answer":
            update["answer"] = action.answer
        return update

    def route(self, state: SearchState) -> Any:
        act = state.get("last_action") or {}
        if act.get("kind") == "answer" or act.get("final"):
            return "answer"
        if act.get("kind") == "search":
            r = state.get("round", 0)
            return [
                Send("search", {"query": q, "index": i, "round": r}) for i, q in enumerate(act["subqueries"])
            ]
        return "planner"

    def _sem(self) -> asyncio.Semaphore | None:
        if not self.cfg.max_concurrency:
            return None
        loop = asyncio.get_running_loop()
        sem = self._sems.get(id(loop))
        if sem is None:
            sem = self._sems[id(loop)] = asyncio.Semaphore(self.cfg.max_concurrency)
        return sem

    async def search(self, task: SearchTask, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        t0 = time.perf_counter()
        top_k = _configured(self.cfg, config, runtime, self.pinned).top_k
        sem = self._sem()
        if sem is None:
            out = await self._one(task, top_k)
        else:
            async with sem:
                out = await self._one(task, top_k)
        out["ms"] = _ms(t0)
        # the join adds the round's searcher milliseconds to node_ms in its own single write
        return {"results": [out]}

    async def _one(self, task: SearchTask, top_k: int) -> dict[str, Any]:
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

    async def join(self, state: SearchState) -> dict[str, Any]:
        t0 = time.perf_counter()
        r = state.get("round", 0)
        rows = sorted((x for x in state.get("results", []) if x.get("round") == r), key=lambda x: x["index"])
        passages = [
            [Passage(**{k: v for k, v in p.items() if k != "source"}) for p in row["passages"]]
            for row in rows
        ]
        errors = [row.get("error") for row in rows]
        obs = format_observation(
            passages,
            errors,
            [row["query"] for row in rows],
            self.cfg.max_observation_words,
            self.cfg.observation_titles or "stripped",
        )
        n_err = sum(1 for e in errors if e)
        ms = _ms(t0)
        entry = {
            "type": "observation",
            "round": r,
            "text": obs,
            "results": [
                {
                    "query": row["query"],
                    "error": row.get("error"),
                    "ms": row.get("ms"),
                    "passages": [
                        {"title": p["title"], "score": p["score"], "id": p["id"], "store": p["store"]}
                        for p in row["passages"]
                    ],
                    **({"note": row["note"]} if row.get("note") else {}),
                }
                for row in rows
            ],
        }
        return {
            "transcript": state["transcript"] + obs,
            "segments": list(state.get("segments") or []) + [("observation", obs)],
            "round": r + 1,
            "search_rounds": state.get("search_rounds", 0) + 1,
            "subqueries": state.get("subqueries", 0) + len(rows),
            "passages": state.get("passages", 0) + sum(len(p) for p in passages),
            "errors": state.get("errors", 0) + n_err,
            "trajectory": [entry],
            "node_ms": {"search": sum(row.get("ms") or 0.0 for row in rows), "join": ms},
        }

    async def retrieve_once(
        self, state: SearchState, config: RunnableConfig, runtime: Runtime
    ) -> dict[str, Any]:
        """RAG baseline: search the question itself once, before the (answer-only) turn."""
        update = self._begin(state, _configured(self.cfg, config, runtime, self.pinned))
        task: SearchTask = {"query": state["question"].strip(), "index": 0, "round": 0}
        found = await self.search(task, config, runtime)
        merged = {**state, **update, "results": found["results"]}
        joined = await self.join(merged)  # type: ignore[arg-type]
        joined["results"] = found["results"]
        if isinstance(update.get("trajectory"), Overwrite):
            # a reset episode: this node's reducer writes replace the old values, not add to them
            for key in ("trajectory", "results", "node_ms"):
                joined[key] = Overwrite(joined[key])
        return {**update, **joined}

    async def answer(self, state: SearchState, config: RunnableConfig, runtime: Runtime) -> dict[str, Any]:
        t0 = time.perf_counter()
        cfg = _configured(self.cfg, config, runtime, self.pinned)
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
                    {
                        "type": "turn",
                        "role": "answer",
                        "index": state.get("policy_calls", 0),
                        "final": True,
                        "text": res.text,
                        "action": act.kind,
                        "subqueries": [],
                        "answer": act.answer,
                        "reason": act.reason,
                        "finish_reason": res.finish_reason,
                        "ms": _ms(t0),
                        "labels": list(res.labels),
                    }
                ],
                labels=sorted(set(state.get("labels") or []) | set(res.labels)),
                tokens_in=_add(state.get("tokens_in"), res.prompt_tokens),
                tokens_out=_add(state.get("tokens_out"), res.completion_tokens),
            )
        started = state.get("started_at") or time.time()
        status = "answered" if answer is not None else "unanswered"
        total_ms = round((time.time() - started) * 1000, 3)
        history = state.get("history") or [{"episode": 0}]
        calls = update.get("policy_calls", state.get("policy_calls", 0))
        update.update(
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
                    "search_rounds": state.get("search_rounds", 0),
                    "subqueries": state.get("subqueries", 0),
                    "total_ms": total_ms,
                }
            ],
        )
        return update
