"""Dependent sub-queries in one turn: ``<search> a ## seat of #1 </search>`` runs in stages
inside one policy turn, through the real graph, a real Chroma store and the MiniLM encoder.

The searched queries are read from the store's own ``search_batch`` (one call = one encoder
call and one Chroma query), so the tests see exactly what each stage searched and how many
encoder calls it took."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import RAW, needs_data
from store_probes import counting_batches

from parallelsearch.agents.protocol import INVALID_FEEDBACK, format_passages, render_prompt
from parallelsearch.agents.protocol.templates import render_history
from parallelsearch.agents.resolvers import ParentResult, ResolverError

pytestmark = needs_data

FIRST = "Doctor Strange director"
SECOND = "#1 nationality"
TWO_STAGES = [
    f"<think>hop by hop</think>\n<search> {FIRST} ## {SECOND} </search>",
    "<answer> American </answer>",
]


def _graph(store, turns, **options):
    from parallelsearch.agents.policies import ScriptedPolicy
    from parallelsearch.graphs import build_parallel_search_graph

    return build_parallel_search_graph(ScriptedPolicy(turns), store, **options)


def _observations(out) -> list[dict]:
    return [t for t in out["trajectory"] if t["type"] == "observation"]


def _counts(out) -> tuple[int, int, int, int, int]:
    return (
        out["policy_calls"],
        out["search_rounds"],
        out["subqueries"],
        out["resolver_calls"],
        out["errors"],
    )


def test_two_stages_in_one_turn_search_the_resolved_text_with_one_encoder_call_each(
    hotpot_store, monkeypatch
):
    seen: list[list[ParentResult]] = []

    def director(sub_query: str, parents: list[ParentResult]) -> str:
        """The name the parent's top passage gives (the test knows it), put where #1 was."""
        seen.append(list(parents))
        top = parents[0].passages[0].text
        return sub_query.replace("#1", "Scott Derrickson") if "Scott Derrickson" in top else sub_query

    batches = counting_batches(hotpot_store, monkeypatch)
    out = asyncio.run(
        _graph(hotpot_store, TWO_STAGES, resolver=director).ainvoke({"question": "Doctor Strange?"})
    )
    assert out["answer"] == "American"
    # one policy turn searched both hops; the second call is the answer
    assert _counts(out) == (2, 2, 2, 1, 0) and out["passages"] == 6
    assert [t["action"] for t in out["trajectory"] if t["type"] == "turn"] == ["search", "answer"]
    # stage 1 searched the written sub-query; stage 2 the resolved one; one encoder call per stage
    assert batches == [[FIRST], ["Scott Derrickson nationality"]]
    (parent,) = seen[0]
    assert (parent.k, parent.searched, parent.written, parent.gold) == (1, FIRST, FIRST, None)
    assert len(parent.passages) == 3
    # ONE observation, sub-queries in order, the dependent one shown with what it was searched with
    (obs,) = _observations(out)
    assert obs["stages"] == 2 and [r["query"] for r in obs["results"]] == [
        FIRST,
        "Scott Derrickson nationality",
    ]
    first, second = hotpot_store.search(FIRST, 3), hotpot_store.search("Scott Derrickson nationality", 3)
    expected = (
        "\n\n<information>"
        + format_passages(first)
        + "Searched as: Scott Derrickson nationality\n"
        + format_passages(second).strip()
        + "</information>\n\n"
    )
    assert obs["text"] == expected
    assert out["transcript"] == render_prompt("Doctor Strange?") + TWO_STAGES[0] + expected + TWO_STAGES[1]
    assert {"resolve", "search", "join"} <= set(out["node_ms"])


def test_the_passage_resolver_is_the_default_and_takes_a_name_from_the_parents_top_passage(
    hotpot_store, monkeypatch
):
    from parallelsearch.agents.resolvers import PassageResolver, answer_candidates

    batches = counting_batches(hotpot_store, monkeypatch)
    encoded: list[list[str]] = []
    encode = hotpot_store.embedder.encode_queries

    def encode_queries(texts, *a, **kw):
        encoded.append(list(texts))
        return encode(texts, *a, **kw)

    monkeypatch.setattr(hotpot_store.embedder, "encode_queries", encode_queries)
    out = asyncio.run(_graph(hotpot_store, TWO_STAGES).ainvoke({"question": "Doctor Strange?"}))
    assert _counts(out) == (2, 2, 2, 1, 0)
    # the store's encoder: the three searched batches, and once the candidates' lead-ins (the nudge)
    assert len(encoded) == 4 and encoded[1][0] == "director"
    (obs,) = _observations(out)
    searched = obs["results"][1]["query"]
    batches = list(batches)  # what the graph searched (the checks below search too)
    parent = ParentResult(1, FIRST, tuple(hotpot_store.search(FIRST, 3)))
    names = [c for c, _ in answer_candidates(parent)]
    assert searched.endswith(" nationality") and searched.removesuffix(" nationality") in names
    # the graph's resolver is the shipped one on this store, lead-in nudge (the store's encoder) included
    assert searched == PassageResolver(hotpot_store)(SECOND, [parent])
    assert f"Searched as: {searched}\n" in obs["text"]
    # stage 1, the resolver's candidate searches (one coalesced batch), stage 2
    assert batches[0] == [FIRST] and batches[-1] == [searched] and len(batches) == 3
    assert searched in batches[1] and len(batches[1]) > 1


def test_a_search_without_references_is_the_plain_search_byte_for_byte(hotpot_store, monkeypatch):
    """No ``#k`` (and ``#`` that is no reference) is one round of one stage, as it always was."""
    body = "C# films ## Scott Derrickson nationality ## issue#12"
    turns = [f"<search> {body} </search>", "<answer> x </answer>"]
    batches = counting_batches(hotpot_store, monkeypatch)
    called: list[str] = []
    out = asyncio.run(
        _graph(hotpot_store, turns, resolver=lambda q, ps: called.append(q) or q).ainvoke({"question": "q?"})
    )
    subs = [s.strip() for s in body.split("##")]
    assert _counts(out) == (2, 1, 3, 0, 0) and called == [] and batches == [subs]
    (obs,) = _observations(out)
    assert "stages" not in obs and "Searched as" not in obs["text"]
    expected = (
        "\n\n<information>"
        + "".join(format_passages(hotpot_store.search(q, 3)) for q in subs).strip()
        + "</information>\n\n"
    )
    assert obs["text"] == expected
    assert out["transcript"] == render_prompt("q?") + turns[0] + expected + turns[1]
    turn = [t for t in out["trajectory"] if t["type"] == "turn"][0]
    assert "stages" not in turn


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("Doctor Strange director ## #3 nationality", "refers to #3, but there are 2 sub-queries"),
        ("#2 nationality ## Doctor Strange director", "refers to #2, a later sub-query"),
        ("Doctor Strange director ## #2 nationality", "refers to itself (#2)"),
        ("Doctor Strange director ## #1 spouse ## #2 birthplace", "make 3 stages in one search; at most 2"),
    ],
)
def test_a_bad_reference_is_an_invalid_action_with_the_feedback_and_costs_a_turn(
    hotpot_store, monkeypatch, body, why
):
    turns = [f"<search> {body} </search>", "<answer> x </answer>"]
    batches = counting_batches(hotpot_store, monkeypatch)
    out = asyncio.run(_graph(hotpot_store, turns, max_stages=2).ainvoke({"question": "q?"}))
    first = [t for t in out["trajectory"] if t["type"] == "turn"][0]
    assert (
        first["action"] == "invalid" and why in first["reason"] and first["reason"].startswith("invalid #k")
    )
    assert _counts(out) == (2, 0, 0, 0, 0) and batches == []
    assert out["transcript"] == render_prompt("q?") + turns[0] + INVALID_FEEDBACK + turns[1]


def test_max_stages_per_request_and_three_stages_when_allowed(hotpot_store, monkeypatch):
    body = "Doctor Strange director ## #1 nationality ## #2 capital"
    turns = [f"<search> {body} </search>", "<answer> x </answer>"]
    batches = counting_batches(hotpot_store, monkeypatch)
    graph = _graph(
        hotpot_store, turns, resolver=lambda q, ps: q.replace(f"#{ps[0].k}", f"[{ps[0].searched}]")
    )
    out = asyncio.run(graph.ainvoke({"question": "q?"}))
    assert _counts(out) == (2, 3, 3, 2, 0)
    assert batches == [
        ["Doctor Strange director"],
        ["[Doctor Strange director] nationality"],
        ["[[Doctor Strange director] nationality] capital"],
    ]
    # a request may allow fewer stages: the same plan is then invalid
    out = asyncio.run(graph.ainvoke({"question": "q?"}, context={"max_stages": 2}))
    assert out["search_rounds"] == 0 and "at most 2" in out["trajectory"][0]["reason"]
    with pytest.raises(ValueError, match="max_stages"):
        asyncio.run(graph.ainvoke({"question": "q?"}, config={"configurable": {"max_stages": 0}}))


def test_branching_references_resolve_from_both_parents(hotpot_store, monkeypatch):
    body = "Doctor Strange director ## Ed Wood film director ## #1 and #2 nationality"
    turns = [f"<search> {body} </search>", "<answer> x </answer>"]
    batches = counting_batches(hotpot_store, monkeypatch)

    async def both(sub_query: str, parents: list[ParentResult]) -> str:
        assert [p.k for p in parents] == [1, 2]
        return sub_query.replace("#1", "Scott Derrickson").replace("#2", "Ed Wood")

    out = asyncio.run(_graph(hotpot_store, turns, resolver=both).ainvoke({"question": "q?"}))
    assert _counts(out) == (2, 2, 3, 1, 0)
    assert (
        sorted(batches[0]) == sorted(["Doctor Strange director", "Ed Wood film director"])
        and len(batches) == 2
    )
    assert batches[1] == ["Scott Derrickson and Ed Wood nationality"]
    (obs,) = _observations(out)
    assert [r["query"] for r in obs["results"]] == [
        "Doctor Strange director",
        "Ed Wood film director",
        "Scott Derrickson and Ed Wood nationality",
    ]


def test_a_resolver_returning_nothing_or_not_text_is_a_clear_error(hotpot_store):
    with pytest.raises(ResolverError, match="empty text"):
        asyncio.run(_graph(hotpot_store, TWO_STAGES, resolver=lambda q, ps: "  ").ainvoke({"question": "q?"}))
    with pytest.raises(ResolverError, match="returned int"):
        asyncio.run(_graph(hotpot_store, TWO_STAGES, resolver=lambda q, ps: 3).ainvoke({"question": "q?"}))
    with pytest.raises(ValueError, match="resolver"):
        _graph(hotpot_store, TWO_STAGES, resolver="psychic")


def test_the_policy_resolver_asks_the_answer_model_and_its_calls_stay_out_of_the_transcript(hotpot_store):
    from parallelsearch.agents.policies import ScriptedPolicy

    extractor = ScriptedPolicy(["Scott Derrickson\nmore text"])
    graph = _graph(hotpot_store, TWO_STAGES, answer_policy=extractor, resolver="policy")
    out = asyncio.run(graph.ainvoke({"question": "q?"}))
    (obs,) = _observations(out)
    assert obs["results"][1]["query"] == "Scott Derrickson nationality"
    assert out["resolver_calls"] == 1 and "Answer only" not in out["transcript"]
    # the planner's search and answer turns, then the answer model's turn: the extraction is no turn
    assert out["policy_calls"] == 3


# ---- the gold resolver on a real MuSiQue question (its metadata.hops) -------------------------

MUSIQUE = RAW / "musique" / "AdelWang_MIGRES" / "musique.json"


@pytest.fixture(scope="module")
def musique_first(tmp_path_factory, embedder):
    """The first MuSiQue question (Van Hook Township -> Mountrail County -> Stanley) and a real
    store of its 20 context paragraphs."""
    from parallelsearch.data import load_questions
    from parallelsearch.stores import ChromaStore, ingest

    folder = tmp_path_factory.mktemp("musique1")
    line = MUSIQUE.read_text(encoding="utf-8").splitlines()[0]
    (folder / "q.jsonl").write_text(line + "\n", encoding="utf-8")
    store = ChromaStore("musique1", path=folder / "chroma", embedder=embedder)
    ingest(store, [folder / "q.jsonl"], progress=False)
    q = load_questions(folder / "q.jsonl")[0]
    return q, store


def test_the_gold_resolver_puts_in_the_hops_gold_answer(musique_first, monkeypatch):
    q, store = musique_first
    hops = q["metadata"]["hops"]
    first = hops[0]["question"].replace(" >> ", " ")
    turns = [f"<search> {first} ## #1 capital </search>", "<answer> Stanley </answer>"]
    batches = counting_batches(store, monkeypatch)
    graph = _graph(store, turns, resolver="gold")
    out = asyncio.run(graph.ainvoke({"question": q["question"], "metadata": q["metadata"]}))
    assert batches == [[first], [f"{hops[0]['answer']} capital"]] == [[first], ["Mountrail County capital"]]
    (obs,) = _observations(out)
    assert hops[1]["title"] in [p["title"] for p in obs["results"][1]["passages"]]
    assert _counts(out) == (2, 2, 2, 1, 0)
    # the same graph, the resolver named per request; without hops, the error names the fix
    out = asyncio.run(
        _graph(store, turns).ainvoke(
            {"question": q["question"], "metadata": q["metadata"]}, context={"resolver": "gold"}
        )
    )
    assert _observations(out)[0]["results"][1]["query"] == "Mountrail County capital"
    with pytest.raises(ResolverError, match="metadata.hops"):
        asyncio.run(graph.ainvoke({"question": q["question"]}))


# ---- the tools protocol: #k names the k-th call of the same message ---------------------------


def test_tool_calls_may_name_an_earlier_call_of_the_same_message(hotpot_store, monkeypatch):
    from parallelsearch import ScriptedToolChatModel, create_parallel_search_agent

    batches = counting_batches(hotpot_store, monkeypatch)
    model = ScriptedToolChatModel(turns=[[FIRST, SECOND], "American"])
    agent = create_parallel_search_agent(
        model, hotpot_store, resolver=lambda q, ps: q.replace("#1", "Scott Derrickson")
    )
    out = asyncio.run(agent.ainvoke({"question": "q?"}))
    assert out["protocol"] == "tools" and _counts(out) == (2, 2, 2, 1, 0)
    assert batches == [[FIRST], ["Scott Derrickson nationality"]]
    # the transcript's text form holds one response per call, in call order
    responses = out["transcript"].split("<tool_response>\n")[1:]
    assert len(responses) == 2 and responses[1].startswith(
        "Searched as: Scott Derrickson nationality\nDoc 1("
    )
    assert not responses[0].startswith("Searched as")


def test_a_bad_tool_call_reference_is_told_to_every_call_and_costs_a_turn(hotpot_store, monkeypatch):
    from parallelsearch import ScriptedToolChatModel, create_parallel_search_agent

    batches = counting_batches(hotpot_store, monkeypatch)
    model = ScriptedToolChatModel(turns=[[FIRST, "#3 nationality"], "x"])
    out = asyncio.run(create_parallel_search_agent(model, hotpot_store).ainvoke({"question": "q?"}))
    assert _counts(out) == (2, 0, 0, 0, 0) and batches == []
    notes = out["transcript"].split("<tool_response>\n")[1:]
    assert len(notes) == 2 and all("refers to #3, but there are 2 sub-queries" in n for n in notes)


# ---- the RL environment: the same graph, driven turn by turn ----------------------------------


def test_the_rl_environment_runs_both_stages_in_one_step(hotpot_store, monkeypatch):
    from parallelsearch.rl.env import EnvGraph

    batches = counting_batches(hotpot_store, monkeypatch)
    env = EnvGraph(hotpot_store).new_episode()

    async def episode():
        await env.reset("Doctor Strange?", {"golden_answers": ["American"]})
        step = await env.step(TWO_STAGES[0])
        done = await env.step(TWO_STAGES[1])
        return step, done

    step, done = asyncio.run(episode())
    assert not step.done and step.observation.startswith("\n\n<information>Doc 1(")
    assert step.observation.count("<information>") == 1 and "Searched as: " in step.observation
    assert done.done and done.output["search_rounds"] == 2 and done.output["resolver_calls"] == 1
    assert batches[0] == [FIRST] and len(batches) == 3


# ---- the CLI and the settings: --resolver, --max-stages, PARALLELSEARCH_GRAPH_CONFIG__RESOLVER ----------


def _ask(store: str, tmp_path, capsys, *flags: str) -> dict:
    from parallelsearch.cli import main

    script = tmp_path / "turns.json"
    script.write_text(json.dumps(["<search> Greyia ## #1 species </search>", "<answer> Greyia </answer>"]))
    meta = json.dumps({"hops": [{"question": "Greyia", "answer": "Greyia genus", "refs": []}]})
    args = [
        "ask",
        "Greyia?",
        "--store",
        store,
        "--policy",
        f"scripted:{script}",
        "--metadata",
        meta,
        "--json",
    ]
    assert main([*args, *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_ask_takes_the_resolver_and_max_stages_flags(sample_store, tmp_path, capsys):
    out = _ask(sample_store, tmp_path, capsys, "--resolver", "gold")
    (obs,) = _observations(out)
    assert [r["query"] for r in obs["results"]] == ["Greyia", "Greyia genus species"]
    assert (out["search_rounds"], out["resolver_calls"], out["policy_calls"]) == (2, 1, 2)
    out = _ask(sample_store, tmp_path, capsys, "--max-stages", "1")
    assert out["search_rounds"] == 0 and "at most 1" in out["trajectory"][0]["reason"]


def test_the_resolver_setting_comes_from_the_environment_and_the_flag_wins(
    sample_store, tmp_path, capsys, monkeypatch
):
    from parallelsearch.cli import main

    monkeypatch.setenv("PARALLELSEARCH_GRAPH_CONFIG__RESOLVER", "gold")
    out = _ask(sample_store, tmp_path, capsys)
    assert _observations(out)[0]["results"][1]["query"] == "Greyia genus species"
    out = _ask(sample_store, tmp_path, capsys, "--resolver", "passage")
    assert _observations(out)[0]["results"][1]["query"] != "Greyia genus species"
    with pytest.raises(SystemExit):
        main(["ask", "q?", "--resolver", "psychic"])
    monkeypatch.setenv("PARALLELSEARCH_GRAPH_CONFIG__RESOLVER", "psychic")
    assert main(["ask", "q?", "--store", sample_store]) == 2
    assert "resolver" in capsys.readouterr().err


class FailingFor:
    """A searcher of one made-up passage per query that fails for one query (a store that is down
    for it): the graph logic, not retrieval, is what these tests read."""

    name = "failing"

    def __init__(self, bad: str):
        self.bad = bad
        self.queries: list[str] = []

    async def asearch(self, query, k=3):
        from parallelsearch.stores import Passage

        self.queries.append(query)
        if query == self.bad:
            raise ConnectionError(f"store unreachable for {query!r}")
        return [Passage(query, query.title(), f"about {query} by Ann Lee", 1.0, self.name)]


def test_a_failed_parent_or_resolver_is_an_error_entry_and_the_episode_goes_on():
    turns = [
        "<search> a director ## #1 nationality ## b director ## #3 birthplace </search>",
        "<answer> x </answer>",
    ]
    searcher = FailingFor("a director")

    def resolve(sub_query: str, parents: list[ParentResult]) -> str:
        raise TimeoutError("the extraction model did not answer")

    out = asyncio.run(_graph(searcher, turns, resolver=resolve, search_retries=0).ainvoke({"question": "q?"}))
    assert out["answer"] == "x" and out["search_rounds"] == 2 and out["subqueries"] == 4
    # the failed parent's dependent is not resolved; the other dependent's resolver failed
    assert out["resolver_calls"] == 1 and out["errors"] == 3
    assert searcher.queries == ["a director", "b director"]
    (obs,) = _observations(out)
    assert [r["error"] is not None for r in obs["results"]] == [True, True, False, True]
    text = obs["text"]
    assert "Search failed for '#1 nationality': not searched: #1 ('a director') failed" in text
    assert "Search failed for '#3 birthplace': not searched: resolving its #k failed (TimeoutError" in text
    assert "Searched as" not in text


def test_the_rl_environment_refuses_the_policy_resolver_by_name(hotpot_store):
    """The trainer's policy writes turns; it cannot also be asked for each #k."""
    from parallelsearch.rl.env import EnvGraph

    env = EnvGraph(hotpot_store, resolver="policy").new_episode()

    async def episode():
        await env.reset("Doctor Strange?", {"golden_answers": ["American"]})
        await env.step(TWO_STAGES[0])

    with pytest.raises(ResolverError, match="use resolver 'passage'"):
        asyncio.run(episode())


def test_the_dag_oracle_plans_every_hop_in_one_turn_and_the_sequential_graph_hop_by_hop(musique_first):
    from parallelsearch.agents.policies.spec import policy_from_spec
    from parallelsearch.graphs import build_graph

    q, store = musique_first
    meta = {**q["metadata"], "golden_answers": q["golden_answers"]}
    oracle = policy_from_spec("oracle:dag")
    dag = asyncio.run(
        build_graph("parallel", oracle, store).ainvoke({"question": q["question"], "metadata": meta})
    )
    turn = [t for t in dag["trajectory"] if t["type"] == "turn"][0]
    assert turn["subqueries"] == [
        "Van Hook Township located in the administrative territorial entity",
        "#1 capital",
    ]
    assert (dag["policy_calls"], dag["search_rounds"], dag["resolver_calls"], dag["answer"]) == (
        2,
        2,
        1,
        q["golden_answers"][0],
    )
    seq = asyncio.run(
        build_graph("sequential", oracle, store).ainvoke({"question": q["question"], "metadata": meta})
    )
    assert (seq["policy_calls"], seq["search_rounds"], seq["resolver_calls"]) == (3, 2, 0)
    assert "#1" not in seq["transcript"].split("Question:")[1]
    with pytest.raises(ValueError, match="oracle:dag"):
        policy_from_spec("oracle:tree")


def test_the_dag_kind_is_the_parallel_graph_prompted_with_k_and_the_plain_oracle_plans_in_one_turn(
    musique_first,
):
    from parallelsearch.agents.policies import OraclePolicy
    from parallelsearch.agents.protocol import render_prompt
    from parallelsearch.graphs import GRAPH_KINDS, SEARCHING_KINDS, build_graph

    assert "dag" in GRAPH_KINDS and "dag" in SEARCHING_KINDS
    q, store = musique_first
    meta = {**q["metadata"], "golden_answers": q["golden_answers"]}
    run = {"question": q["question"], "metadata": meta}
    dag = asyncio.run(build_graph("dag", OraclePolicy(), store).ainvoke(run))
    assert dag["transcript"].startswith(render_prompt(q["question"], "dag"))
    assert (dag["policy_calls"], dag["search_rounds"], dag["subqueries"], dag["resolver_calls"]) == (
        2,
        2,
        2,
        1,
    )
    # the same oracle in the parallel graph: the paper's prompt, and no #k asked for, so hop by hop
    par = asyncio.run(build_graph("parallel", OraclePolicy(), store).ainvoke(run))
    assert par["transcript"].startswith(render_prompt(q["question"], "paper"))
    assert (par["policy_calls"], par["search_rounds"], par["resolver_calls"]) == (3, 2, 0)
    # a prompt given wins, as in every graph; the resolver is the configured one
    own = build_graph("dag", OraclePolicy(), store, prompt_template="official", resolver="gold")
    out = asyncio.run(own.ainvoke(run))
    assert out["transcript"].startswith(render_prompt(q["question"], "official"))
    assert _observations(out)[0]["results"][1]["query"] == f"{q['metadata']['hops'][0]['answer']} capital"
    # a thread's episode record carries the resolver calls beside the other counts
    from langgraph.checkpoint.memory import InMemorySaver

    threaded = build_graph("dag", OraclePolicy(), store, checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    asyncio.run(threaded.ainvoke(run, thread))
    (record,) = threaded.get_state(thread).values["history"]
    assert (record["policy_calls"], record["search_rounds"], record["resolver_calls"]) == (2, 2, 1)


def test_eval_compares_dag_with_parallel_and_sequential_with_resolver_delay_and_type_columns(
    musique_first, tmp_path, capsys, monkeypatch
):
    from parallelsearch.cli import main

    q, store = musique_first
    monkeypatch.setenv("PARALLELSEARCH_CHROMA_PATH", store.location)
    out = tmp_path / "run"
    rc = main(["eval", "--dataset", str(MUSIQUE), "--store", store.name, "--graphs", "dag,parallel,sequential",
               "--policy", "oracle", "--limit", "1", "--resolver", "gold", "--resolver-delay-ms", "50",
               "--no-plots", "--out", str(out)])  # fmt: skip
    assert rc == 0
    assert json.loads((out / "run.json").read_text())["resolver_delay_s"] == 0.05
    rows = {r["variant"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    counts = {
        v: (r["policy_calls"], r["search_rounds"], r["subqueries"], r["resolver_calls"])
        for v, r in rows.items()
    }
    assert counts == {"dag": (2, 2, 2, 1), "parallel": (3, 2, 2, 0), "sequential": (3, 2, 2, 0)}
    assert rows["dag"]["latency_ms"] >= 50  # the one resolver call slept its simulated 50 ms
    # the gold resolver searched what the oracle's hop-by-hop search did: every hop's paragraph alike
    assert rows["dag"]["hop_recall"] == rows["sequential"]["hop_recall"] is not None
    assert rows["dag"]["dependent_hop_recall"] is not None
    report = (out / "report.md").read_text()
    assert "## By question type" in report and "The dag graph relative to the sequential graph" in report
    assert "Each #k resolver call costs a simulated 50 ms." in report
    assert "| musique/2hop | dag | 1 | oracle | 2.000 | 2.000 | 2.000 | 1.000 |" in report


def test_sync_invoke_and_a_thread_run_the_stages_like_ainvoke(hotpot_store, monkeypatch):
    """The sync nodes meet on one background loop: still one encoder call per stage. On a
    checkpointed thread, a second question is a fresh episode with its own stages."""
    from langgraph.checkpoint.memory import InMemorySaver

    def director(sub_query: str, parents: list[ParentResult]) -> str:
        return sub_query.replace("#1", "Scott Derrickson")

    batches = counting_batches(hotpot_store, monkeypatch)
    graph = _graph(hotpot_store, TWO_STAGES, resolver=director, checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "dag"}}
    first = graph.invoke({"question": "Doctor Strange?"}, thread)
    assert batches == [[FIRST], ["Scott Derrickson nationality"]]
    second = graph.invoke({"question": "Again?"}, thread)
    assert batches[2:] == batches[:2]
    for out in (first, second):
        assert _counts(out) == (2, 2, 2, 1, 0) and len(_observations(out)) == 1
    earlier = [("user", "Doctor Strange?"), ("assistant", first["answer"])]  # the thread, as memory
    assert second["transcript"].startswith(render_history(render_prompt("Again?"), earlier))
    history = graph.get_state(thread).values["history"]
    assert [(h["question"], h["status"]) for h in history] == [
        ("Doctor Strange?", "answered"),
        ("Again?", "answered"),
    ]


def test_a_dag_rollout_writes_and_runs_k_within_the_turns_constrained_grammar(musique_first, tmp_path):
    """A rollout drives the graph's own turn request: a policy sees the dag graph's invitation to
    write #k, its max_stages and sampling settings, and its turns fit the grammar a constrained
    backend decodes that request under; the #k search then runs in two stages."""
    import json
    import re

    from parallelsearch.agents.policies import OraclePolicy
    from parallelsearch.agents.policies.base import request_regex
    from parallelsearch.rl import EnvGraph
    from parallelsearch.rl.rollout import rollout

    class GrammarChecked:
        """The oracle, each turn checked against the request's constrained-decoding grammar."""

        name = "oracle"

        def __init__(self) -> None:
            self.inner, self.requests = OraclePolicy(), []

        async def agenerate(self, request):
            self.requests.append(request)
            res = await self.inner.agenerate(request)
            assert re.fullmatch(request_regex(request, 600), res.text), res.text
            return res

    q, store = musique_first
    policy = GrammarChecked()
    env_graph = EnvGraph(store, graph="dag", top_k=2, max_stages=3, temperature=0.7, top_p=0.9)
    summary = asyncio.run(rollout([q], env_graph, policy, tmp_path / "ep.jsonl", progress=False))
    assert summary.failures == 0
    first = policy.requests[0]
    assert first.references and first.max_stages == 3 and (first.temperature, first.top_p) == (0.7, 0.9)
    (row,) = [json.loads(x) for x in (tmp_path / "ep.jsonl").read_text().splitlines()]
    assert "## #1 capital </search>" in row["turns"][0]["text"]  # the hops as one search with #k
    assert (row["policy_calls"], row["search_rounds"], row["subqueries"]) == (2, 2, 2)
