"""Shared fixtures: real benchmark files from ../shared/data, a real embedded Chroma store,
and loopback HTTP servers. Tests never touch ../shared/data/holdout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("PARALLELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
RAW = DATA / "raw"

# openrlhf installs a top-level `tests` package into site-packages; our test modules are
# loaded with --import-mode=importlib and helpers are imported from this folder by path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

needs_data = pytest.mark.skipif(not RAW.is_dir(), reason=f"benchmark data folder {RAW} is missing")


from parallelsearch.loopback import LoopbackServer as UvicornThread  # noqa: E402
from parallelsearch.loopback import free_port  # noqa: E402

__all__ = ["UvicornThread", "free_port"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own settings home, so no test sees another's stores."""
    monkeypatch.setenv("PARALLELSEARCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PARALLELSEARCH_CONFIG", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def embedder():
    from parallelsearch.stores import get_embedder

    return get_embedder()


@pytest.fixture(scope="session")
def hotpot_comparison_file() -> Path:
    path = RAW / "hotpotqa" / "nakulbh_Meve-framework" / "hotpot_dev_distractor_v1.json"
    if not path.is_file():
        pytest.skip(f"benchmark file {path} is missing")
    return path


@pytest.fixture(scope="session")
def hotpot_questions(hotpot_comparison_file):
    """The first 20 questions of a real HotpotQA dev-distractor file (FlashRAG records)."""
    from parallelsearch.data import load_questions

    return load_questions(hotpot_comparison_file)[:20]


@pytest.fixture(scope="session")
def hotpot_store(tmp_path_factory, embedder, hotpot_comparison_file):
    """A real embedded Chroma store holding the context paragraphs of 20 HotpotQA questions."""
    import json

    from parallelsearch.stores import ChromaStore, ingest

    recs = json.loads(hotpot_comparison_file.read_text())[:20]
    small = tmp_path_factory.mktemp("hp") / "hotpot20.json"
    small.write_text(json.dumps(recs))
    store = ChromaStore("hotpot", path=tmp_path_factory.mktemp("chroma"), embedder=embedder)
    ingest(store, [small], progress=False)
    return store


TINY_LM_QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"


@pytest.fixture(scope="session")
def tiny_lm():
    """A randomly initialised Llama-style model with a tokenizer trained here (tokenizers package)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    corpus = [
        "<think> </think> <search> </search> <answer> </answer> <information> ## Doc Title",
        TINY_LM_QUESTION,
    ] * 50
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<unk>", "<eos>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    from tokenizers import decoders

    tok.decoder = decoders.ByteLevel()
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        eos_token="<eos>",
        pad_token="<eos>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    import torch

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.eos_token_id,
    )
    return LlamaForCausalLM(cfg), hf_tok


def pytest_terminal_summary(terminalreporter):
    """The serving tier's timings and artefacts (tests/serving.py), when it ran."""
    serving = sys.modules.get("serving")
    if serving is None or not (serving.TIMINGS or serving.ARTIFACT_FILES):
        return
    terminalreporter.section("serving tier")
    for what, seconds in serving.TIMINGS:
        terminalreporter.write_line(f"{seconds:7.1f} s  {what}")
    for path in serving.ARTIFACT_FILES:
        terminalreporter.write_line(f"artefact: {path}")
