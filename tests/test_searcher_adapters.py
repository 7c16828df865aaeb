"""What LangGraph users already have, as searchers, through real graph runs: LangChain's
InMemoryVectorStore over the packaged MiniLM (``ParallelSearchEmbeddings``), real BaseRetriever subclasses, @tool functions,
plain and async functions, and the errors for what cannot be searched.

The corpus is the context paragraphs of the first shipped HotpotQA sample questions; the
oracle policy decomposes the first one ("Between Greyia and Calibanus...") into its two
supporting titles, searched in one round.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import warnings

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import create_retriever_tool, tool
from langchain_core.vectorstores import InMemoryVectorStore

from parallelsearch.agents.policies import OraclePolicy
from parallelsearch.agents.searchers import (
    ObjectSearcher,
    SearcherOutputError,
    as_searcher,
    to_passages,
)
from parallelsearch.data import load_questions
from parallelsearch.demo_data import HOTPOTQA_SAMPLE
from parallelsearch.graphs import build_parallel_search_graph, build_sequential_graph
from parallelsearch.stores import ParallelSearchEmbeddings, Passage
from parallelsearch.stores.ingestion.readers import read_passages

N_RECORDS = 4


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    lines = HOTPOTQA_SAMPLE.read_text(encoding="utf-8").splitlines()[:N_RECORDS]
    path = tmp_path_factory.mktemp("sample") / "hotpotqa_sample_4.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def question(sample):
    q = load_questions(sample)[0]
    assert q["metadata"]["supporting_titles"] == ["Greyia", "Calibanus"]
    return {"question": q["question"], "metadata": {**q["metadata"], "golden_answers": q["golden_answers"]}}


@pytest.fixture(scope="module")
def documents(sample):
    seen, docs = set(), []
    for p in read_passages([sample]):
        if p.id not in seen:
            seen.add(p.id)
            docs.append(Document(page_content=p.text, metadata={"title": p.title}, id=p.id))
    return docs


@pytest.fixture(scope="module")
def vectorstore(embedder, documents):
    vs = InMemoryVectorStore(embedding=ParallelSearchEmbeddings(embedder=embedder))
    vs.add_documents(documents)
    return vs


class KeywordRetriever(BaseRetriever):
    """A real BaseRetriever: documents ranked by words shared with the query, its own k."""

    docs: list[Document]
    k: int = 2

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        words = set(query.lower().split())
        ranked = sorted(
            self.docs,
            key=lambda d: -len(words & set((d.metadata["title"] + " " + d.page_content).lower().split())),
        )
        return ranked[: self.k]


class KeywordRetrieverTakingK(KeywordRetriever):
    """The same, but its search takes k per call (so the graph's top_k reaches it)."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        words = set(query.lower().split())
        ranked = sorted(
            self.docs,
            key=lambda d: -len(words & set((d.metadata["title"] + " " + d.page_content).lower().split())),
        )
        return ranked[: k or self.k]


def run(graph, inp):
    return asyncio.run(graph.ainvoke(inp))


def observation(out):
    return [s for s in out["trajectory"] if s["type"] == "observation"][0]["results"]


def titles(out):
    return [[p["title"] for p in r["passages"]] for r in observation(out)]


def assert_found_both(out, top_k):
    assert out["answer"] == "Greyia" and out["errors"] == 0, out["trajectory"]
    assert (out["policy_calls"], out["search_rounds"], out["subqueries"]) == (2, 1, 2)
    found = titles(out)
    assert [len(t) for t in found] == [top_k, top_k]
    assert found[0][0] == "Greyia" and found[1][0] == "Calibanus"


# -- LangChain classes --------------------------------------------------------------------------


def test_a_vectorstore_is_searched_with_the_graphs_top_k(vectorstore, question):
    out = run(build_parallel_search_graph(OraclePolicy(), vectorstore, top_k=3), question)
    assert_found_both(out, 3)
    assert {p["store"] for r in observation(out) for p in r["passages"]} == {"InMemoryVectorStore"}


def test_a_vectorstore_retriever_without_k_gets_top_k(vectorstore, question):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # k is passed: nothing to warn about
        out = run(build_parallel_search_graph(OraclePolicy(), vectorstore.as_retriever(), top_k=4), question)
    assert_found_both(out, 4)


def test_a_retrievers_own_k_is_respected_and_warned_about_once(vectorstore, question):
    retriever = vectorstore.as_retriever(search_kwargs={"k": 1})
    graph = build_parallel_search_graph(OraclePolicy(), retriever, top_k=4)
    with pytest.warns(UserWarning) as caught:
        out = run(graph, question)
        out2 = run(graph, question)  # a second episode: still one warning
    ours = [str(w.message) for w in caught if "VectorStoreRetriever" in str(w.message)]
    assert ours == [
        "retriever 'VectorStoreRetriever' keeps the k=1 it was given (the graph does not override it); "
        "with the graph's top_k=4 a search gives at most 1 passage"
    ]
    assert titles(out) == titles(out2) == [["Greyia"], ["Calibanus"]]
    assert retriever.search_kwargs == {"k": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its k equals top_k: nothing to say
        out = run(build_parallel_search_graph(OraclePolicy(), retriever, top_k=1), question)
    assert titles(out) == [["Greyia"], ["Calibanus"]]


def test_a_retriever_given_k_keeps_it_and_one_with_a_default_k_is_warned_about(documents, question):
    graph = build_parallel_search_graph(OraclePolicy(), KeywordRetriever(docs=documents, k=2), top_k=3)
    with pytest.warns(
        UserWarning, match=r"'KeywordRetriever' keeps the k=2 it was given.*top_k=3.*at most 2"
    ):
        out = run(graph, question)
    assert [len(t) for t in titles(out)] == [2, 2]
    assert titles(out)[0][0] == "Greyia" and titles(out)[1][0] == "Calibanus"
    graph = build_parallel_search_graph(OraclePolicy(), KeywordRetriever(docs=documents), top_k=3)
    with pytest.warns(UserWarning, match=r"takes no k per search and returns its own k=2 documents"):
        out = run(graph, question)
    assert [len(t) for t in titles(out)] == [2, 2]


def test_a_retriever_whose_search_takes_k_gets_top_k_unless_given_its_own(documents, question):
    taking_k = KeywordRetrieverTakingK(docs=documents)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = run(build_parallel_search_graph(OraclePolicy(), taking_k, top_k=3), question)
    assert_found_both(out, 3)
    given = KeywordRetrieverTakingK(docs=documents, k=1)
    with pytest.warns(UserWarning, match="keeps the k=1 it was given"):
        out = run(build_parallel_search_graph(OraclePolicy(), given, top_k=3), question)
    assert titles(out) == [["Greyia"], ["Calibanus"]]


def test_a_tool_returning_dicts_and_one_returning_text(vectorstore, question):
    @tool
    def wiki_search(query: str, k: int) -> list[dict]:
        """Search the wiki sample."""
        return [
            {"title": d.metadata["title"], "text": d.page_content}
            for d in vectorstore.similarity_search(query, k=k)
        ]

    out = run(build_parallel_search_graph(OraclePolicy(), wiki_search, top_k=2), question)
    assert_found_both(out, 2)
    assert {p["store"] for r in observation(out) for p in r["passages"]} == {"wiki_search"}

    @tool
    def summary(query: str) -> str:
        """One text answer per query."""
        return f'"{query}"\nA summary about {query}.'

    out = run(build_parallel_search_graph(OraclePolicy(), summary, top_k=2), question)
    assert titles(out) == [["Greyia"], ["Calibanus"]]
    assert "Doc 1(Title: Greyia) A summary about Greyia." in out["transcript"]


def test_a_retriever_tool_with_artifacts_gives_its_documents(vectorstore, question):
    rtool = create_retriever_tool(
        vectorstore.as_retriever(search_kwargs={"k": 3}),
        "sample_search",
        "Search the sample",
        response_format="content_and_artifact",
    )
    out = run(build_parallel_search_graph(OraclePolicy(), rtool, top_k=3), question)
    assert_found_both(out, 3)


def test_a_tool_with_two_text_arguments_is_refused_at_build_time():
    @tool
    def two(query: str, region: str) -> str:
        """Two arguments."""
        return query

    with pytest.raises(TypeError, match=r"tool 'two' takes arguments \['query', 'region'\]"):
        build_parallel_search_graph(OraclePolicy(), two)


# -- functions ------------------------------------------------------------------------------------


def test_sync_and_async_functions_of_every_result_kind(vectorstore, question):
    def docs(query, k):
        return vectorstore.similarity_search(query, k=k)

    def search_r1_strings(query):  # no k: cut to top_k by the adapter
        return [
            f'"{d.metadata["title"]}"\n{d.page_content}' for d in vectorstore.similarity_search(query, k=5)
        ]

    def contents_dicts(query, k):
        return [
            {"contents": f'"{d.metadata["title"]}"\n{d.page_content}', "score": 0.5}
            for d in vectorstore.similarity_search(query, k=k)
        ]

    async def async_passages(query: str, k: int = 3) -> list[Passage]:
        found = await vectorstore.asimilarity_search(query, k=k)
        return [Passage.make(d.metadata["title"], d.page_content) for d in found]

    def keyword_k(query, *, k=10):
        return [{"page_content": d.page_content, "title": d.metadata["title"]} for d in docs(query, k)]

    for fn in (docs, search_r1_strings, contents_dicts, async_passages, keyword_k):
        out = run(build_parallel_search_graph(OraclePolicy(), fn, top_k=3), question)
        assert_found_both(out, 3)
        assert {p["store"] for r in observation(out) for p in r["passages"]} == {fn.__name__}


def test_a_sync_function_runs_off_the_event_loop(vectorstore, question):
    loop_threads, fn_threads = set(), set()

    def search(query, k):
        fn_threads.add(threading.get_ident())
        return vectorstore.similarity_search(query, k=k)

    class Spy:
        async def __call__(self, query, k):
            loop_threads.add(threading.get_ident())
            return await as_searcher(search).asearch(query, k)

    out = run(build_parallel_search_graph(OraclePolicy(), Spy(), top_k=2), question)
    assert_found_both(out, 2)
    assert loop_threads and fn_threads and not loop_threads & fn_threads


def test_an_object_with_async_asearch_returning_dicts_is_normalised(question):
    class Wiki:
        name = "wiki"

        async def asearch(self, query, k=3):
            return [{"title": query, "text": f"about {query}", "id": f"id-{query}"}]

    searcher = as_searcher(Wiki())
    assert isinstance(searcher, ObjectSearcher) and searcher.store_names() == ["wiki"]
    out = run(build_sequential_graph(OraclePolicy(), Wiki()), question)
    assert out["errors"] == 0 and out["answer"] == "Greyia"
    assert [r["passages"][0]["id"] for r in observation(out)] == ["id-Greyia"]


def test_a_mapping_of_a_function_and_a_vectorstore_routes(vectorstore, question):
    def notes(query):
        return [{"title": "note", "text": f"a note on {query}"}]

    out = run(
        build_sequential_graph(OraclePolicy(), {"notes": notes, "wiki": vectorstore}, top_k=2),
        question,
    )
    assert out["errors"] == 0
    stores = {p["store"] for r in observation(out) for p in r["passages"]}
    assert stores <= {"notes", "wiki"} and "notes" in stores
    assert "Available knowledge stores: notes, wiki" in out["transcript"]


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result,needle",
    [
        ([{"name": "Greyia"}], "searcher 'bad' returned item 0 {'name': 'Greyia'} (dict); accepted: str"),
        (["fine", 42], "searcher 'bad' returned item 1 42 (int)"),
        (None, "searcher 'bad' returned NoneType None"),
    ],
)
def test_a_bad_result_is_one_error_entry_per_subquery_naming_searcher_and_item(result, needle, question):
    calls = []

    def bad(query):
        calls.append(query)
        return result

    out = run(build_parallel_search_graph(OraclePolicy(), bad, search_retries=2), question)
    assert out["errors"] == 2 and out["answer"] == "Greyia"  # the episode goes on
    errors = [r["error"] for r in observation(out)]
    assert all(e.startswith("SearcherOutputError: ") and needle in e for e in errors), errors
    assert sorted(calls) == ["Calibanus", "Greyia"]  # reported at the first call: no retries
    assert "AttributeError" not in json.dumps(out["trajectory"])


def test_unusable_searchers_are_refused_at_build_time():
    class SyncAsearch:
        def asearch(self, query, k=3):
            return []

    with pytest.raises(TypeError, match=r"SyncAsearch.asearch is not async"):
        build_parallel_search_graph(OraclePolicy(), SyncAsearch())
    for obj, shown in ((42, "int 42"), (object(), "object <object object"), (Passage, "type <class")):
        with pytest.raises(TypeError, match=f"cannot use {shown}.*accepted: a store name, a /retrieve URL"):
            build_parallel_search_graph(OraclePolicy(), obj)

    def three(query, k, region):
        return []

    with pytest.raises(
        TypeError, match=r"'three' takes \(query, k, region\) and needs region: .*a parameter named k, top_k"
    ):
        as_searcher(three)
    with pytest.raises(TypeError, match="takes no positional argument"):
        as_searcher(lambda: [])


def test_a_store_name_is_opened_by_the_app_layer_and_a_missing_one_lists_the_stores(embedder, sample):
    import parallelsearch
    from parallelsearch.stores import ingest

    with pytest.raises(
        TypeError, match=r"needs to know where stores live.*parallelsearch.open_store\('x-y-z'\)"
    ):
        as_searcher("x-y-z")  # this layer does not import the app's settings
    with pytest.raises(LookupError, match="no store named 'hotpot-sample' at .*there is no store there yet"):
        as_searcher("hotpot-sample", open_store=parallelsearch.open_store)
    store = parallelsearch.open_store("hotpot-sample", create=True)
    ingest(store, [sample], progress=False)
    with pytest.raises(LookupError, match=r"did you mean 'hotpot-sample'\?\); stores there: hotpot-sample"):
        as_searcher("hotpot-sampel", open_store=parallelsearch.open_store)
    searcher = as_searcher({"hp": "hotpot-sample"}, open_store=parallelsearch.open_store)
    assert asyncio.run(searcher.asearch("hp: Greyia", 2))[0].title == "Greyia"


# -- the normaliser --------------------------------------------------------------------------------


def test_the_normaliser_reads_each_accepted_form():
    got = to_passages(
        [
            "plain text",
            '"Title A"\ntext a',
            {"title": "B", "content": "text b", "score": 2},
            {"snippet": "text c", "metadata": {"title": "C", "id": "c1"}},
            {"contents": "Unquoted D\ntext d"},
            Document(page_content="text e", metadata={"title": "E", "score": 0.25}, id="e1"),
            Passage("p1", "F", "text f", 0.9, "elsewhere"),
        ],
        "mine",
    )
    assert [(p.title, p.text, p.store) for p in got] == [
        ("plain text", "", "mine"),
        ("Title A", "text a", "mine"),
        ("B", "text b", "mine"),
        ("C", "text c", "mine"),
        ("Unquoted D", "text d", "mine"),
        ("E", "text e", "mine"),
        ("F", "text f", "elsewhere"),
    ]
    assert [p.score for p in got] == [None, None, 2.0, None, None, 0.25, 0.9]
    assert got[3].id == "c1" and got[5].id == "e1" and len(got[0].id) == 16
    assert len(to_passages(iter(["a", "b", "c"]), "mine", k=2)) == 2
    with pytest.raises(SearcherOutputError, match=r"item 0 \{'title': 'x'\}"):
        to_passages([{"title": "x"}], "mine")


def test_an_lcel_chain_and_a_runnable_lambda(vectorstore, question):
    from langchain_core.runnables import RunnableLambda

    chain = vectorstore.as_retriever(search_kwargs={"k": 2}) | RunnableLambda(lambda docs: docs[:1])
    out = run(build_parallel_search_graph(OraclePolicy(), chain, top_k=3), question)
    assert titles(out) == [["Greyia"], ["Calibanus"]] and out["errors"] == 0
    text = RunnableLambda(lambda q: f'"{q}"\nNotes on {q}.', name="notes")
    out = run(build_parallel_search_graph(OraclePolicy(), text), question)
    assert titles(out) == [["Greyia"], ["Calibanus"]]
    assert {p["store"] for r in observation(out) for p in r["passages"]} == {"notes"}


def test_a_chat_model_is_not_taken_for_a_searcher():
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    model = GenericFakeChatModel(messages=iter([AIMessage(content="x")]))
    with pytest.raises(TypeError, match="cannot use the language model GenericFakeChatModel as a searcher"):
        as_searcher(model)


def test_which_functions_get_k():
    seen = {}

    def query_only(query, filters=None):  # an optional second argument that is not k keeps its default
        seen["query_only"] = filters
        return ["a", "b", "c", "d"]

    def named_top_k(query, top_k=10):
        seen["named_top_k"] = top_k
        return ["a"] * top_k

    def keyword_limit(query, *, limit=10):
        seen["keyword_limit"] = limit
        return ["a"] * limit

    def star_args(*args, **kwargs):  # no parameter named like k: the query only
        seen["star_args"] = (args, kwargs)
        return ["a"]

    def positional_n(query, n, /):
        seen["positional_n"] = n
        return ["a"] * n

    def filter_then_k(query, filter="all", k=10):
        seen["filter_then_k"] = (filter, k)
        return ["a"] * k

    for fn in (query_only, named_top_k, keyword_limit, star_args, positional_n, filter_then_k):
        got = asyncio.run(as_searcher(fn).asearch("q", 2))
        assert len(got) <= 2
    assert seen == {
        "query_only": None,
        "named_top_k": 2,
        "keyword_limit": 2,
        "star_args": (("q",), {}),
        "positional_n": 2,
        "filter_then_k": ("all", 2),
    }


def test_a_required_argument_not_named_like_k_is_refused_at_build_time():
    def search(query: str, filter: str) -> list[str]:
        raise AssertionError(f"called with filter={filter!r}")

    def keyword_only(query: str, *, index: str) -> list[str]:
        raise AssertionError("called")

    with pytest.raises(
        TypeError,
        match=r"'search' takes \(query, filter\) and needs filter: .*give filter a default or bind it",
    ):
        build_parallel_search_graph(OraclePolicy(), search)
    with pytest.raises(TypeError, match=r"'keyword_only' takes \(query, index\) and needs index"):
        as_searcher(keyword_only)
    bound = as_searcher(functools.partial(search, filter="wiki"))  # bound: the query only
    with pytest.raises(AssertionError, match="called with filter='wiki'"):
        asyncio.run(bound.asearch("q", 3))


def test_strings_are_search_r1_corpus_entries_their_first_line_the_title(question):
    def wiki(query: str) -> list[str]:
        return [f"{query}\n{query} is a genus of plants.", f'"{query} (disambiguation)"\nOther uses.', query]

    out = run(build_parallel_search_graph(OraclePolicy(), wiki, top_k=3), question)
    assert out["errors"] == 0 and "Title: )" not in out["transcript"]
    assert titles(out) == [
        ["Greyia", "Greyia (disambiguation)", "Greyia"],
        ["Calibanus", "Calibanus (disambiguation)", "Calibanus"],
    ]
    assert (
        "Doc 1(Title: Greyia) Greyia is a genus of plants.\nDoc 2(Title: Greyia (disambiguation)) Other uses.\nDoc 3(Title: Greyia) \n"
        in out["transcript"]
    )
    official = run(
        build_parallel_search_graph(OraclePolicy(), wiki, top_k=3, prompt_template="official"), question
    )
    assert (
        'Doc 1(Title: Greyia) Greyia is a genus of plants.\nDoc 2(Title: "Greyia (disambiguation)") Other uses.'
        in official["transcript"]
    )
