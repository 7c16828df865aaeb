"""The ``index`` command's scale options: precomputed vectors, devices and encoding processes,
the passage token budget. ``cli_stores.py`` registers the command; this module holds the flags
and the two paths they open (docs/architecture.md, "Configuration": flags default to None).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from parallelsearch.stores.config import RetrievalConfig
from parallelsearch.stores.ingestion.passage_limit import DEFAULT_MAX_TOKENS, MODES


def add_index_scale_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("precomputed vectors")
    g.add_argument(
        "--vectors",
        help="vectors of the ONE corpus file given (row i = passage i): .npy, .npz or a FAISS flat index "
        "(.faiss/.index); nothing is encoded, --model names the model that made them",
    )
    g.add_argument("--vectors-key", help="the array of a .npz archive that holds several")
    g.add_argument(
        "--rows",
        help="START:STOP: only these passages (0-based, in reading order; with --vectors their rows), "
        "one shard of a large corpus (docs/scaling.md: building shards in parallel)",
    )
    g.add_argument(
        "--shard",
        metavar="I/N",
        help="shard I of N (0-based): the I-th of N near-equal consecutive row ranges of the corpus, "
        "instead of --rows; run 0/N .. N-1/N as N processes, one store each",
    )
    g = p.add_argument_group("encoding text")
    g.add_argument(
        "--device",
        help="where the encoder runs: cpu, cuda, cuda:1, or a comma list (cuda:0,cuda:1) for one "
        "encoding process per device",
    )
    g.add_argument(
        "--processes",
        type=int,
        help="encoding processes (sentence-transformers' pool); with --device cuda: cuda:0..N-1",
    )
    g.add_argument(
        "--max-passage-tokens",
        type=int,
        help=f"token budget per passage; longer ones are split or truncated (default {DEFAULT_MAX_TOKENS})",
    )
    g.add_argument("--long-passages", choices=MODES, help="what happens to a longer passage (default split)")


def limit_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The passage-limit arguments of ``ingest`` that were given (else its defaults hold)."""
    keys = ("max_passage_tokens", "long_passages")
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def index_embedder_for(args: argparse.Namespace, cfg: RetrievalConfig) -> Callable[[str | None], Any]:
    """``writing_store``'s ``embedder_for``: text ingestion's embedder from the backend the store
    records, on ``--device``; with a pool, torch (the pool's processes encode with sentence-transformers)."""
    from parallelsearch.stores.encoding.backend import embedding_family
    from parallelsearch.stores.encoding.embedder import make_embedder
    from parallelsearch.stores.encoding.passage_pool import device_list

    pool = device_list(args.device, args.processes)
    if not pool:
        return lambda recorded: make_embedder(cfg, recorded=recorded, device=args.device)

    def for_pool(recorded: str | None) -> Any:
        # the pool's processes encode with sentence-transformers (torch); auto keeps the family
        if cfg.encoder_backend == "auto" and embedding_family(recorded or "torch") == "fp32":
            return make_embedder(cfg.model_copy(update={"encoder_backend": "torch"}))
        return make_embedder(cfg, recorded=recorded)

    return for_pool


@contextmanager
def index_pool(args: argparse.Namespace, embedder: Any) -> Iterator[Any]:
    """A started multi-process encoding pool when several devices or processes are asked for
    (else None: the store's own embedder encodes)."""
    from parallelsearch.stores.encoding.passage_pool import PassagePool, device_list

    devices = device_list(args.device, args.processes)
    if not devices:
        yield None
        return
    print(f"encoding on {len(devices)} processes: {', '.join(devices)}", file=sys.stderr)
    with PassagePool(embedder, devices) as pool:
        yield pool


def row_range(args: argparse.Namespace, total: Callable[[], int]) -> tuple[int, int | None] | None:
    """The rows ``--rows`` or ``--shard`` name (``total()``: the corpus's row count, read only for
    ``--shard``), or None for every row."""
    from parallelsearch.stores.ingestion.vectors import parse_rows, shard_rows

    if args.rows and args.shard:
        raise ValueError("give --rows or --shard, not both")
    if args.shard:
        start, stop = shard_rows(args.shard, total())
        print(f"shard {args.shard}: rows {start}:{stop}", file=sys.stderr)
        return start, stop
    return parse_rows(args.rows) if args.rows else None


def cmd_index_vectors(args: argparse.Namespace) -> int:
    """``index --vectors``: one corpus file plus its precomputed vectors into a store."""
    from parallelsearch.cli.common import hnsw_from_args, settings_from_args, to_stderr
    from parallelsearch.graphs.factory import writing_store
    from parallelsearch.stores.errors import BadInputError, ModelMismatchError
    from parallelsearch.stores.ingestion.vector_files import open_vectors
    from parallelsearch.stores.ingestion.vectors import (
        DEFAULT_CHUNK,
        RecordedModel,
        check_count,
        ingest_vectors,
    )

    if len(args.files) != 1:
        raise ValueError(
            f"--vectors goes with ONE corpus file, got {len(args.files)}: {' '.join(args.files)}"
        )
    for flag in ("device", "processes", "max_passage_tokens", "long_passages"):
        if getattr(args, flag, None) is not None:
            raise ValueError(f"--{flag.replace('_', '-')} is about encoding text; --vectors encodes nothing")
    cfg = settings_from_args(args).retrieval()
    vf = open_vectors(args.vectors, args.vectors_key)
    try:
        total = check_count(Path(args.files[0]), vf)  # before the store is created
        rows = row_range(args, lambda: total)
        model = RecordedModel(cfg.embedding_model, vf.dimension)
        try:
            # one writer at a time, as for text
            with writing_store(
                cfg, args.store, on_wait=to_stderr, embedder=model, hnsw=hnsw_from_args(args)
            ) as store:
                rep = ingest_vectors(
                    store,
                    args.files[0],
                    vf,
                    chunk_size=args.chunk_size if args.chunk_size is not None else DEFAULT_CHUNK,
                    skip_bad=args.skip_bad,
                    progress=not args.no_progress,
                    count_checked=True,
                    rows=rows,
                )
        except ModelMismatchError as e:
            raise BadInputError(args.vectors, None, f"does not fit the store: {e}") from e
    finally:
        vf.close()
    d = rep.to_dict()
    print(
        f"store {store.name} ({store.location}): added {d['added']} vectors of {vf.dimension} dimensions "
        f"({cfg.embedding_model}), already present {d['already_present']}, duplicates in input "
        f"{d['duplicates_in_input']}, skipped {d['skipped']}, {d['seconds']} s, "
        f"{d['passages_per_s']} vectors/s; total {store.count()}"
    )
    if rep.skipped.count or args.skip_bad:
        print(rep.skipped.summary(), file=sys.stderr)
    return 0
