"""``/health`` lists the routes the app's router holds, read at the request: a route added to the
app after it was built is listed with no list to edit, and the graph routes are the LangServe ones."""

from __future__ import annotations

import httpx
from conftest import UvicornThread

from parallelsearch.agents.policies.scripted import OraclePolicy
from parallelsearch.serving.server import ROUTES, create_app
from parallelsearch.settings import Settings
from parallelsearch.stores import Passage


class Films:
    """A searcher of made-up passages (the route listing, not retrieval, is tested)."""

    name = "films"

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        return [Passage(f"{query}-{i}", query.title(), f"passage {i}", 0.9, self.name) for i in range(k)]


def test_health_lists_the_routers_routes(tmp_path):
    app = create_app(
        Settings(home=tmp_path, server_checkpointer="memory"), policy=OraclePolicy(), searcher=Films()
    )

    async def extra() -> dict:
        return {}

    app.add_api_route("/added-later", extra, methods=["POST"])
    with UvicornThread(app) as srv:
        health = httpx.get(srv.url + "/health", timeout=30).json()
    assert health["routes"] == [f"/{r}" for r in ROUTES]
    endpoints = set(health["endpoints"])
    assert {"POST /added-later", "GET /health", "GET /stores", "POST /v1/chat/completions"} <= endpoints
    assert {f"POST /{r}/invoke" for r in ROUTES} <= endpoints
    assert not any(e.startswith("HEAD ") for e in endpoints)
