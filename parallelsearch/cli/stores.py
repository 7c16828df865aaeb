"""CLI for the stores layer: prepare-data, index, stores, search, serve-retriever."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parallelsearch.cli.common import (
    add_bind_args,
    add_chroma_args,
    add_hnsw_args,
    add_lock_args,
    add_model_arg,
    add_shard_args,
    add_typed_flags,
    bind_refused,
    bind_settings,
    clean_text_arg,
    hnsw_from_args,
    settings_from_args,
    ssl_options,
    to_stderr,
)
from parallelsearch.cli.index import add_index_scale_args, cmd_index_vectors, index_embedder_for, index_pool
from parallelsearch.stores.errors import StoreNotFoundError
from parallelsearch.stores.isolated_read import DEFAULT_READ_TIMEOUT_S
from parallelsearch.stores.store_files import read_only_message

if TYPE_CHECKING:
    from parallelsearch.stores.store_check import StoreCheck

RETRIEVER_KEY_SETTING = "PARALLELSEARCH_RETRIEVER_API_KEY"


def register(sub: argparse._SubParsersAction) -> None:
    """The stores-layer commands, one function each; those that open a store share model and Chroma flags."""
    _add_prepare_data_command(sub)
    _add_index_command(sub)
    _add_stores_command(sub)
    _add_search_command(sub)
    _add_serve_retriever_command(sub)
    for name in ("index", "stores", "search", "serve-retriever"):  # the commands that open stores
        add_model_arg(sub.choices[name])
        add_chroma_args(sub.choices[name])


def _add_prepare_data_command(sub: argparse._SubParsersAction) -> None:
    """``prepare-data``: benchmark files into question files and a corpus, the inputs of index and eval."""
    p = sub.add_parser("prepare-data", help="benchmark files -> FlashRAG question files + corpus jsonl")
    p.add_argument(
        "src", nargs="+", help="benchmark files (HotpotQA, 2Wiki, MuSiQue, Bamboogle, MultiHop-RAG, NQ, ...)"
    )
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--dataset", help="dataset name when the path does not say it")
    p.add_argument(
        "--skip-bad", action="store_true", help="skip bad records and report them instead of stopping"
    )
    p.set_defaults(func=cmd_prepare)


def _add_index_command(sub: argparse._SubParsersAction) -> None:
    """``index``: files into a named store, with the verify, lock and scale flags big stores need."""
    p = sub.add_parser("index", help="index corpus or benchmark files into a named store")
    p.set_defaults(func=cmd_index)
    p.add_argument("files", nargs="*", help="files, or folders (their .json/.jsonl files)")
    p.add_argument("--store", required=True, help="store name")
    p.add_argument("--batch-size", type=int, help="passages per encoder forward pass (default 32)")
    p.add_argument(
        "--skip-bad", action="store_true", help="skip bad lines and report them instead of stopping"
    )
    p.add_argument(
        "--chunk-size",
        type=int,
        help="passages read, encoded and committed together (default 1024; with --vectors 5000)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--verify",
        action="store_true",
        help="first read every vector of the store back; when some are missing or unreadable (a store "
        "corrupted by concurrent writers), report them, add nothing and exit 1 (index FILES into a new "
        "store instead); without FILES: only check",
    )
    add_read_timeout_arg(p)
    add_lock_args(p)
    add_index_scale_args(p)
    add_hnsw_args(p)


def _add_stores_command(sub: argparse._SubParsersAction) -> None:
    """``stores``: list the stores, check one for lost vectors, or record a new ``ef_search``."""
    p = sub.add_parser("stores", help="list stores: name, count, model, HNSW parameters, location")
    p.set_defaults(func=cmd_stores)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--check",
        metavar="NAME",
        help="read every vector of store NAME back and report missing or unreadable ones (exit 1 if any)",
    )
    add_read_timeout_arg(p)
    p.add_argument("--store", help="with --set-ef-search: the store to change")
    p.add_argument(
        "--set-ef-search",
        type=int,
        help="record a new HNSW ef_search for --store (processes that open it afterwards use it)",
    )


def _add_search_command(sub: argparse._SubParsersAction) -> None:
    """``search``: one query against a store, to see what the agents would retrieve."""
    p = sub.add_parser("search", help="search a store")
    p.set_defaults(func=cmd_search)
    p.add_argument("query")
    p.add_argument("--store", required=True, help="store name, or NAME=SHARD,SHARD,... (a sharded store)")
    add_shard_args(p)
    p.add_argument("-k", type=int, default=3)
    p.add_argument("--json", action="store_true")


def _add_serve_retriever_command(sub: argparse._SubParsersAction) -> None:
    """``serve-retriever``: a store behind Search-R1's ``/retrieve`` protocol, for trainers to search."""
    p = sub.add_parser("serve-retriever", help="serve a store over Search-R1's /retrieve protocol")
    p.set_defaults(func=cmd_serve_retriever)
    p.add_argument(
        "--store",
        required=True,
        help="store name (a sharded one the settings declare, too), or NAME=SHARD,SHARD,...",
    )
    add_shard_args(p)
    add_bind_args(p, port=8000, dest="retriever_api_key", setting=RETRIEVER_KEY_SETTING)
    p.add_argument("--topk", type=int, default=3, help="default top-k when a request omits it")
    add_typed_flags(
        p,
        int,
        {
            "--max-batch": "most queries of concurrent requests searched in one encoder call (default 64; "
            "0 = each request on its own)",
            "--concurrent-batches": "batches searched at once (default: one per encoder thread, plus one "
            "with an ONNX encoder)",
        },
    )


def add_read_timeout_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--read-timeout",
        type=float,
        default=DEFAULT_READ_TIMEOUT_S,
        metavar="S",
        help="stores are read in a child process: a store whose reader crashes, or is silent for S "
        f"seconds, is reported as corrupt (default {DEFAULT_READ_TIMEOUT_S:g})",
    )


def report_check(check: StoreCheck, *, as_json: bool = False, note: str = "") -> int:
    """Print a store check (and ``note`` and the repair when it failed); exit code 0 ok, 1 corrupt."""
    if as_json:
        print(json.dumps({**check.__dict__, "ok": check.ok}, indent=2))
    else:
        print(check.summary())
    if not check.ok:
        print(f"store {check.store} is corrupt: {note}{check.repair()}", file=sys.stderr)
    elif check.duplicates:
        print(f"warning: store {check.store} holds passages stored twice; {check.repair()}", file=sys.stderr)
    return 0 if check.ok else 1


def cmd_prepare(args: argparse.Namespace) -> int:
    from parallelsearch.data import prepare, write_prepared
    from parallelsearch.stores.ingestion.jsonfiles import SkipReport

    report = SkipReport()
    out = prepare(args.src, dataset=args.dataset, skip_bad=args.skip_bad, report=report)
    for name, ds in sorted(out.items()):
        qpath, cpath = write_prepared(ds, args.out)
        print(f"{name}: {len(ds.questions)} questions ({ds.duplicates} duplicates dropped) -> {qpath}")
        for label, counts in (("types", ds.type_counts()), ("splits", ds.split_counts())):
            print(f"  {label}: " + ", ".join(f"{t}={n}" for t, n in sorted(counts.items())))
        print(f"  corpus: {len(ds.passages)} passages -> {cpath if cpath else '(no context in these files)'}")
    if report.count or args.skip_bad:
        print(report.summary(), file=sys.stderr)
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from parallelsearch.cli.index import limit_kwargs, row_range
    from parallelsearch.graphs.factory import writing_store
    from parallelsearch.stores.ingestion.jsonfiles import expand_paths
    from parallelsearch.stores.ingestion.pipeline import ingest
    from parallelsearch.stores.ingestion.readers import count_passages

    if not args.files and not args.verify:
        raise ValueError("index needs FILES (or --verify to check the store only)")
    if args.vectors:
        return cmd_index_vectors(args)
    files = expand_paths(args.files)  # before the store is opened: a typo creates nothing
    rows = row_range(args, lambda: count_passages(files, skip_bad=args.skip_bad))
    s = settings_from_args(args)
    cfg = s.retrieval()
    with (
        writing_store(
            cfg,
            args.store,
            on_wait=to_stderr,
            embedder_for=index_embedder_for(args, cfg),  # auto: an existing store's own backend
            hnsw=hnsw_from_args(args),
        ) as store,
        index_pool(args, store.embedder) as pool,
    ):
        if args.verify:
            if not verified_before_adding(args, cfg, store, has_files=bool(files)):
                return 1
            if not files:
                return 0
        rep = ingest(
            store,
            files,
            batch_size=s.embed_batch_size,
            chunk_size=args.chunk_size or 1024,
            skip_bad=args.skip_bad,
            progress=not args.no_progress,
            encoder=pool,
            rows=rows,
            **limit_kwargs(args),
        )
    _print_index_report(store, rep, args)
    return 0


def verified_before_adding(args: argparse.Namespace, cfg: Any, store: Any, *, has_files: bool) -> bool:
    """``index --verify``: the passage budget and every vector read back (a Chroma store in a child,
    while this process holds the writer lock and has not loaded the index); False when it failed."""
    from parallelsearch.cli.index import limit_kwargs
    from parallelsearch.graphs.factory import check_named_store
    from parallelsearch.stores.ingestion.passage_budget import budget_line, check_budget
    from parallelsearch.stores.ingestion.passage_limit import DEFAULT_MAX_TOKENS

    budget = limit_kwargs(args).get("max_passage_tokens", DEFAULT_MAX_TOKENS)
    print(check_budget(store, budget) if has_files else budget_line(store))
    check = check_named_store(cfg, store.name, timeout_s=args.read_timeout, progress=not args.no_progress)
    return report_check(check, note="nothing was added. ") == 0


def _print_index_report(store: Any, rep: Any, args: argparse.Namespace) -> None:
    d = rep.to_dict()
    print(
        f"store {store.name} ({store.location}): added {d['added']}, already present {d['already_present']}, "
        f"duplicates in input {d['duplicates_in_input']}, skipped {d['skipped']}, "
        f"over-long passages split {d['split']} (into {d['pieces']}), truncated {d['truncated']}, "
        f"{d['seconds']} s, {d['passages_per_s']} passages/s; total {store.count()}"
    )
    if rep.skipped.count or rep.skipped.notes or rep.skipped.replaced or args.skip_bad:
        print(rep.skipped.summary(), file=sys.stderr)


def cmd_stores(args: argparse.Namespace) -> int:
    from parallelsearch.graphs.factory import check_named_store, describe_stores
    from parallelsearch.stores.store_check import StoreCheck

    cfg = settings_from_args(args).retrieval()
    if args.check:
        check = check_named_store(cfg, args.check, timeout_s=args.read_timeout, progress=False)
        return report_check(check, as_json=args.json)
    if args.set_ef_search is not None:
        from parallelsearch.graphs.factory import make_chroma_client
        from parallelsearch.stores.chroma_store import set_ef_search

        if not args.store:
            raise ValueError("--set-ef-search needs --store NAME")
        client = make_chroma_client(cfg)
        if args.store not in {getattr(c, "name", c) for c in client.list_collections()}:
            raise StoreNotFoundError(f"no store named {args.store!r} at {cfg.location()}")
        set_ef_search(client.get_collection(args.store), args.set_ef_search)
    rows = describe_stores(cfg, timeout_s=args.read_timeout)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no stores yet (index one with: parallelsearch index --store NAME FILE...)")
    else:
        for r in rows:
            if r.get("error"):
                print(f"{r['name']}\tCORRUPT: {r['error']}\t{r['location']}")
                continue
            if r.get("read_only"):
                print(f"{r['name']}\t{r['count']}\tREAD-ONLY: {r['read_only']}\t{r['location']}")
                continue
            hnsw = " ".join(f"{k}={v}" for k, v in (r.get("hnsw") or {}).items())
            print(
                f"{r['name']}\t{r['count']}\t{r['model']} ({r['encoder_backend']})\t{hnsw}\t{r['location']}"
            )
    broken = [r for r in rows if r.get("error")]
    for r in broken:
        print(
            f"store {r['name']} is corrupt: {StoreCheck(store=r['name'], count=-1).repair()}", file=sys.stderr
        )
    for r in rows:
        if r.get("read_only") and not r.get("error"):
            print(read_only_message(Path(r["location"]), r["name"], r["read_only"]), file=sys.stderr)
    return 1 if broken else 0


def cmd_search(args: argparse.Namespace) -> int:
    from parallelsearch.graphs.factory import make_named_store

    store = make_named_store(settings_from_args(args).retrieval(), args.store)
    hits = store.search(clean_text_arg(args.query, "query"), args.k)
    if args.json:
        print(json.dumps([h.to_dict() for h in hits], ensure_ascii=False, indent=2))
        return 0
    for i, h in enumerate(hits, 1):
        print(f"{i}. [{h.score:.3f}] {h.title}\n   {h.text[:300]}")
    return 0


def cmd_serve_retriever(args: argparse.Namespace) -> int:
    from parallelsearch.stores.encoding.encoder_threads import let_idle_threads_sleep

    for flag, least in (("max_batch", 0), ("concurrent_batches", 1)):
        value = getattr(args, flag)
        if value is not None and value < least:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= {least}, got {value}")
    if args.max_batch == 0 and args.concurrent_batches is not None:
        raise ValueError(
            "--concurrent-batches needs batching; --max-batch 0 searches each request on its own"
        )
    s = bind_settings(args, settings_from_args(args))
    cfg = s.retrieval()
    if bind_refused(args, cfg.retriever_api_key is not None, RETRIEVER_KEY_SETTING):
        return 2
    tls = ssl_options(s)
    spin = let_idle_threads_sleep()  # before torch loads
    from parallelsearch.graphs.factory import make_named_store
    from parallelsearch.stores.http.api_key import KeyFailures
    from parallelsearch.stores.http.retrieval_server import create_retrieval_app, run_server

    store = make_named_store(cfg, args.store)
    batching = {k: v for k in ("max_batch", "concurrent_batches") if (v := getattr(args, k)) is not None}
    key = cfg.retriever_api_key.get_secret_value() if cfg.retriever_api_key is not None else None
    hosts = frozenset(s.server_allowed_hosts) if s.server_allowed_hosts is not None else None
    failures = KeyFailures(s.server_key_failure_limit, s.server_key_failure_window_s)
    app = create_retrieval_app(
        store, default_topk=args.topk, api_key=key, key_failures=failures, allowed_hosts=hosts, **batching
    )
    batcher = app.state.batcher
    encoder = store.embedder
    threads = (encoder.team or "all cores") if encoder.backend == "torch" else (cfg.encoder_threads or 1)
    scheme = "https" if tls else "http"
    print(
        f"serving store {store.name} ({store.count()} passages) on {scheme}://{args.host}:{args.port}/retrieve"
    )
    batches = (
        f"batches of up to {batcher.max_batch} queries, {batcher.concurrent_batches} at once"
        if batcher is not None
        else "no batching (--max-batch 0)"
    )
    print(f"encoder: {encoder.backend}, {encoder.workers} encoder thread(s) x {threads}; {batches}")
    print(f"OpenMP: {spin}")
    print(
        f"API key: {'required on every route but /health' if key else 'none (anyone who reaches the port)'}; "
        f"Host names: {', '.join(sorted(hosts)) if hosts else 'any'}"
    )
    run_server(app, args.host, args.port, limits=s.read_limits(), **tls)
    return 0
