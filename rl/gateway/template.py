"""The chat template as the gateway uses it: the first request rendered whole, every later
message rendered as a suffix against a fixed base conversation, with the template's boundary
tokens after the assistant's end-of-turn (``tool_text_observation`` writes the same text), so
the tokens the engine generated are never rendered or tokenised again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from parallelsearch.rl.gateway.errors import GatewayError

#: the fixed conversation new messages are rendered after: a user turn and a closed assistant turn
_BASE: tuple[dict[str, Any], ...] = (
    {"role": "user", "content": "base"},
    {"role": "assistant", "content": "base"},
)


class ChatTemplate:
    """A tokenizer's chat template, read once: its end-of-turn text (the tokenizer's EOS, e.g.
    ``<|im_end|>``) and what the template writes after it (``\\n`` in ChatML)."""

    def __init__(self, tokenizer: Any):
        if not getattr(tokenizer, "chat_template", None):
            raise GatewayError(500, "the tokenizer has no chat_template: the gateway renders chat messages")
        self.tokenizer = tokenizer
        self.end = str(tokenizer.eos_token or "")
        self.end_id = tokenizer.eos_token_id
        if not self.end:
            raise GatewayError(500, "the tokenizer has no eos_token: the gateway needs the end-of-turn token")
        base = self.render(list(_BASE), None, generation=False)
        at = base.rfind(self.end)
        if at < 0:
            raise GatewayError(500, f"the chat template does not end an assistant turn with {self.end!r}")
        self.trailer = base[at + len(self.end) :]

    def render(self, messages: Sequence[dict[str, Any]], tools: Any, *, generation: bool = True) -> str:
        """The template's text of ``messages`` (and ``tools``), with the assistant header when
        ``generation``."""
        return self.tokenizer.apply_chat_template(
            list(messages), tools=tools or None, add_generation_prompt=generation, tokenize=False
        )

    def suffix(self, messages: Sequence[dict[str, Any]], tools: Any, *, closed: bool) -> str:
        """The text that follows a generated turn for the new ``messages``: the end-of-turn when
        the turn was cut before it (``closed`` False), the template's boundary after it, the new
        messages and the next assistant header."""
        base = self.render(list(_BASE), tools, generation=False)
        full = self.render([*_BASE, *messages], tools, generation=True)
        if not full.startswith(base):
            roles = ", ".join(str(m.get("role")) for m in messages)
            raise GatewayError(
                500, f"the chat template re-renders earlier messages when {roles} follow: not append-only"
            )
        return ("" if closed else self.end) + self.trailer + full[len(base) :]

    def digest(self) -> str:
        """The template's sha256: what the job folder records, so a run names the template it used."""
        return hashlib.sha256(str(self.tokenizer.chat_template).encode("utf-8")).hexdigest()
