"""``learning.json``: what the learning smoke measured, the goals it checks, and the lines it prints."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from parallelsearch.training.checks import SYNC_TOLERANCE
from parallelsearch.training.learning_loop import LearnSettings, LearnState, rise

#: the run's goals: the held-out rise at least this and at least this many standard errors; the
#: control's change under this many, in either direction
MIN_RISE = 0.15
MIN_RISE_SE = 3.0
MAX_CONTROL_SE = 1.0
#: a real model's warm start: the share of held-out turns that must be valid actions after SFT
WARM_VALID_TURNS = 0.95


def learning_record(state: LearnState, settings: LearnSettings, config: dict[str, Any]) -> dict[str, Any]:
    """``learning.json``'s content: the headline fields first, then the evidence behind them."""
    ev = state.evaluations
    record: dict[str, Any] = {
        "mode": config.get("mode", "text"),
        "episodes": state.mask_checked,
        "token_mismatches": state.token_mismatches,
        "forks": int(state.gateway.get("gateway_forks", 0)),
        "retokenized": int(state.gateway.get("gateway_retokenized", 0)),
        "failed_closed": int(state.gateway.get("gateway_failed_closed", 0)),
        "prompt_drifts": int(state.gateway.get("gateway_prompt_drifts", 0)),
        "untrained_turns": int(state.gateway.get("gateway_untrained_turns", 0)),
        "stuck": int(state.gateway.get("gateway_stuck", 0)),
        "steps": state.steps,
        "heldout_before": ev["before"].mean,
    }
    if "after" in ev:
        run_rise, run_se = rise(ev["before"], ev["after"])
        record.update(heldout_after=ev["after"].mean, heldout_stderr=run_se, heldout_rise=run_rise)
    if "control_after" in ev:
        control_rise, control_se = rise(ev["control_before"], ev["control_after"])
        record.update(
            control_before=ev["control_before"].mean,
            control_after=ev["control_after"].mean,
            control_stderr=control_se,
            control_rise=control_rise,
            control_steps=state.control_steps,
        )
    record.update(exact_match(ev))
    checks = list(state.sync_checks.values())
    record["anchor_logprob"] = dict(state.anchor_logprob)
    record.update(
        logprob_gap=max(c.gap for c in checks) if checks else None,
        logprob_gap_shifted_mask=min(c.shifted_gap for c in checks) if checks else None,
        logprob_gap_unsynced=state.unsynced.gap if state.unsynced else None,
        sync_checks={k: vars(c) for k, c in state.sync_checks.items()},
        mask_check={"episodes": state.mask_checked, "failures": state.mask_failures[:20]},
        evaluations={k: e.to_dict() for k, e in ev.items()},
        settings=vars(settings),
        config=config,
        seconds=state.seconds,
        first_trained_episode=state.first_trained_episode,
        checkpoints=state.checkpoints,
    )
    record["goals"] = goals(record)
    return record


def exact_match(ev: dict[str, Any]) -> dict[str, Any]:
    """Held-out exact match (the outcome term alone, not the shaped reward) of each evaluation, and its
    rises with their standard errors: what a real model's run is judged by."""
    em = {name: e.terms["reward_outcome"] for name, e in ev.items() if "reward_outcome" in e.terms}
    out: dict[str, Any] = {"em": em, "em_stderr": {name: ev[name].outcome_stderr for name in em}}
    for prefix, (a, b) in (
        ("heldout", ("before", "after")),
        ("control", ("control_before", "control_after")),
        ("warm_start", ("zero_shot", "before")),
    ):
        if a in em and b in em:
            out[f"{prefix}_em_rise"] = round(em[b] - em[a], 4)
            out[f"{prefix}_em_stderr"] = round(math.hypot(ev[a].outcome_stderr, ev[b].outcome_stderr), 4)
    return out


def goals(record: dict[str, Any]) -> dict[str, bool]:
    """Each goal of the run, met or not (the control's only when there was one). A real model is judged
    by held-out exact match (what the paper reports), the tiny one by the shaped reward it can raise."""
    real = bool((record.get("settings") or {}).get("model"))
    metric = "em_" if real else ""
    out = warm_start_goals(record)
    if f"heldout_{metric}rise" in record:
        rise_, se = record[f"heldout_{metric}rise"], record[f"heldout_{metric}stderr"]
        name = "held-out exact match" if real else "heldout"
        if not real:
            out[f"heldout rises >= {MIN_RISE}"] = rise_ >= MIN_RISE
        out[f"{name} rises >= {MIN_RISE_SE:g} s.e."] = rise_ >= MIN_RISE_SE * se
    out["every action mask matches the engine's turns"] = not record["mask_check"]["failures"]
    if real:
        out["0 token mismatches"] = record["token_mismatches"] == 0
    if record["logprob_gap"] is not None:  # None: not checked (constrained decoding)
        out[f"log-prob gap after sync <= {SYNC_TOLERANCE}"] = record["logprob_gap"] <= SYNC_TOLERANCE
        out[f"a shifted action mask fails the sync check (> {SYNC_TOLERANCE})"] = (
            record["logprob_gap_shifted_mask"] > SYNC_TOLERANCE
        )
    if record["logprob_gap_unsynced"] is not None:
        out[f"an actor the engine was not synced with fails the sync check (> {SYNC_TOLERANCE})"] = (
            record["logprob_gap_unsynced"] > SYNC_TOLERANCE
        )
    if "control_rise" in record:
        c_rise, c_se = record[f"control_{metric}rise"], record[f"control_{metric}stderr"]
        out[f"control moves < {MAX_CONTROL_SE:g} s.e. either way"] = abs(c_rise) < MAX_CONTROL_SE * c_se
    return {**out, **_learning_goals(record, real)}


def warm_start_goals(record: dict[str, Any]) -> dict[str, bool]:
    """A real model's warm start, judged on the held-out questions against the model zero-shot: its
    turns in the format, and more exact answers by at least ``MIN_RISE_SE`` standard errors."""
    if "warm_start_em_rise" not in record:
        return {}
    share = record["evaluations"]["before"]["valid_turn_share"]
    return {
        f"after SFT: format valid on >= {WARM_VALID_TURNS:.0%} of held-out turns": share >= WARM_VALID_TURNS,
        f"after SFT: exact match above zero-shot by >= {MIN_RISE_SE:g} s.e.": record["warm_start_em_rise"]
        >= MIN_RISE_SE * record["warm_start_em_stderr"],
    }


def _learning_goals(record: dict[str, Any], real: bool = False) -> dict[str, bool]:
    """What the run learned is what the reward means: every held-out episode paid the decomposition
    bonus decomposed (and every decomposed one was paid), and format validity did not fall by more
    than the standard error of its change; for a real model, the parallelizable class's decomposition
    did not fall either."""
    ev = record["evaluations"]
    if "after" not in ev:
        return {}
    before, after = ev["before"], ev["after"]
    out = {
        "paid decomposition == measured decomposition (held-out, before and after)": not (
            before.get("decomposition_mismatches") or after.get("decomposition_mismatches")
        )
    }
    par_b, par_a = before["by_class"].get("parallel"), after["by_class"].get("parallel")
    if real and par_b and par_a:
        out["the parallelizable class's decomposition does not fall"] = par_a.get(
            "measured_decomposition", 0.0
        ) >= par_b.get("measured_decomposition", 0.0)
    if "format_valid" in before["terms"] and "format_valid" in after["terms"]:
        se = math.hypot(before.get("format_valid_stderr", 0.0), after.get("format_valid_stderr", 0.0))
        out["format validity does not fall (by more than 1 s.e.)"] = (
            after["terms"]["format_valid"] >= before["terms"]["format_valid"] - se
        )
    return out


def class_lines(record: dict[str, Any]) -> list[str]:
    """Per question class, before -> after: decomposition (paid and measured where the class is
    parallelizable) and format validity."""
    ev = record["evaluations"]
    first, last = ("before", "after") if "after" in ev else ("zero_shot", "before")
    if first not in ev:
        return []
    before, after = ev[first]["by_class"], ev[last]["by_class"]
    lines = []
    for qclass in sorted(set(before) & set(after)):
        b, a = before[qclass], after[qclass]
        paid = (
            f" (paid {b['paid_decomposition']:.2f} -> {a['paid_decomposition']:.2f})"
            if "paid_decomposition" in b and "paid_decomposition" in a
            else ""
        )
        lines.append(
            f"{qclass} ({b.get('episodes', 0)} episodes): decomposed {b.get('decomposed', 0):.2f} -> "
            f"{a.get('decomposed', 0):.2f}{paid}, format valid {b.get('format_valid', 0):.2f} -> "
            f"{a.get('format_valid', 0):.2f}, reward {b.get('reward', 0):.3f} -> {a.get('reward', 0):.3f}"
        )
    return lines


def _sync_line(record: dict[str, Any]) -> str:
    unsynced = record["logprob_gap_unsynced"]
    return (
        f"weight sync: mean |engine - actor| log-prob {record['logprob_gap']:.2e} nats (at most, over "
        f"{len(record['sync_checks'])} checks); with the action mask shifted by one "
        f"{record['logprob_gap_shifted_mask']:.2f}"
        + (f"; before the first sync {unsynced:.2f}" if unsynced is not None else "")
    )


def summary_lines(record: dict[str, Any]) -> list[str]:
    """What the run prints at its end: the rises, the sync, the masks, each goal met or not."""
    em, em_se = record["em"], record["em_stderr"]
    lines = []
    if "heldout_rise" in record:
        lines.append(
            f"held-out mean reward {record['heldout_before']:.3f} -> {record['heldout_after']:.3f} "
            f"(rise {record['heldout_rise']:+.3f}, s.e. {record['heldout_stderr']:.3f})"
        )
    if em:
        lines.append(
            "held-out exact match: " + ", ".join(f"{k} {v:.3f} +- {em_se[k]:.3f}" for k, v in em.items())
        )
    if "control_rise" in record:
        lines.append(
            f"control (rewards shuffled within each step) {record['control_before']:.3f} -> "
            f"{record['control_after']:.3f} (rise {record['control_rise']:+.3f}, s.e. {record['control_stderr']:.3f})"
        )
    if record["logprob_gap"] is None:
        lines.append("weight sync: not checked (constrained decoding)")
    else:
        lines.append(_sync_line(record))
    lines.append(
        f"action masks checked against the engine's turns: {record['mask_check']['episodes']} episodes, "
        f"{len(record['mask_check']['failures'])} failed"
    )
    shares = {k: e["valid_turn_share"] for k, e in record["evaluations"].items() if e.get("turns")}
    if shares:
        lines.append("held-out turns in the format: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
    lines += [f"held-out {line}" for line in class_lines(record)]
    lines += [f"checkpoint {name}: {path}" for name, path in record["checkpoints"].items()]
    lines += [f"goal {'met' if ok else 'NOT met'}: {name}" for name, ok in record["goals"].items()]
    return lines


def write_record(record: dict[str, Any], folder: Path) -> Path:
    path = folder / "learning.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path
