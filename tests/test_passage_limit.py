"""The passage token budget: over-long passages split or truncated, counted, in bounded memory.
Real MiniLM tokenizer and model, real Chroma, real HotpotQA text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parallelsearch.stores import ChromaStore, ingest, make_client, read_passages
from parallelsearch.stores.ingestion.passage_limit import PassageLimit, pieces, tokenizer_of
from parallelsearch.stores.passages import Passage


@pytest.fixture(scope="module")
def long_text(hotpot_comparison_file) -> str:
    texts = [p.text for p in read_passages([hotpot_comparison_file])][:40]
    return " ".join(texts)  # ~40 real paragraphs, a few thousand tokens


def _ntok(tok, text: str) -> int:
    return len(tok(text, add_special_tokens=False)["input_ids"])


def test_pieces_stay_within_the_budget_and_keep_all_the_text(embedder, long_text):
    tok = tokenizer_of(embedder)
    assert _ntok(tok, long_text) > 1000
    parts = list(pieces(long_text, 100, tok))
    assert len(parts) >= _ntok(tok, long_text) // 100
    assert all(_ntok(tok, p) <= 100 for p in parts)
    assert " ".join(parts).split() == long_text.split()  # nothing lost, nothing repeated


def test_split_and_truncate_are_counted_and_resume_adds_nothing(tmp_path, embedder, long_text):
    short = Passage.make("Short", "A short paragraph that fits.")
    long = Passage.make("Long", long_text)
    store = ChromaStore("limit", path=tmp_path / "db", embedder=embedder)
    rep = ingest(store, passages=[short, long], max_passage_tokens=200, progress=False)
    assert (rep.split, rep.truncated) == (1, 0)
    assert rep.pieces >= 5 and rep.added == rep.pieces + 1 == store.count()
    got = store.collection.get(include=["documents", "metadatas"])
    tok = tokenizer_of(embedder)
    assert all(_ntok(tok, d) <= 200 for d in got["documents"])
    assert {m["title"] for m in got["metadatas"]} == {"Short", "Long"}
    again = ingest(store, passages=[short, long], max_passage_tokens=200, progress=False)
    assert (again.added, again.already_present) == (0, rep.added)

    other = ChromaStore("trunc", path=tmp_path / "db", embedder=embedder)
    rep = ingest(
        other, passages=[short, long], max_passage_tokens=200, long_passages="truncate", progress=False
    )
    assert (rep.truncated, rep.split, rep.added) == (1, 0, 2)
    doc = other.collection.get(where={"title": "Long"}, include=["documents"])["documents"][0]
    assert long_text.startswith(doc) and _ntok(tok, doc) <= 200
    with pytest.raises(ValueError, match="long-passage mode 'drop'"):
        PassageLimit(tok, 100, "drop")  # type: ignore[arg-type]


# Runs the CLI, then reports the process's own peak RSS. wait4's ru_maxrss cannot be used: the
# kernel folds the forked (or vforked) pytest image into it at exec, so it read 3.98 GiB in the
# suite when the parent was that large. VmHWM belongs to the exec'd address space alone.
_CLI_WITH_PEAK = (
    "import sys\n"
    "from parallelsearch.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "status = open('/proc/self/status').read()\n"
    "print('VmHWM_kB', status.split('VmHWM:')[1].split()[0], file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def test_a_huge_line_is_truncated_in_bounded_memory(tmp_path, long_text):
    """A 30 MB line (one passage): without the budget, the tokenizer and Chroma took all of it
    (a 50 MB line took 7.3 GB); now the CLI stores its first piece, says so, and the child's
    own peak RSS stays far below that."""
    corpus = tmp_path / "huge.jsonl"
    reps = 30_000_000 // len(long_text) + 1
    with corpus.open("w") as f:
        f.write(json.dumps({"title": "Normal", "text": "An ordinary paragraph."}) + "\n")
        f.write(json.dumps({"title": "Huge", "text": " ".join([long_text] * reps)}) + "\n")
    assert corpus.stat().st_size > 30_000_000
    env = dict(os.environ, PARALLELSEARCH_HOME=str(tmp_path / "home"))
    cmd = [sys.executable, "-c", _CLI_WITH_PEAK, "index", "--store", "huge", str(corpus),
           "--long-passages", "truncate", "--max-passage-tokens", "128", "--no-progress"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "truncated 1" in done.stdout and "added 2" in done.stdout
    docs = make_client(tmp_path / "home" / "chroma").get_collection("huge").get(include=["documents"])
    assert max(len(d) for d in docs["documents"]) < 128 * 12
    peak_gib = int(done.stderr.split("VmHWM_kB")[1].split()[0]) / 2**20
    # Without the budget a 30 MB line needs ~4.5 GiB more than the CLI's ~1 GiB (measured:
    # +1.55 GiB for 10 MB). With it, 0.9 GiB (torch) / 1.2 GiB (ONNX, export included) was measured.
    assert peak_gib < 3.0, f"peak RSS {peak_gib:.2f} GiB"


# ---- a rerun adds nothing: splitting depends on the passage and the settings only -----------------
NASHVILLE = "Nashville Terminal Subdivision"


@pytest.fixture(scope="module")
def corpus_with_a_long_passage(tmp_path_factory) -> Path:
    """Twelve real HotpotQA paragraphs, then the over-long one (about 7,800 characters) of the
    1,201-paragraph run that stored its text twice: read after chunks were encoded, as there."""
    from conftest import RAW

    path = RAW / "hotpotqa" / "ayvan180_infodecay" / "hotpotqa_dev_500.jsonl"
    if not path.is_file():
        pytest.skip(f"benchmark file {path} is missing")
    short, long = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        ctx = json.loads(line)["context"]
        for title, sents in zip(ctx["title"], ctx["sentences"], strict=True):
            text = "".join(sents)
            if title == NASHVILLE:
                long = {"title": title, "text": text}
            elif len(short) < 12 and len(text) < 600:
                short.append({"title": title, "text": text})
        if long and len(short) == 12:
            break
    assert long is not None and len(long["text"]) > 7000
    out = tmp_path_factory.mktemp("long") / "corpus.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in [*short, long]), encoding="utf-8")
    return out


def _index_in_a_fresh_process(home, corpus, *extra: str) -> str:
    env = dict(os.environ, PARALLELSEARCH_HOME=str(home), HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "parallelsearch.cli", "index", "--store", "long", str(corpus),
           "--chunk-size", "4", "--batch-size", "4", "--no-progress", *extra]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_a_rerun_adds_nothing_in_a_fresh_process_and_with_another_backend(
    tmp_path, corpus_with_a_long_passage
):
    """The encoder's tokenizer keeps the truncation of its last call: measured with it, the long
    passage was cut into 4 pieces after a chunk had been encoded, into 5 in a run that encoded
    nothing first, and the rerun stored its text twice (13 + 4 -> 13 + 4 + 5)."""
    home = tmp_path / "home"
    first = _index_in_a_fresh_process(home, corpus_with_a_long_passage)
    pieces_said = first.split("over-long passages split 1 (into ")[1].split(")")[0]
    total = int(first.rsplit("total ", 1)[1])
    assert f"added {total}," in first and total == 12 + int(pieces_said)
    for extra in ((), ("--encoder-backend", "torch")):  # the same command again, then another engine
        again = _index_in_a_fresh_process(home, corpus_with_a_long_passage, *extra)
        assert f"added 0, already present {total}," in again, again
        assert f"split 1 (into {pieces_said})" in again and again.rstrip().endswith(f"total {total}")
    from parallelsearch.stores.chroma_store import make_client

    got = make_client(home / "chroma").get_collection("long").get(where={"title": NASHVILLE}, include=[])
    parent = Passage.make(
        NASHVILLE, json.loads(corpus_with_a_long_passage.read_text().splitlines()[-1])["text"]
    )
    assert sorted(got["ids"]) == sorted(f"{parent.id}#512.{i}" for i in range(int(pieces_said)))


def test_the_cut_does_not_depend_on_what_the_encoder_did_before(embedder, corpus_with_a_long_passage):
    long = json.loads(corpus_with_a_long_passage.read_text().splitlines()[-1])
    passage = Passage.make(long["title"], long["text"])
    cut = [p.id for p in PassageLimit(tokenizer_of(embedder), 512).apply([passage])]
    embedder.encode_passages(["a short text to leave the tokenizer truncating"])  # what indexing does
    assert [p.id for p in PassageLimit(tokenizer_of(embedder), 512).apply([passage])] == cut
    assert len(cut) > 1 and all(i.startswith(f"{passage.id}#512.") for i in cut)


def test_verify_reports_passages_stored_twice(tmp_path, capsys, embedder, long_text):
    """A passage split under two budgets (what a rerun that split differently left, before stores
    recorded their budget) is reported."""
    from parallelsearch.cli import main
    from parallelsearch.graphs.factory import make_store
    from parallelsearch.settings import get_settings

    cfg = get_settings().retrieval()
    store = make_store(cfg, "twice", create=True, embedder=embedder)
    long = Passage.make("Long", long_text)
    ingest(
        store, passages=[long, Passage.make("Short", "A short one.")], max_passage_tokens=300, progress=False
    )
    # what a version that recorded no budget left after a rerun with another one (ingest refuses it)
    store.upsert(list(PassageLimit(tokenizer_of(embedder), 200).apply([long])))
    del store
    assert main(["index", "--store", "twice", "--verify", "--no-progress"]) == 0
    out = capsys.readouterr()
    assert "stored twice" in out.out and f"{long.id}#200.0={long.id}#300.0" in out.out  # shorter first
    assert "warning: store twice holds passages stored twice" in out.err
    assert main(["stores", "--check", "twice", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["ok"] and found["duplicates"] and all(len(g) >= 2 for g in found["duplicates"])


def test_another_budget_on_a_split_store_is_refused_and_verify_says_which(
    tmp_path, capsys, corpus_with_a_long_passage
):
    """Piece ids carry the budget: a rerun with a smaller one stored every long passage a second
    time (80 entries became 247). The store records its budget; another is refused, naming both."""
    from parallelsearch.cli import main

    corpus = str(corpus_with_a_long_passage)
    args = ["index", "--store", "budget", corpus, "--no-progress"]
    assert main(args) == 0
    total = int(capsys.readouterr().out.rsplit("total ", 1)[1])
    assert main([*args, "--max-passage-tokens", "128"]) == 2
    err = capsys.readouterr().err
    assert (
        "store budget was split with --max-passage-tokens 512, this run asks for --max-passage-tokens 128"
        in err
    ), err
    assert "Rerun with --max-passage-tokens 512" in err
    assert "parallelsearch index --store budget-new --max-passage-tokens 128 FILES" in err
    verify = ["index", "--store", "budget", "--verify", "--no-progress"]
    assert main([*verify, "--max-passage-tokens", "128", corpus]) == 2
    assert "this run asks for --max-passage-tokens 128" in capsys.readouterr().err
    assert main([*verify, corpus]) == 0
    out = capsys.readouterr().out
    assert "was split with --max-passage-tokens 512, as this run asks: nothing is split again" in out
    assert f"added 0, already present {total}," in out and out.rstrip().endswith(f"total {total}")
