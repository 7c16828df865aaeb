"""Text that can be encoded: lone surrogates (invalid Unicode) replaced, and counted.

``json.loads`` and ``sys.argv`` can make strings that cannot be encoded as UTF-8, so a tokenizer,
an HTTP client or Chroma would raise far from where they came in; inputs are cleaned where they
enter (CLI arguments, indexed records, the executor's observations), the count reported.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub_text(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate replaced by U+FFFD, and how many were replaced."""
    try:
        text.encode("utf-8")
        return text, 0
    except UnicodeEncodeError:
        return _SURROGATE.subn(REPLACEMENT, text)
