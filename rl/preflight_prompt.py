"""The pre-flight error and the check every executor runs on its first prompt: kept apart from
:mod:`parallelsearch.rl.preflight` (which reaches the retriever, the tokenizer and the gateway
agent) so an executor depends on this one check only."""

from __future__ import annotations

from parallelsearch.rl.preflight_budget import ASSISTANT_MARKER
from parallelsearch.rl.preflight_data import check_template_reward
from parallelsearch.stores.errors import ParallelSearchError


class PreflightError(ParallelSearchError, RuntimeError):
    """A training run would fail (or train on garbage) for the named cause."""


def check_episode_prompt(mode: str, prompt: str) -> None:
    """What each executor checks on its first prompt, as OpenRLHF hands it over (chat-templated or
    not): the ``official`` reward needs ChatML's assistant marker and the official template's own
    ``<search>``/``<answer>`` counts. Raises :class:`PreflightError` naming the fix."""
    if mode != "official":
        return
    if ASSISTANT_MARKER not in prompt:
        raise PreflightError(
            f"reward mode official scores what follows '{ASSISTANT_MARKER}', which the prompts lack (a chat "
            "template other than ChatML, or apply_chat_template off): every episode would fail the format; "
            "set agent.reward.mode=paper-strict"
        )
    try:
        check_template_reward(mode, [{"prompt": prompt, "label": "{}"}], "prompt", "label")
    except ValueError as e:
        raise PreflightError(str(e)) from e
