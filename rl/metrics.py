"""Deprecated (goes in 0.3): the answer metrics live in :mod:`parallelsearch.data.metrics`,
where evaluation and training both import them."""

from __future__ import annotations

import warnings

from parallelsearch.data.metrics import (  # noqa: F401 - re-exported for old imports
    answer_in_text,
    cover_match,
    exact_match,
    f1_score,
    normalize_answer,
)

warnings.warn(
    "parallelsearch.rl.metrics moved to parallelsearch.data.metrics; the old module goes in 0.3",
    DeprecationWarning,
    stacklevel=2,
)
