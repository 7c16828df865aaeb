"""The argument groups the CLI commands share, and the one merge of flags over settings.

Flags default to ``None`` ("not given"), so the defaults live only in the config models,
and the precedence is the same for every command (docs/architecture.md,
"Configuration"): an explicit flag > environment > config file > defaults.
"""

from __future__ import annotations

import argparse
import sys
import typing
from pathlib import Path
from typing import Any, get_args

from parallelsearch.agents.policies.spec import SPEC_HELP
from parallelsearch.graphs.factory import SEARCHER_KINDS, STORE_KINDS
from parallelsearch.settings import Settings, get_settings
from parallelsearch.stores.chroma_store import HNSW_KEYS, Space
from parallelsearch.stores.config import EncoderBackend


def clean_text_arg(text: str, what: str) -> str:
    """A text argument with invalid Unicode (lone surrogates: undecodable bytes, which no encoder,
    tokenizer or JSON client accepts) replaced by U+FFFD, the count said on stderr."""
    from parallelsearch.stores.text import scrub_text

    clean, n = scrub_text(text)
    if n:
        print(
            f"warning: replaced {n} invalid character(s) in the {what} with U+FFFD "
            "(lone surrogates: bytes that are not UTF-8)",
            file=sys.stderr,
        )
    return clean


def to_stderr(message: str) -> None:
    """Where a waiting writer's messages go (``writing_store``'s ``on_wait``): stderr, at once."""
    print(message, file=sys.stderr, flush=True)


def add_typed_flags(
    p: argparse.ArgumentParser | argparse._ArgumentGroup, kind: type, helps: dict[str, str]
) -> None:
    """One flag of type ``kind`` per ``{flag: help}`` entry; unset = None, so the settings' value holds."""
    for flag, text in helps.items():
        p.add_argument(flag, type=kind, help=text)


def add_retrieval_args(p: argparse.ArgumentParser) -> None:
    """Where to search: ``--store`` (repeatable) or ``--retriever``, plus the Chroma server."""
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--store",
        action="append",
        help="store name (repeat for multi-store routing; default: the settings' stores), or "
        "NAME=SHARD,SHARD,... for one corpus over several collections (SHARD: COLLECTION@HOST:PORT, "
        "COLLECTION@FOLDER or COLLECTION; docs/scaling.md)",
    )
    src.add_argument("--retriever", help="URL of any Search-R1 /retrieve server (instead of stores)")
    p.add_argument(
        "--searcher",
        metavar="KIND",
        help=f"the searcher kind: {', '.join(SEARCHER_KINDS)} (default: the settings'; unset = remote "
        "with --retriever, else stores)",
    )
    p.add_argument(
        "--retriever-ca-bundle",
        help="CA certificates (PEM) an https:// --retriever's certificate is verified against "
        "(default: the settings', else certifi's bundle)",
    )
    add_chroma_args(p)
    add_shard_args(p)


def add_chroma_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store-kind",
        choices=list(STORE_KINDS),
        help="what kind of store --store names (default: the settings', chroma)",
    )
    p.add_argument(
        "--store-path",
        type=Path,
        help="the folder of the --store-kind's stores, for every kind but chroma (default: <home>/<kind>)",
    )
    p.add_argument(
        "--chroma-host", help="Chroma server host (default: the settings'; unset = embedded store under home)"
    )
    add_typed_flags(
        p,
        int,
        {
            "--chroma-port": "Chroma server port (default: the settings', 8000)",
            "--encoder-threads": "threads of each local encoder call (default: the settings'; unset = "
            "torch: every core, split between encoder workers; ONNX: 1)",
            "--encoder-workers": "encoder calls at once, each on its own thread, a batch split over them "
            "(default: the settings'; unset = torch: 1, ONNX: cores / --encoder-threads)",
        },
    )


def add_shard_args(p: argparse.ArgumentParser) -> None:
    """How a sharded store (``--store NAME=SHARD,SHARD,...``) answers when a shard fails."""
    p.add_argument(
        "--allow-partial",
        action="store_const",
        const=True,
        help="a sharded store answers from the shards that answered when one fails, naming the missing "
        "ones in the result (default: the settings'; off = the query fails naming the shard)",
    )
    p.add_argument(
        "--shard-timeout",
        type=float,
        metavar="SECONDS",
        help="deadline of one query to all shards, retries included (default: the settings', 10)",
    )


def add_lock_args(p: argparse.ArgumentParser) -> None:
    """What a writer does when another process is writing the same embedded store."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--lock-timeout",
        type=float,
        metavar="SECONDS",
        help="wait at most this long for another writer of the store (default: the settings', 600)",
    )
    g.add_argument(
        "--no-wait",
        dest="lock_timeout",
        action="store_const",
        const=0.0,
        help="fail at once, naming the other writer, when the store is being written",
    )


def add_hnsw_args(p: argparse.ArgumentParser) -> None:
    """Chroma's HNSW parameters of a new store (stores/chroma_store.py); only --ef-search can change later."""
    g = p.add_argument_group("HNSW index of a new store (Chroma's defaults when not given)")
    g.add_argument("--space", choices=get_args(Space), help="distance (default cosine)")
    g.add_argument("--ef-construction", type=int, help="candidate list while building (Chroma: 100)")
    g.add_argument("--max-neighbors", type=int, help="HNSW M, links per node (Chroma: 16)")
    g.add_argument(
        "--ef-search",
        type=int,
        help="candidate list while searching (Chroma: 100); on an existing store it is changed, "
        "and processes that open the store afterwards search with it",
    )


def hnsw_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The HNSW flags that were given (empty: Chroma's defaults, or the store's own)."""
    v = vars(args)
    return {k: v[k] for k in HNSW_KEYS if v.get(k) is not None}


def add_model_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", help="sentence-transformers model name or path (default: the settings', all-MiniLM-L6-v2)"
    )
    p.add_argument(
        "--encoder-backend",
        choices=get_args(EncoderBackend),
        help="encoder engine: torch, onnx (ONNX Runtime fp32, same embeddings), onnx-int8 (int8, faster, "
        "different embeddings); auto = the store's embeddings on the fastest engine for the device: "
        "onnx on CPU, torch on a GPU (default: the settings', auto)",
    )


def add_bind_args(p: argparse.ArgumentParser, *, port: int, dest: str, setting: str) -> None:
    """Where a command serves (``--host``, ``--port``), ``--api-key`` (into the settings' ``dest``)
    and ``--insecure-no-key``."""
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="bind address (default 127.0.0.1: local only; any other needs a key or --insecure-no-key)",
    )
    p.add_argument("--port", type=int, default=port)
    p.add_argument(
        "--api-key",
        dest=dest,
        help=f"require this key on every route but /health, as X-API-Key or Authorization: Bearer "
        f"(default: {setting}, which keeps it off the process list)",
    )
    p.add_argument(
        "--insecure-no-key",
        action="store_true",
        help="serve on a non-loopback --host without a key (refused otherwise): anyone who reaches the "
        "port can use the server",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="a Host header name to answer (repeat; default: the settings' server_allowed_hosts, else "
        "localhost, 127.0.0.1 and ::1 when --host is loopback, any name otherwise)",
    )
    p.add_argument(
        "--forwarded-allow-ips",
        metavar="ADDRESSES",
        help="comma-separated addresses of proxies whose X-Forwarded-For this server believes (the "
        "client address failed keys are counted against); default: the settings' "
        "server_forwarded_allow_ips, else none (the peer's address)",
    )
    p.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (PEM; with --ssl-keyfile)")
    p.add_argument("--ssl-keyfile", help="the certificate's private key (PEM)")


def bind_settings(args: argparse.Namespace, s: Settings) -> Settings:
    """The settings a server binds with: its Host names (a loopback bind answers only loopback
    names unless the settings or ``--allowed-host`` say otherwise: a DNS-rebinding page's name is
    not one of them)."""
    from parallelsearch.stores.http.api_key import is_loopback
    from parallelsearch.stores.http.asgi_guard import LOOPBACK_HOSTS

    if s.server_allowed_hosts is None and is_loopback(args.host):
        return s.model_copy(update={"server_allowed_hosts": sorted(LOOPBACK_HOSTS)})
    return s


def ssl_options(s: Settings) -> dict[str, str]:
    """uvicorn's TLS arguments from the settings (both files, or none)."""
    if s.server_ssl_certfile is None or s.server_ssl_keyfile is None:
        return {}
    for what, path in (("certificate", s.server_ssl_certfile), ("key", s.server_ssl_keyfile)):
        if not path.is_file():
            raise FileNotFoundError(f"the TLS {what} file {path} does not exist")
    return {"ssl_certfile": str(s.server_ssl_certfile), "ssl_keyfile": str(s.server_ssl_keyfile)}


def bind_refused(args: argparse.Namespace, has_key: bool, setting: str) -> bool:
    """Whether ``args.host`` must not be served (a network address, no key, no ``--insecure-no-key``),
    said in one line on stderr (or the warning of ``--insecure-no-key``) before anything is bound."""
    from parallelsearch.stores.http.api_key import bind_problem

    problem = bind_problem(
        args.host, has_key, insecure_no_key=args.insecure_no_key, how_to_set=f"--api-key or {setting}"
    )
    if problem is not None:
        print(problem[1], file=sys.stderr, flush=True)
    return problem is not None and problem[0] == "refuse"


def add_policy_args(p: argparse.ArgumentParser, *, answer_policy: bool = True, repeat: bool = False) -> None:
    """The policy flags; with ``repeat``, ``--policy`` may be given several times (a list)."""
    more = "; repeat it for several policies" if repeat else ""
    p.add_argument(
        "--policy",
        action="append" if repeat else "store",
        help=SPEC_HELP + f" (default: the settings', oracle{more})",
    )
    p.add_argument(
        "--policy-base-url",
        help="the server a chat: policy's model talks to, e.g. http://127.0.0.1:8000/v1 for vllm serve "
        "behind chat:openai:MODEL (default: the settings' policy_base_url, else the provider's own: "
        "OPENAI_BASE_URL or api.openai.com)",
    )
    p.add_argument(
        "--openai-ca-bundle",
        help="CA certificates (PEM) an https:// openai: server's certificate is verified against "
        "(default: the settings' openai_ca_bundle, else SSL_CERT_FILE or certifi's bundle)",
    )
    if answer_policy:
        p.add_argument("--answer-policy", help="a separate policy spec for the answer turn")
    p.add_argument(
        "--constrained",
        action="store_const",
        const=True,
        help="generate every turn under the protocol's grammar (vLLM structured outputs: vllm:PATH, "
        "or openai:MODEL@URL against vllm serve)",
    )


def _flag_type(field: Any) -> tuple[type, tuple[str, ...] | None]:
    """The argparse type and choices of a knob: its Literal's values, else int, float or str."""
    args = [a for a in typing.get_args(field.annotation) or (field.annotation,) if a is not type(None)]
    literal = next((a for a in args if typing.get_origin(a) is typing.Literal), None)
    if literal is not None:
        return str, typing.get_args(literal)
    kind = next((a for a in args if a in (int, float)), str)
    return kind, None


def add_graph_args(p: argparse.ArgumentParser) -> None:
    """The graph knobs of ``CLI_FLAGS``, each with its field's type, choices, help and default;
    unset flags leave the settings' (or GraphConfig's) values."""
    from parallelsearch.graphs.config import CLI_FLAGS, GraphConfig

    for name, flag in CLI_FLAGS.items():
        field = GraphConfig.model_fields[name]
        kind, choices = _flag_type(field)
        metavar = None if choices else flag[2:].upper().replace("-", "_")
        # a knob whose default is None says in its description what None means
        help_text = field.description + ("" if field.default is None else f" (default {field.default})")
        p.add_argument(flag, dest=name, type=kind, choices=choices, metavar=metavar, help=help_text)


def _declared(declared: list[str], names: list[str]) -> list[str]:
    """``--store NAME`` of a store the settings declare sharded keeps that declaration."""
    from parallelsearch.stores.shard_spec import parse_store

    sharded = {parse_store(entry).name: entry for entry in declared if "=" in entry}
    return [sharded.get(name.strip(), name) for name in names]


def settings_from_args(args: argparse.Namespace, settings: Settings | None = None) -> Settings:
    """The settings with every flag the command was given over them (the one merge)."""
    s = settings or get_settings()
    v = vars(args)
    update: dict[str, Any] = {}
    if v.get("store"):
        names = v["store"] if isinstance(v["store"], list) else [v["store"]]
        names = _declared(s.stores, names)
        update.update(stores=names, retriever_url=None)
    elif v.get("retriever"):
        update.update(retriever_url=v["retriever"], stores=[])
    for flag, field in (
        ("searcher", "searcher"),
        ("store_kind", "store_kind"),
        ("store_path", "store_path"),
        ("chroma_host", "chroma_host"),
        ("chroma_port", "chroma_port"),
        ("encoder_threads", "encoder_threads"),
        ("encoder_workers", "encoder_workers"),
        ("model", "embedding_model"),
        ("encoder_backend", "encoder_backend"),
        ("policy", "policy"),
        ("answer_policy", "answer_policy"),
        ("constrained", "constrained"),
        ("api_key", "server_api_key"),
        ("retriever_api_key", "retriever_api_key"),
        ("batch_size", "embed_batch_size"),
        ("lock_timeout", "store_lock_timeout_s"),
        ("allow_partial", "allow_partial"),
        ("shard_timeout", "shard_timeout_s"),
        ("checkpointer", "server_checkpointer"),
        ("checkpoint_url", "server_checkpoint_url"),
        ("max_concurrency", "server_max_concurrency"),
        ("queue_size", "server_queue_size"),
        ("queue_timeout", "server_queue_timeout_s"),
        ("allowed_host", "server_allowed_hosts"),
        ("forwarded_allow_ips", "server_forwarded_allow_ips"),
        ("multitask_strategy", "server_multitask_strategy"),
        ("ssl_certfile", "server_ssl_certfile"),
        ("ssl_keyfile", "server_ssl_keyfile"),
        ("retriever_ca_bundle", "retriever_ca_bundle"),
        ("openai_ca_bundle", "openai_ca_bundle"),
        ("policy_base_url", "policy_base_url"),
    ):
        if v.get(flag) is not None:
            update[field] = v[flag]
    from parallelsearch.graphs.config import CLI_FLAGS

    graph = s.graph_config.updated(**{name: v.get(name) for name in CLI_FLAGS})
    if graph is not s.graph_config:
        update["graph_config"] = graph
    if not update:
        return s
    # validate the merged values (a bad flag is an error naming the field, not a crash later)
    return Settings.model_validate({**s.model_dump(exclude_unset=True), **update, "home": s.home})


def add_failed_share_arg(p: argparse.ArgumentParser) -> None:
    """``--max-failed-search-share``: past it the command exits non-zero (``rollout``, ``eval``)."""
    from parallelsearch.rl.search_failures import DEFAULT_MAX_SHARE

    p.add_argument(
        "--max-failed-search-share",
        type=float,
        default=DEFAULT_MAX_SHARE,
        metavar="SHARE",
        help="exit non-zero when more than this share of searches failed (default "
        f"{DEFAULT_MAX_SHARE:g}, the training executor's limit): the scores would count error observations",
    )


def retrieval_source(settings: Any) -> str:
    """The retriever or stores a command searched, as its errors name them."""
    cfg = settings.retrieval()
    return f"retriever {cfg.retriever_url}" if cfg.retriever_url else f"stores {', '.join(cfg.stores)}"
