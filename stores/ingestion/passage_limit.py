"""A token budget per passage: over-long passages are split into pieces or truncated.

Without one, a 50 MB line took gigabytes (docs/scaling.md): the tokenizer makes ids and offsets
of the whole text before the model truncates it. A passage over ``max_tokens`` is cut at token
boundaries into pieces (``split``: each its own passage with the title, all searchable) or keeps
its first piece (``truncate``); the tokenizer only sees windows of ``max_tokens *
WINDOW_CHARS_PER_TOKEN`` characters, so memory stays bounded. Where a passage is cut depends only
on its text, the budget and the model's vocabulary (a private tokenizer without truncation, not the
encoder's, whose last call leaves its truncation set), and a piece's id is the passage's id with
the budget and the piece's position, so a rerun finds every piece it stored and adds nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from parallelsearch.stores.errors import check_choice
from parallelsearch.stores.passages import Passage

Mode = Literal["split", "truncate"]
MODES: tuple[str, ...] = ("split", "truncate")
#: default budget: above all-MiniLM-L6-v2's 256-token window, so no paragraph of the shipped
#: benchmarks is cut, and far below what makes a line a memory problem
DEFAULT_MAX_TOKENS = 512
#: characters per budgeted token the tokenizer sees at a time (English word pieces average ~4-5)
WINDOW_CHARS_PER_TOKEN = 12


@dataclass
class LimitCounts:
    truncated: int = 0  # passages cut to their first piece
    split: int = 0  # passages cut into several
    pieces: int = 0  # passages the split ones became


def untruncated(tokenizer: Any) -> Any:
    """What passages are measured with: for a fast tokenizer, a private copy of its Rust backend
    with truncation and padding off. The encoder's own backend keeps the truncation of its last
    call (sentence-transformers truncates to the model's window), so measuring with it cut a
    passage in other places once anything had been encoded in the process. A slow tokenizer is
    called with ``truncation=False`` each time (it keeps no such state)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return tokenizer
    from tokenizers import Tokenizer

    own = Tokenizer.from_str(backend.to_str())
    own.no_truncation()
    own.no_padding()
    return own


def _starts(tokenizer: Any, text: str) -> list[int]:
    """Start character of every token of ``text`` (no special tokens); ``tokenizer``: what
    :func:`untruncated` returned (a Rust backend is called directly, without the wrapper's
    "longer than the maximum sequence length" warning)."""
    if hasattr(tokenizer, "encode_batch"):  # a tokenizers.Tokenizer
        return [start for start, _end in tokenizer.encode(text, add_special_tokens=False).offsets]
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False)
    return [start for start, _end in enc["offset_mapping"]]


def piece_id(passage_id: str, max_tokens: int, index: int) -> str:
    """The id of piece ``index`` (0-based) of a passage cut to ``max_tokens``: the passage's own id,
    the budget and the position, so the same passage and budget always give the same ids."""
    return f"{passage_id}#{max_tokens}.{index}"


def _word_end(seg: str, cut: int) -> int:
    """``cut`` moved back to the last whitespace in the second half of ``seg``, so no word is cut."""
    space = max(seg.rfind(" ", 0, cut), seg.rfind("\n", 0, cut))
    return space if space > cut // 2 else cut


def pieces(text: str, max_tokens: int, tokenizer: Any) -> Iterator[str]:
    """Consecutive pieces of ``text`` of at most ``max_tokens`` tokens each (bounded windows)."""
    window = max_tokens * WINDOW_CHARS_PER_TOKEN
    pos, n = 0, len(text)
    while pos < n:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n:
            return
        if n - pos <= max_tokens:  # a word piece covers >= 1 character: this rest fits
            yield text[pos:]
            return
        seg = text[pos : pos + window]
        starts = _starts(tokenizer, seg)
        if len(starts) > max_tokens:
            cut = _word_end(seg, starts[max_tokens])
        elif pos + window >= n:
            yield seg.strip()
            return
        else:  # the window ran out before the budget: end at its last token boundary
            cut = _word_end(seg, starts[-1]) if len(starts) > 1 and starts[-1] > 0 else len(seg)
        piece = seg[:cut].strip()
        if piece:
            yield piece
        pos += cut


def needs_cut(text: str, max_tokens: int, tokenizer: Any) -> bool:
    """Whether ``text`` has more than ``max_tokens`` tokens (cheap for short texts)."""
    if len(text) <= max_tokens:
        return False
    seg = text[: max_tokens * WINDOW_CHARS_PER_TOKEN]
    return len(seg) < len(text) or len(_starts(tokenizer, seg)) > max_tokens


class PassageLimit:
    """Applies a token budget to a stream of passages and counts what it cut (into ``counts``: a
    :class:`LimitCounts`, or anything with its three fields, such as an ingestion report)."""

    def __init__(
        self, tokenizer: Any, max_tokens: int = DEFAULT_MAX_TOKENS, mode: Mode = "split", counts: Any = None
    ) -> None:
        if max_tokens < 8:
            raise ValueError(f"the passage token budget must be >= 8, got {max_tokens}")
        check_choice(mode, MODES, "long-passage mode")
        self.tokenizer = untruncated(tokenizer)
        self.max_tokens = max_tokens
        self.mode = mode
        self.counts = LimitCounts() if counts is None else counts

    def apply(self, passages: Iterable[Passage]) -> Iterator[Passage]:
        for p in passages:
            if not needs_cut(p.text, self.max_tokens, self.tokenizer):
                yield p
                continue
            parts = pieces(p.text, self.max_tokens, self.tokenizer)
            if self.mode == "truncate":
                self.counts.truncated += 1
                yield self._piece(p, 0, next(parts, ""))
                continue
            n = 0
            for n, part in enumerate(parts, 1):
                yield self._piece(p, n - 1, part)
            if n > 1:
                self.counts.split += 1
                self.counts.pieces += n

    def _piece(self, p: Passage, index: int, text: str) -> Passage:
        return Passage(piece_id(p.id, self.max_tokens, index), p.title, text.strip(), source=p.source)


def tokenizer_of(embedder: Any) -> Any:
    """The embedder's tokenizer (sentence-transformers keeps it on the model)."""
    model = getattr(embedder, "_model", None)
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise RuntimeError(f"embedder {getattr(embedder, 'model_name', embedder)!r} exposes no tokenizer")
    return tok
