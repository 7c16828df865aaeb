"""The smoke's two checks of what the trainer is handed, each from evidence the thing checked did not make.

- The action mask: OpenRLHF's ``action_mask`` must be 1 exactly on the tokens the engine generated.
  The expected spans come from the engine's own calls, recorded between the executor and the engine
  (:class:`parallelsearch.training.rollouts.RecordingEngine`: what prompt ids each turn was given, what
  ids and text it returned), never from the executor's
  ``action_ranges``; each span decoded must read as the engine's text for that turn, and no token of
  an observation (what lies between one turn's end and the next turn's prompt end) may be in the mask.
- The weight sync: after the actor's weights are synced into the engine, the engine's log-probs of the
  sampled action tokens must equal the actor's (mean absolute difference within :data:`SYNC_TOLERANCE`,
  unconstrained decoding, both fp32). A mask off by one position takes in one token per turn the
  engine did not generate (its log-prob there is 0, the actor's is not), and fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: the largest mean |engine - actor| log-prob (nats) on action tokens that counts as synced
SYNC_TOLERANCE = 0.05


@dataclass
class EngineTurn:
    """One ``generate`` call as the engine saw and answered it."""

    prompt_ids: list[int]
    ids: list[int]
    text: str


@dataclass
class MaskCheck:
    ok: bool
    reason: str
    action_tokens: int = 0
    observation_tokens: int = 0
    spans: list[tuple[int, int]] = field(default_factory=list)  # the engine's turns in the sequence


def _reads_as(decoded: str, text: str, before_last: str | None = None) -> bool:
    """A span decoded reads as the engine's text: equal, or the text followed by what vLLM's text leaves
    out: the rest of the token that completed a stop string (vLLM cuts ``text`` at the stop string, not
    at its token: ``>\n\n`` or ``>.``; ``before_last``, the span without its last token, then decodes to
    less than ``text``, so all the rest is that token's), or, at a length cut, the bytes of an
    unfinished UTF-8 character that its incremental detokenizer still holds back (decoded whole, they
    read as U+FFFD)."""
    if decoded == text:
        return True
    rest = decoded[len(text) :] if decoded.startswith(text) else None
    if rest is None:
        return False
    in_last_token = before_last is not None and len(before_last) < len(text) and text.startswith(before_last)
    return in_last_token or not rest.replace("\ufffd", "").strip()


def _where_they_part(decoded: str, text: str) -> str:
    """Both texts around their first difference, so a failed check names its cause (a dropped special
    token, a space, a character cut) without a rerun."""
    at = next((i for i, (a, b) in enumerate(zip(decoded, text, strict=False)) if a != b), None)
    at = min(len(decoded), len(text)) if at is None else at
    lo = max(0, at - 12)
    return f"at character {at}: decoded {decoded[lo : at + 12]!r}, engine {text[lo : at + 12]!r}"


def token_mismatches(sequence: Sequence[int], turns: Sequence[EngineTurn]) -> int:
    """Tokens of ``sequence`` that differ from what the engine was sent and returned, over every
    recorded turn (the part of a turn past a cut sequence not counted)."""
    seq, bad = list(sequence), 0
    for turn in turns:
        whole = [*turn.prompt_ids, *turn.ids][: len(seq)]
        bad += sum(a != b for a, b in zip(seq, whole, strict=False))
    return bad


def check_action_mask(
    sequence: Sequence[int], action_mask: Sequence[int], turns: Sequence[EngineTurn], tokenizer: Any
) -> MaskCheck:
    """``action_mask`` (OpenRLHF's: ``action_mask[j]`` is token ``j + 1``'s) against the engine's ``turns``."""
    from parallelsearch.rl.episode import decode_tokens

    seq = list(sequence)
    if not turns:
        return MaskCheck(False, "the engine generated nothing")
    expected = [0] * len(seq)
    spans = []
    for k, turn in enumerate(turns):
        a = len(turn.prompt_ids)
        b = min(a + len(turn.ids), len(seq))  # the sample is cut at max_len
        if seq[:a] != turn.prompt_ids:
            return MaskCheck(
                False, f"turn {k + 1}: the engine was prompted with ids the sequence does not start with"
            )
        if seq[a:b] != turn.ids[: b - a]:
            return MaskCheck(False, f"turn {k + 1}: tokens {a}..{b} are not the ids the engine returned")
        whole = b - a == len(turn.ids)
        decoded = decode_tokens(tokenizer, seq[a:b]) if whole else turn.text
        before_last = decode_tokens(tokenizer, seq[a : b - 1]) if whole and decoded != turn.text else None
        if not _reads_as(decoded, turn.text, before_last):
            where = _where_they_part(decoded, turn.text)
            return MaskCheck(
                False, f"turn {k + 1}: tokens {a}..{b} do not decode to the engine's text ({where})"
            )
        expected[a:b] = [1] * (b - a)
        spans.append((a, b))
    got = [int(bool(x)) for x in action_mask]
    if len(got) != len(seq) - 1:
        return MaskCheck(
            False, f"action_mask has {len(got)} entries for {len(seq)} tokens (expected one fewer)"
        )
    observation = [j for j in range(spans[0][0], len(seq)) if not expected[j]]
    leaked = [j for j in observation if got[j - 1]]
    if leaked:
        return MaskCheck(
            False, f"{len(leaked)} observation token(s) in the action mask, first at {leaked[0]}"
        )
    differs = next((j for j in range(1, len(seq)) if got[j - 1] != expected[j]), None)
    if differs is not None:
        return MaskCheck(False, f"action_mask differs from the engine's turns at token {differs}")
    return MaskCheck(True, "ok", sum(b - a for a, b in spans), len(observation), spans)


def check_sample(
    sequence: Sequence[int],
    action_mask: Sequence[int],
    turns: Sequence[EngineTurn],
    tokenizer: Any,
    *,
    failed_closed: bool = False,
) -> tuple[str | None, int]:
    """(why the sample fails its checks or None, its token mismatches). A failed-closed sample (a
    gateway fork: its later turns were generated from another render, so its ids are not the engine's
    calls by design) carries no loss but the one token that keeps OpenRLHF's per-sample means finite
    (``failed_closed_ranges``), and is checked for that only."""
    if failed_closed:
        kept = sum(1 for x in action_mask if x)
        return (
            f"a failed-closed episode has {kept} tokens in its action mask (at most 1)" if kept > 1 else None
        ), 0
    mc = check_action_mask(sequence, action_mask, turns, tokenizer)
    return (None if mc.ok else mc.reason), token_mismatches(sequence, turns)


def logprob_gap(actor_log_probs: Any, rollout_log_probs: Any, action_mask: Any) -> float:
    """Mean |engine - actor| log-prob over the tokens ``action_mask`` marks (OpenRLHF's shifted layout)."""
    mask = action_mask.bool()
    if not bool(mask.any()):
        raise ValueError("no action tokens to compare")
    return float((actor_log_probs.detach().float() - rollout_log_probs.float())[mask].abs().mean())


def shifted(action_mask: Any, by: int = 1) -> Any:
    """``action_mask`` moved ``by`` positions right (an off-by-one of the spans), for the negative check."""
    import torch

    out = torch.zeros_like(action_mask)
    out[..., by:] = action_mask[..., :-by]
    return out
