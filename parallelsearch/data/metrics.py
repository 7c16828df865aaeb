"""Answer metrics shared by the rewards and the evaluation harness (one module, as in FlashRAG).

Every metric scores one prediction against the best-matching of any number of gold answers,
both normalised as SQuAD does.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (SQuAD's normalisation)."""
    text = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _golds(golden_answers: str | Iterable[str] | None) -> list[str]:
    if golden_answers is None:
        return []
    if isinstance(golden_answers, str):
        return [golden_answers]
    return [str(g) for g in golden_answers]


def exact_match(prediction: str | None, golden_answers: str | Iterable[str] | None) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(golden_answers)))


def cover_match(prediction: str | None, golden_answers: str | Iterable[str] | None) -> float:
    """Cover-EM ("acc" in FlashRAG): a normalised gold answer occurs, as whole words, in the prediction."""
    return 0.0 if prediction is None else float(answer_in_text(prediction, golden_answers))


def f1_score(prediction: str | None, golden_answers: str | Iterable[str] | None) -> float:
    """Token-level F1 against the best gold answer (yes/no/noanswer must match exactly, as in HotpotQA)."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    best = 0.0
    for gold in _golds(golden_answers):
        g = normalize_answer(gold)
        if pred in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer"):
            best = max(best, float(pred == g))
            continue
        p_toks, g_toks = pred.split(), g.split()
        common = Counter(p_toks) & Counter(g_toks)
        same = sum(common.values())
        if same == 0:
            continue
        precision, recall = same / len(p_toks), same / len(g_toks)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def answer_in_text(text: str, golden_answers: str | Iterable[str] | None) -> bool:
    """A normalised gold answer occurs in the normalised text (retrieval coverage)."""
    hay = f" {normalize_answer(text)} "
    return any(f" {normalize_answer(g)} " in hay for g in _golds(golden_answers) if normalize_answer(g))
