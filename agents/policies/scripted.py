"""Scripted and oracle policies: honest stand-ins for an LLM, for tests, demos and env checks."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from parallelsearch.agents.policies.base import TurnRequest, TurnResult
from parallelsearch.agents.protocol import truncate_at_stop
from parallelsearch.stores.errors import ParallelSearchError, json_of


class ScriptedPolicy:
    """Replays given turns in every episode (turn i = script[i], cut at the first stop string);
    past the end it repeats the last, so a script that never answers exercises ``max_turns``."""

    name = "scripted"

    def __init__(self, turns: Sequence[str]):
        if not turns or not all(isinstance(t, str) for t in turns):
            raise ValueError("a scripted policy needs a non-empty list of turn texts")
        self.turns = list(turns)

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedPolicy:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError as e:
            raise FileNotFoundError(f"scripted policy file {path} does not exist") from e
        data = json_of(text, f"scripted policy file {path}", list)
        if not data or not all(isinstance(t, str) for t in data):
            raise ValueError(f"scripted policy file {path} must hold a non-empty JSON array of turn strings")
        return cls(data)

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        text = truncate_at_stop(self.turns[min(request.turn_index, len(self.turns) - 1)], request.stop)
        return TurnResult(
            text=text, finish_reason="stop", completion_tokens=len(text.split()), labels=("scripted",)
        )


def _evidence_queries(evidences: list) -> list[str]:
    pairs = (f"{ev[0]} {ev[1]}" for ev in evidences if isinstance(ev, list | tuple) and len(ev) >= 2)
    return list(dict.fromkeys(pairs))


def _musique_queries(decomp: list[dict]) -> list[str]:
    out: list[str] = []
    answers: list[str] = []
    for d in decomp:
        q = d.get("question", "")
        q = re.sub(
            r"#(\d+)",
            lambda m: answers[int(m.group(1)) - 1] if int(m.group(1)) <= len(answers) else m.group(0),
            q,
        )
        out.append(q.replace(" >> ", " "))
        answers.append(d.get("answer", ""))
    return out


class OracleNeedsGoldError(ParallelSearchError, ValueError):
    """The oracle was given a question without the dataset annotations it plans and answers from."""


ORACLE_NEEDS_GOLD = (
    "the oracle policy plans and answers from a question's dataset annotations, and this question has "
    'no golden_answers: pass them (--metadata \'{"golden_answers": ["..."], "supporting_titles": '
    '["..."]}\'), ask a question from a dataset file (parallelsearch eval FILE), or plug in a real model '
    "(--policy openai:MODEL@http://HOST:PORT/v1 or --policy chat:PROVIDER:MODEL)"
)


class OraclePolicy:
    """Decomposes with the dataset's own annotations and answers with the gold answer: for demos
    and environment checks only (it measures the graph and the retrieval, never a model). With
    ``dag`` (``oracle:dag``), or in a graph that welcomes references, ``metadata.hops`` is one search."""

    name = "oracle"
    dag = False  # a class default too: a subclass with its own __init__ plans as the plain oracle

    def __init__(self, dag: bool = False) -> None:
        self.dag = dag
        if dag:
            self.name = "oracle:dag"

    @staticmethod
    def dag_plan(metadata: dict, max_subqueries: int = 8) -> list[str] | None:
        """The hops of ``metadata.hops`` as ONE search (an earlier hop named by its ``#k``); None
        when there is nothing to plan in one turn, and the oracle searches hop by hop."""
        hops = metadata.get("hops")
        if not isinstance(hops, list) or not 2 <= len(hops) <= max_subqueries:
            return None
        subs = [" ".join(str((h or {}).get("question", "")).replace(">>", " ").split()) for h in hops]
        if not all(subs) or len(set(subs)) != len(subs):
            return None
        return subs

    @staticmethod
    def plan(question: str, metadata: dict) -> list[str]:
        """The sub-queries; a question without gold answers is refused (it would search the
        whole question and then answer nothing, turn after turn)."""
        if not metadata.get("golden_answers"):
            raise OracleNeedsGoldError(ORACLE_NEEDS_GOLD)
        if metadata.get("question_decomposition"):
            return _musique_queries(metadata["question_decomposition"])
        split = metadata.get("split")
        if metadata.get("evidences") and split != "parallel":
            return _evidence_queries(metadata["evidences"])
        titles = metadata.get("supporting_titles") or []
        return list(dict.fromkeys(titles)) or [question]

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        meta = request.metadata or {}
        gold = (meta.get("golden_answers") or [""])[0]
        plan = self.plan(request.question, meta)
        planned = (self.dag or request.references) and request.allow_split
        dag = self.dag_plan(meta, request.max_subqueries) if planned else None
        together = request.allow_split and meta.get("split") == "parallel"
        rounds = [dag] if dag else [plan] if together else [[q] for q in plan]
        i = request.turn_index
        if request.final or i >= len(rounds):
            text = f"<think>oracle: answering with the gold answer</think>\n<answer> {gold} </answer>"
        else:
            text = f"<think>oracle: searching {len(rounds[i])} sub-quer{'y' if len(rounds[i]) == 1 else 'ies'}</think>\n"
            text += "<search> " + " ## ".join(rounds[i]) + " </search>"
        return TurnResult(
            text=text, finish_reason="stop", completion_tokens=len(text.split()), labels=("oracle",)
        )
