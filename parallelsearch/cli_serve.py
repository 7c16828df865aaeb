"""``parallelsearch serve``: the LangServe app on 127.0.0.1 (settings give the defaults)."""

from __future__ import annotations

import argparse

from parallelsearch.agents.policies import SPEC_HELP


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the parallel graph and baselines with LangServe")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: local only)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--policy", help=SPEC_HELP + " (default from settings: oracle)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--store", action="append", help="store name (repeat for multi-store routing)")
    src.add_argument("--retriever", help="URL of a Search-R1 /retrieve server")
    p.add_argument("--api-key", help="require this X-API-Key header (default: settings' server_api_key)")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from parallelsearch.server import create_app
    from parallelsearch.settings import get_settings

    s = get_settings()
    updates = {
        k: v for k, v in {"server_api_key": args.api_key, "retriever_url": args.retriever}.items() if v
    }
    if updates:
        s = s.model_copy(update=updates)
    app = create_app(s, policy=args.policy, stores=args.store)
    if args.host not in ("127.0.0.1", "localhost", "::1") and not s.server_api_key:
        print(
            f"warning: serving on {args.host} without an API key (set --api-key or PARALLELSEARCH_SERVER_API_KEY)"
        )
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0
