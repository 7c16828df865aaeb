"""Text that can be encoded: lone surrogates (invalid Unicode) replaced, and counted.

Python strings may hold lone surrogates (``"\\ud800"``): ``json.loads`` makes them from
``\\ud800`` escapes and ``sys.argv`` from undecodable bytes (surrogateescape). They cannot
be encoded as UTF-8, so a tokenizer, an HTTP client or Chroma raises on them far from where
they came in. Inputs are cleaned where they enter (CLI arguments, indexed records, the
observations of the OpenRLHF executor): each lone surrogate becomes U+FFFD, and the count
is reported.
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
