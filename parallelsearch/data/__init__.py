"""QA data shared by evaluation and training: FlashRAG question records, answer metrics (``.metrics``).

Both ``parallelsearch.eval`` and ``parallelsearch.rl`` import from here, and this package
imports neither (docs/architecture.md, "Layers"); it reads benchmark context with ``stores``.

Internal: the building blocks behind the public API in ``parallelsearch`` (docs/api.md); names here may change without notice.
"""

from parallelsearch.data.metrics import answer_in_text, cover_match, exact_match, f1_score, normalize_answer
from parallelsearch.data.questions import (
    DATASETS,
    PreparedDataset,
    guess_dataset,
    load_questions,
    prepare,
    question_record,
    split_of,
    write_prepared,
)

__all__ = [
    "DATASETS",
    "PreparedDataset",
    "answer_in_text",
    "cover_match",
    "exact_match",
    "f1_score",
    "guess_dataset",
    "load_questions",
    "normalize_answer",
    "prepare",
    "question_record",
    "split_of",
    "write_prepared",
]
