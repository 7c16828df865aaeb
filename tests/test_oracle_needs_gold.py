"""The oracle without gold annotations fails fast with one line saying what it needs, on the
command line and on the server; the page offers the shipped sample's annotated questions."""

from __future__ import annotations

import httpx
from conftest import UvicornThread, needs_data

from parallelsearch.cli import main
from parallelsearch.settings import Settings


def test_ask_with_the_oracle_and_no_metadata_is_one_line_naming_the_fix(capsys):
    # a retriever URL that is never reached: the oracle refuses before anything is searched
    code = main(
        ["ask", "Who is older, Ed Wood or Scott Derrickson?", "--retriever", "http://127.0.0.1:9/retrieve"]
    )
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1, err
    assert "the oracle policy plans and answers from a question's dataset annotations" in err
    assert "--metadata" in err and "--policy openai:" in err and "Traceback" not in err


@needs_data
def test_served_oracle_refuses_a_bare_question_and_answers_the_page_examples(hotpot_store):
    from parallelsearch.serving.server import create_app

    app = create_app(Settings(), searcher=hotpot_store)  # the default policy: the oracle
    with UvicornThread(app) as srv:
        bare = httpx.post(srv.url + "/parallelsearch/invoke", json={"input": {"question": "q?"}}, timeout=60)
        assert bare.status_code == 422 and "runs the oracle policy" in bare.json()["detail"], bare.text
        examples = httpx.get(srv.url + "/ui/examples", timeout=30).json()
        assert {e["metadata"]["split"] for e in examples} == {"parallel", "sequential"}
        assert all(e["metadata"]["golden_answers"] and "source" not in e["metadata"] for e in examples)
        out = httpx.post(srv.url + "/parallelsearch/invoke", json={"input": examples[0]}, timeout=120)
        assert out.status_code == 200, out.text
        assert out.json()["output"]["status"] == "answered"
        assert out.json()["output"]["answer"] == examples[0]["metadata"]["golden_answers"][0]
