"""The question page (``GET /ui``) in a real headless browser: Debian's chromium driven by Playwright.

Nothing is downloaded: Playwright's driver ships in its wheel and is pointed at
``/usr/bin/chromium``. The app runs in-process on 127.0.0.1 with a scripted policy that
takes a moment per turn (DelayedPolicy, a stand-in for an LLM's generation time), so the
test can see the sub-queries and their passages on the page BEFORE the answer arrives,
i.e. streamed. Screenshots are written to build/artifacts/ (path printed).
"""

from __future__ import annotations

import tempfile
import time

import pytest
from conftest import UvicornThread, needs_data
from serving import ARTIFACT_FILES, ARTIFACTS, CHROMIUM, SCRIPT, chromium_missing, record

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.eval import DelayedPolicy
from parallelsearch.serving.server import create_app
from parallelsearch.settings import Settings

pytestmark = [
    needs_data,
    pytest.mark.serving,
    pytest.mark.slow,
    pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing())),
]
Q1 = "Were Scott Derrickson and Ed Wood of the same nationality?"
Q2 = "Which magazine was started first, Arthur's Magazine or First for Women?"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-quic",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
TURN_DELAY_S = 1.0


@pytest.fixture(scope="module")
def server(hotpot_store, tmp_path_factory):
    db = tmp_path_factory.mktemp("page") / "threads.sqlite"
    app = create_app(
        Settings(server_checkpointer="sqlite", server_checkpoint_url=str(db)),
        policy=DelayedPolicy(ScriptedPolicy(SCRIPT), TURN_DELAY_S),
        searcher=hotpot_store,
    )
    with UvicornThread(app) as srv:
        yield srv


@pytest.fixture()
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        t0 = time.perf_counter()
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=ARGS,
            viewport={"width": 1200, "height": 900},
        )  # fmt: skip
        pg = ctx.pages[0] if ctx.pages else ctx.new_page()
        record("chromium (Playwright, system browser): launch", time.perf_counter() - t0)
        pg.set_default_timeout(60_000)
        pg.problems = []
        pg.on("console", lambda m: m.type == "error" and pg.problems.append(m.text))
        pg.on("pageerror", lambda e: pg.problems.append(str(e)))
        pg.external = []
        pg.on("request", lambda r: "127.0.0.1" not in r.url and not r.url.startswith("data:")
              and pg.external.append(r.url))  # fmt: skip
        try:
            yield pg
        finally:
            ctx.close()


def test_the_page_streams_subqueries_passages_and_the_answer(server, page):
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    page.goto(server.url + "/ui", wait_until="load")
    page.wait_for_selector("body[data-ready='1']")
    record("browser: /ui loaded and /health read", time.perf_counter() - t0)
    assert page.locator("#route option").all_inner_texts() == ["parallelsearch", "sequential", "rag", "dag"]
    assert page.locator("#thread").input_value()  # the server keeps threads: the page made an id

    page.fill("#question", Q1)
    t0 = time.perf_counter()
    page.click("#ask")
    # the parallel sub-queries show up, and get their passages, while the answer is still being made
    page.wait_for_selector(".subquery.done >> nth=1")
    record(f"browser: click until both sub-queries show passages (policy turns take {TURN_DELAY_S:g} s)",
           time.perf_counter() - t0)  # fmt: skip
    cards = page.locator(".subquery")
    assert cards.count() == 2
    assert [c.split("\n")[0] for c in cards.all_inner_texts()] == ["Scott Derrickson", "Ed Wood"]
    assert page.locator("#answer").inner_text() == ""  # streamed: the answer has not arrived yet
    assert page.locator(".subquery >> nth=0").locator(".passage").count() == 3  # top_k 3
    assert "Scott Derrickson" in page.locator(".subquery >> nth=0 >> .passage .title").all_inner_texts()
    midway = ARTIFACTS / "ask_page_streaming.png"
    page.screenshot(path=str(midway), full_page=True)

    # (waits through locators: the page's content security policy forbids evaluating strings in it)
    expect(page.locator("#answer")).not_to_have_text("", timeout=60_000)
    record("browser: click until the answer shows", time.perf_counter() - t0)
    assert page.locator("#answer").inner_text() == "yes"
    assert page.locator(".turn").count() == 2
    assert "2 policy calls" in page.locator("#counts").inner_text()
    assert page.locator(".turn >> nth=0").locator(".tag.search").count() == 1
    page.wait_for_selector("#history-box:not(.hidden)")
    assert page.locator("#history li").all_inner_texts() == [f"{Q1} \u2192 yes"]

    # a second question on the same thread, with top_k set for this run: a fresh episode,
    # one passage per sub-query, and the thread lists both questions
    page.fill("#question", Q2)
    page.fill("#top_k", "1")
    page.click("#ask")
    expect(page.locator("#history li")).to_have_count(2, timeout=60_000)
    expect(page.locator("#answer")).not_to_have_text("", timeout=60_000)
    assert page.locator("#asked").inner_text() == Q2 and page.locator(".turn").count() == 2
    assert [c.locator(".passage").count() for c in page.locator(".subquery").all()] == [1, 1]
    done = ARTIFACTS / "ask_page.png"
    page.screenshot(path=str(done), full_page=True)
    ARTIFACT_FILES.extend([midway, done])
    print(f"\nscreenshots: {midway} {done}")

    assert page.problems == [], page.problems  # a content security policy violation is a console error
    assert page.external == [], page.external  # everything came from the server


def test_the_page_shows_a_refused_request(server, page):
    page.goto(server.url + "/ui", wait_until="load")
    page.wait_for_selector("body[data-ready='1']")
    page.fill("#question", "x" * 2001)  # over server_max_question_chars
    page.click("#ask")
    page.wait_for_selector("#status.error")
    assert (
        "413" in page.locator("#status").inner_text()
        and "exceeds the limit" in page.locator("#status").inner_text()
    )
