"""A token budget per passage: over-long passages are split into pieces or truncated.

Without one, a 50 MB line was accepted whole and took 7.3 GB: the tokenizer turns the whole
text into ids and offsets before the model truncates it to its window, and Chroma stores the
text. Here a passage longer than ``max_tokens`` is cut into pieces of at most ``max_tokens``
tokens (``split``: every piece becomes its own passage, with the title, so all of the text
stays searchable) or keeps its first piece (``truncate``). The tokenizer only ever sees a
window of ``max_tokens * WINDOW_CHARS_PER_TOKEN`` characters, so memory stays bounded
whatever the line's size. Pieces end at token boundaries, never inside a word piece.

Every piece is a new passage whose id is the content hash of its title and text (as for
any passage read from a file), so re-running the same ingestion adds nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from parallelsearch.stores.passages import Passage

Mode = Literal["split", "truncate"]
MODES: tuple[str, ...] = ("split", "truncate")
#: default budget: above all-MiniLM-L6-v2's 256-token window, so no paragraph of the shipped
#: benchmarks is cut, and far below what makes a line a memory problem
DEFAULT_MAX_TOKENS = 512
#: the tokenizer sees at most this many characters per budgeted token at a time (English
#: word pieces average ~4-5 characters; a window with fewer tokens than the budget is cut
#: at its last token boundary and the next window goes on from there)
WINDOW_CHARS_PER_TOKEN = 12


@dataclass
class LimitCounts:
    truncated: int = 0  # passages cut to their first piece
    split: int = 0  # passages cut into several
    pieces: int = 0  # passages the split ones became


def _starts(tokenizer: Any, text: str) -> list[int]:
    """Start character of every token of ``text`` (no special tokens).

    A fast tokenizer's own backend is called directly: the same offsets, without the
    transformers wrapper's "longer than the maximum sequence length" warning (the windows
    here are longer than the model's on purpose, and never reach the model).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return [start for start, _end in backend.encode(text, add_special_tokens=False).offsets]
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False)
    return [start for start, _end in enc["offset_mapping"]]


def _word_end(seg: str, cut: int) -> int:
    """``cut`` moved back to the last whitespace before it, so a word is not cut into pieces
    (a prefix that ends at whitespace has a prefix of the tokens, so the budget still holds);
    kept where no whitespace lies in the second half of the piece."""
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
    """Applies a token budget to a stream of passages and counts what it cut."""

    def __init__(self, tokenizer: Any, max_tokens: int = DEFAULT_MAX_TOKENS, mode: Mode = "split") -> None:
        if max_tokens < 8:
            raise ValueError(f"the passage token budget must be >= 8, got {max_tokens}")
        if mode not in MODES:
            raise ValueError(f"long-passage mode {mode!r} is not one of {', '.join(MODES)}")
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.mode = mode
        self.counts = LimitCounts()

    def apply(self, passages: Iterable[Passage]) -> Iterator[Passage]:
        for p in passages:
            if not needs_cut(p.text, self.max_tokens, self.tokenizer):
                yield p
                continue
            parts = pieces(p.text, self.max_tokens, self.tokenizer)
            if self.mode == "truncate":
                self.counts.truncated += 1
                yield Passage.make(p.title, next(parts, ""), source=p.source)
                continue
            n = 0
            for part in parts:
                n += 1
                yield Passage.make(p.title, part, source=p.source)
            if n > 1:
                self.counts.split += 1
                self.counts.pieces += n


def tokenizer_of(embedder: Any) -> Any:
    """The embedder's tokenizer (sentence-transformers keeps it on the model)."""
    model = getattr(embedder, "_model", None)
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise RuntimeError(f"embedder {getattr(embedder, 'model_name', embedder)!r} exposes no tokenizer")
    return tok
