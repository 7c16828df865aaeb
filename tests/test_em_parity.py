"""The project's EM and F1 agree with the field's reference scorers on real answers.

The reference code below is a pinned transcription (kept in this test, never in the package):

- ``_ref_normalize`` and ``_ref_em_check``: Search-R1, ``verl/utils/reward_score/qa_em.py``
  (github.com/PeterGriffinJin/Search-R1, commit a14dc3a4ffc6fe88c1e95038d9738e21ba3f7a06,
  ``normalize_answer`` and ``em_check``); FlashRAG's ``flashrag/evaluator/utils.py``
  ``normalize_answer`` is the same text (github.com/RUC-NLPIR/FlashRAG, commit 4912623826c1).
- ``_ref_f1``: FlashRAG ``flashrag/evaluator/metrics.py`` ``F1_Score.token_level_scores``
  (commit 084402876042), its ``f1`` value.

The pairs: every gold answer of the shared data's raw benchmark files (never holdout/), each
scored as itself and as cased, punctuated, article-prefixed, unicode and wrong variants against
its question's gold list.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter

from conftest import RAW, needs_data

from parallelsearch.data import load_questions
from parallelsearch.data.metrics import exact_match, f1_score


def _ref_normalize(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def _ref_em_check(prediction, golden_answers):
    if isinstance(golden_answers, str):
        golden_answers = [golden_answers]
    normalized_prediction = _ref_normalize(prediction)
    score = 0
    for golden_answer in golden_answers:
        golden_answer = _ref_normalize(golden_answer)
        if golden_answer == normalized_prediction:
            score = 1
            break
    return score


def _ref_f1(prediction, ground_truths):
    final_metric = {"f1": 0, "precision": 0, "recall": 0}
    if isinstance(ground_truths, str):
        ground_truths = [ground_truths]
    for ground_truth in ground_truths:
        normalized_prediction = _ref_normalize(prediction)
        normalized_ground_truth = _ref_normalize(ground_truth)
        if (
            normalized_prediction in ["yes", "no", "noanswer"]
            and normalized_prediction != normalized_ground_truth
        ):
            continue
        if (
            normalized_ground_truth in ["yes", "no", "noanswer"]
            and normalized_prediction != normalized_ground_truth
        ):
            continue
        prediction_tokens = normalized_prediction.split()
        ground_truth_tokens = normalized_ground_truth.split()
        common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
        num_same = sum(common.values())
        if num_same == 0:
            continue
        precision = 1.0 * num_same / len(prediction_tokens)
        recall = 1.0 * num_same / len(ground_truth_tokens)
        f1 = (2 * precision * recall) / (precision + recall)
        final_metric["f1"] = max(f1, final_metric["f1"])
    return final_metric["f1"]


#: one file per dataset, the raw copies (holdout/ is never read here)
_FILES = {
    "hotpotqa": "hotpotqa/hahahajw_Agentic-RAG/HotpotQA_500_benchmark.json",
    "2wikimultihopqa": "2wikimultihopqa/hahahajw_Agentic-RAG/2WikiMultihopQA_500_benchmark.json",
    "musique": "musique/AdelWang_MIGRES/musique.json",
    "bamboogle": "bamboogle/GaurisankarJ_reason_over_search/test.jsonl",
    "nq": "nq/GaurisankarJ_reason_over_search/test.jsonl",
    "triviaqa": "triviaqa/GaurisankarJ_reason_over_search/test.jsonl",
    "popqa": "popqa/GaurisankarJ_reason_over_search/test.jsonl",
}


def _variants(gold: str, other: str) -> list[str]:
    """What a model writes for ``gold``: itself, cased, punctuated, with an article, in unicode
    spellings (accents decomposed, curly quotes, no-break and ideographic spaces, full width),
    a part of it, more than it, a yes/no, and another question's answer."""
    words = gold.split()
    return [
        gold,
        gold.upper(),
        gold.title(),
        f"The {gold}.",
        f"an {gold}!",
        f'"{gold}"',
        f"  {gold} ,",
        gold.replace("'", "\u2019").replace(" ", "\u00a0"),
        unicodedata.normalize("NFKD", gold),
        gold.replace(" ", "\u3000"),
        "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in gold),
        f"{gold}\u2014the answer",
        words[0] if words else "",
        f"{gold} and {other}",
        "yes",
        "No.",
        other,
        "",
    ]


def _pairs() -> list[tuple[str, list[str]]]:
    pairs = []
    for rel in _FILES.values():
        questions = load_questions(RAW / rel)
        golds = [list(q["golden_answers"]) for q in questions]
        for i, answers in enumerate(golds):
            other = golds[(i + 7) % len(golds)][0]
            pairs += [(p, answers) for p in _variants(answers[0], other)]
    return pairs


@needs_data
def test_em_and_f1_agree_with_the_reference_on_every_pair():
    pairs = _pairs()
    em_off = [(p, g) for p, g in pairs if exact_match(p, g) != _ref_em_check(p, g)]
    f1_off = [(p, g) for p, g in pairs if abs(f1_score(p, g) - _ref_f1(p, g)) > 1e-12]
    assert len(pairs) >= 1000, len(pairs)
    hits = sum(_ref_em_check(p, g) for p, g in pairs)
    assert 0.1 * len(pairs) < hits < 0.9 * len(pairs), hits  # the variants both match and miss
    assert em_off == [], f"{len(em_off)} of {len(pairs)} EM disagreements, first: {em_off[:5]}"
    assert f1_off == [], f"{len(f1_off)} of {len(pairs)} F1 disagreements, first: {f1_off[:5]}"
