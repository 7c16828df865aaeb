"""README.md and every page it links, as a newcomer runs them (README, "How the blocks are marked").

- Shell blocks: every command in its dry form. ``.venv/bin/parallelsearch ...`` is parsed by the
  CLI's own parser (flags, choices, types); ``make X`` runs as ``make -n X``; another console
  script of ``.venv`` runs its sub-command's ``--help``; ``.venv/bin/python -c`` runs; ``export``
  and ``VAR=value`` name variables the code reads. Anything else must be marked.
- Python blocks run in-process from the repository root. A ``python openai`` block runs with
  ``OPENAI_BASE_URL`` at a local stand-in OpenAI chat server (tests/servers.py: scripted parallel
  tool calls, then an answer) and a dummy ``OPENAI_API_KEY``, so its ``ChatOpenAI`` is real.
- Marked blocks (``gpu``, ``network``, ``data``, ``server``) are skipped, each with its reason.
- Every backticked name of the prose exists (tests/doc_names.py), but for :data:`ALLOWED`;
  CHANGELOG.md is not name-checked: it names what was removed, on purpose.
- The figures the README states are computed here from the code and the shipped sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import io
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import NEEDS, ROOT, Block, blocks, pages, shell_commands, spans, split_env
from doc_names import problem

#: names the docs give as another tool's (not installed in this tier) or as removed, with why
ALLOWED = {
    "RLHFDataset": "OpenRLHF's / verl's dataset class (docs/training.md compares them)",
    "main_ppo_format": "verl's (the official ParallelSearch run)",
    "lr_warmup_steps_ratio": "verl's setting",
    "get_constant_schedule_with_warmup": "transformers' scheduler",
    "train_N": "a pattern: train_1, train_2, ...",
    "set_encoder_workers": "removed in 0.3 (a before/after measurement names the old code)",
    "on_encoder_thread": "removed in 0.3 (a before/after measurement names the old code)",
    "VLLM_ENFORCE_STRICT_TOOL_CALLING": "vLLM's (the .venv-vllm tier)",
    "ToolParser.__init_subclass__": "vLLM's",
    "supports_required_and_named": "vLLM's",
    "resolve_tool_strictness": "vLLM's",
    "get_function_parameters": "vLLM's",
    "--tool-strict-level": "vLLM's flag",
    "--max-num-batched-tokens": "vLLM's flag",
    "--structured-outputs-config.disable_any_whitespace": "vLLM's flag",
    "gpu_model_runner._bookkeeping_sync": "vLLM's",
    "vllm_latest": "OpenRLHF's vLLM engine module (the vLLM tier)",
    "F1_Score": "FlashRAG's metric class (docs/evaluation.md compares its F1)",
    "subem": "Search-R1's substring match (docs/evaluation.md compares cover-EM)",
}
_SHELLS = ("bash", "sh", "shell", "console")
#: the first line of a plain block that is a command, not a synopsis (``usage: ...``) or a diagram
_COMMAND = re.compile(r"\.venv(-vllm)?/bin/|parallelsearch [a-z][a-z-]+( |$)|make [a-z]")
_ALL = [b for page in pages() for b in blocks(page)]
_PYTHON = [b for b in _ALL if b.lang == "python"]
_SHELL = [b for b in _ALL if b.lang in _SHELLS]
README = ROOT / "README.md"


# ---- the README's shape -------------------------------------------------------------------------
def test_the_readme_is_short_and_each_reader_has_a_first_step_in_its_first_60_lines():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 350, len(lines)
    assert not any(marker in text for marker in ("Changed in 0.", "Removed in 0.")), "changelog: CHANGELOG.md"
    for heading in ("## LangGraph users", "## RL researchers"):
        start = lines.index(heading)
        first = next(b for b in blocks(README) if b.line > start + 1)
        assert first.line <= 60 and not first.need, (heading, first.where)
    assert all(b.lang in (*_SHELLS, "python", "text") for b in blocks(README))


# ---- shell blocks ---------------------------------------------------------------------------------
@pytest.mark.parametrize("block", _SHELL, ids=[b.where for b in _SHELL])
def test_a_shell_block_runs_in_its_dry_form(block: Block):
    if block.need:
        pytest.skip(f"{block.where}: {NEEDS[block.need]}")
    commands = shell_commands(block)
    assert commands, block.where
    problems = [p for argv in commands if (p := _dry_run(argv))]
    assert not problems, f"{block.where}: " + "; ".join(problems)


def _dry_run(argv: list[str]) -> str | None:
    names, argv = split_env(argv)
    if argv and argv[0] == "export":
        names += [a.partition("=")[0] for a in argv[1:] if "=" in a and a[0].isupper()]
        argv = []
    unknown = [p for n in names if (p := problem(n, ALLOWED))]
    if unknown:
        return unknown[0]
    if not argv:
        return None
    prog, args = argv[0], argv[1:]
    if prog in (".venv/bin/parallelsearch", ".venv-vllm/bin/parallelsearch"):
        return _parse(args)
    if prog == "make":
        return _run(["make", "-n", *args], "make -n")
    if prog == ".venv/bin/python":
        return _python(args)
    if prog.startswith(".venv/bin/"):
        return _console_help(prog.removeprefix(".venv/bin/"), args)
    return f"{prog!r} has no dry form here: run it through .venv/bin/, or mark the block ({', '.join(NEEDS)})"


def _parse(args: list[str]) -> str | None:
    from parallelsearch.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(args)
    except SystemExit as e:
        return (
            None if e.code == 0 else f"parallelsearch {' '.join(args)[:80]}: {err.getvalue().strip()[-300:]}"
        )
    return None


def _run(cmd: list[str], label: str) -> str | None:
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    return None if r.returncode == 0 else f"{label} {' '.join(cmd[-3:])}: {(r.stderr or r.stdout)[-300:]}"


def _python(args: list[str]) -> str | None:
    if args[:1] == ["-c"]:
        return _run([sys.executable, "-c", args[1]], "python -c")
    if args[:1] == ["-m"]:
        return None if importlib.util.find_spec(args[1]) else f"python -m {args[1]}: no such module"
    return None if (ROOT / args[0]).is_file() else f"python {args[0]}: no such file"


def _console_help(tool: str, args: list[str]) -> str | None:
    """``.venv/bin/TOOL SUB ...`` -> ``TOOL SUB --help`` through the tool's console entry point."""
    found = importlib.metadata.entry_points(group="console_scripts", name=tool)
    if not found:
        return f"{tool}: not a console script of .venv"
    module, _, attr = next(iter(found)).value.partition(":")
    sub = [a for a in args[:1] if not a.startswith("-")]
    code = f"import sys; from {module} import {attr} as main; sys.argv = {[tool, *sub, '--help']!r}; sys.exit(main())"
    return _run([sys.executable, "-c", code], f"{tool} {' '.join(sub)} --help")


# ---- Python blocks ---------------------------------------------------------------------------------
@pytest.mark.parametrize("block", _PYTHON, ids=[b.where for b in _PYTHON])
def test_a_python_block_runs(block: Block, monkeypatch, capsys):
    if block.need and block.need != "openai":
        pytest.skip(f"{block.where}: {NEEDS[block.need]}")
    monkeypatch.chdir(ROOT)
    code = compile(block.text, block.where, "exec")
    if block.need != "openai":
        exec(code, {"__name__": "docs_block"})
        return
    from conftest import UvicornThread
    from servers import make_openai_chat_test_server

    app = make_openai_chat_test_server()
    with UvicornThread(app) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-stand-in")
        exec(code, {"__name__": "docs_block"})


# ---- text blocks: a usage synopsis has a filled-in line -------------------------------------------
def test_every_usage_synopsis_has_a_filled_in_runnable_line():
    for page in pages():
        runnable = "\n".join(b.text for b in blocks(page) if b.lang in _SHELLS)
        for b in blocks(page):
            if b.lang == "text" and b.text.startswith("usage: parallelsearch "):
                command = b.text.split()[2]
                assert f"parallelsearch {command} " in runnable, f"{b.where}: no filled-in {command} line"


def test_no_command_hides_in_an_unmarked_plain_block():
    for b in _ALL:
        if b.lang in ("", "text"):
            first = b.text.lstrip().split("\n", 1)[0]
            assert not _COMMAND.match(first), f"{b.where}: a command in a plain block: make it bash"


# ---- names ------------------------------------------------------------------------------------------
def test_every_backticked_name_exists_in_the_code():
    found = []
    for page in pages():
        if page.name == "CHANGELOG.md":
            continue  # the migration notes name what was removed, on purpose
        for line, span in spans(page):
            if (p := problem(span, ALLOWED)) is not None:
                found.append(f"{page.relative_to(ROOT)}:{line}: {p}")
    assert not found, "\n".join(found)


# ---- figures ------------------------------------------------------------------------------------------
def test_the_sample_counts_the_readme_states_come_from_the_shipped_sample():
    from transformers import AutoTokenizer

    from parallelsearch import HOTPOTQA_SAMPLE, load_questions
    from parallelsearch.stores.config import DEFAULT_EMBEDDING_MODEL
    from parallelsearch.stores.encoding.embedder import resolve_model_path
    from parallelsearch.stores.ingestion.passage_limit import PassageLimit
    from parallelsearch.stores.ingestion.readers import read_passages

    questions = load_questions(HOTPOTQA_SAMPLE)
    n, par = len(questions), sum(q["metadata"]["split"] == "parallel" for q in questions)
    corpus = {p.id for p in read_passages([HOTPOTQA_SAMPLE])}
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_EMBEDDING_MODEL))
    stored = {p.id for p in PassageLimit(tokenizer).apply(read_passages([HOTPOTQA_SAMPLE]))}
    readme = " ".join(README.read_text(encoding="utf-8").split())
    assert f"{n} questions: {par} comparison = parallelizable, {n - par} bridge = sequential" in readme
    assert f"their {len(corpus):,} Wikipedia paragraphs" in readme
    assert f"stored as {len(stored):,} passages" in readme
    assert f"{par} parallelizable questions" in readme
    cli = " ".join((ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split())
    assert f"({n} questions;" in cli and f"a corpus of {len(corpus):,} passages" in cli
    assert f"`index` stores as {len(stored):,}" in cli


def test_the_demo_folder_and_ratio_line_the_readme_states_come_from_the_demo():
    from parallelsearch import HOTPOTQA_SAMPLE, OraclePolicy, load_questions
    from parallelsearch.agents.policies.config import DEFAULT_POLICY
    from parallelsearch.cli.demo import ratio_line, report_folder
    from parallelsearch.eval.runner import _graph_input
    from parallelsearch.graphs import build_graph

    readme = README.read_text(encoding="utf-8")
    assert f"`{report_folder(Path('.parallelsearch'), DEFAULT_POLICY)}/`" in readme
    questions = [q for q in load_questions(HOTPOTQA_SAMPLE) if q["metadata"]["split"] == "parallel"]

    async def means(kind: str) -> dict[str, float]:
        graph = build_graph(kind, OraclePolicy(), lambda query: [{"title": query, "text": query}])
        outs = await asyncio.gather(*(graph.ainvoke(_graph_input(q)) for q in questions))
        return {k: statistics.mean(o[k] for o in outs) for k in ("policy_calls", "search_rounds")}

    par, seq = asyncio.run(means("parallel")), asyncio.run(means("sequential"))
    assert ratio_line(par, seq) in readme
    assert f"| {par['policy_calls']:.3f} | {par['search_rounds']:.3f} |" in readme
    assert f"| {seq['policy_calls']:.3f} | {seq['search_rounds']:.3f} |" in readme


# ---- links --------------------------------------------------------------------------------------------
def test_every_relative_link_and_anchor_resolves():
    bad = []
    for page in pages():
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                bad.append(f"{page.name}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                bad.append(f"{page.name}: {target} (no such heading)")
    assert not bad, bad


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    heads = re.findall(r"^#+ (.*)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}
