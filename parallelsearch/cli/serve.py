"""``parallelsearch serve``: the LangServe app on 127.0.0.1 (settings give the defaults)."""

from __future__ import annotations

import argparse

from parallelsearch.cli.common import (
    add_bind_args,
    add_graph_args,
    add_policy_args,
    add_retrieval_args,
    add_typed_flags,
    bind_refused,
    bind_settings,
    settings_from_args,
    ssl_options,
)
from parallelsearch.cli.policy_check import check_policy
from parallelsearch.serving.checkpointers import CHECKPOINTERS

SERVER_KEY_SETTING = "PARALLELSEARCH_SERVER_API_KEY"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the parallel graph and baselines with LangServe")
    add_bind_args(p, port=8080, dest="api_key", setting=SERVER_KEY_SETTING)
    add_policy_args(p)
    add_retrieval_args(p)
    add_graph_args(p)
    p.add_argument(
        "--checkpointer",
        choices=CHECKPOINTERS,
        help="where threads live (requests with a thread_id; default: the settings', sqlite)",
    )
    p.add_argument(
        "--checkpoint-url",
        help="the SQLite file (default <home>/threads.sqlite) or postgresql://user:password@host:port/db",
    )
    add_typed_flags(
        p,
        int,
        {
            "--max-concurrency": "graph runs in flight before requests queue (default: the settings', 64)",
            "--queue-size": "requests that may wait beyond --max-concurrency; more get 429 "
            "(default: the settings', 512)",
        },
    )
    p.add_argument(
        "--multitask-strategy",
        choices=("enqueue", "reject"),
        help="a question on a thread that has a run in flight: enqueue = wait for it, reject = 409 "
        "(default: the settings', enqueue)",
    )
    p.add_argument(
        "--queue-timeout",
        type=float,
        help="seconds a request waits in the queue before a 429 with Retry-After (default: the settings', 60)",
    )
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from parallelsearch.stores.encoding.encoder_threads import let_idle_threads_sleep

    s = bind_settings(args, settings_from_args(args))
    if bind_refused(args, bool(s.server_api_key), SERVER_KEY_SETTING):
        return 2
    check_policy(s.policy_config())
    tls = ssl_options(s)
    print(f"OpenMP: {let_idle_threads_sleep()}")  # before torch loads (stores/encoding/encoder_threads.py)
    import uvicorn

    from parallelsearch.serving.server import create_app

    hosts = ", ".join(s.server_allowed_hosts or ["any"])
    print(f"serving on {'https' if tls else 'http'}://{args.host}:{args.port} (Host names: {hosts})")
    # keep-alive, read deadlines, head size and forwarded headers: ReadLimits (docs/scaling.md, "Serving")
    options = s.read_limits().uvicorn_options()
    uvicorn.run(create_app(s), host=args.host, port=args.port, log_level="info", **options, **tls)
    return 0
