"""The reward's weights before GPU time (``train --check``): printed beside the mode's own, each
one far from its mode's value named in a warning, and weights whose shaping can pay a wrong answer
as much as a right answer's outcome refused (the policy would learn to split and search, not to
answer). Raises a ValueError naming the weight and the fix."""

from __future__ import annotations

from parallelsearch.rl.rewards import OVER_SEARCH, check_reward_weights

#: a weight at least this many times its mode's own value, or at most its inverse, is named in a warning
WEIGHT_FACTOR = 3.0


def shaping_ceiling(mode: str, w: dict[str, float]) -> tuple[float, float]:
    """(the most the shaping terms pay a wrong answer, a right answer's outcome) under weights ``w``."""
    if mode == "official":
        comp = max(w["comp_score"] * w["alpha"], w["comp_score"], 0.0)
        fmt = max(w["structure_format_score"], w["final_format_score"], 0.0)
        return comp + max(w["count_score"], 0.0) + fmt, w["score"]
    comp = max(w["alpha"] * w["lambda_d"], w["lambda_d"], 0.0)
    return comp + max(w["lambda_s"], 0.0) + max(w["lambda_f"], 0.0), 1.0


def _off(value: float, own: float) -> str | None:
    """How far ``value`` is from ``own`` when it is :data:`WEIGHT_FACTOR` or more (None: closer)."""
    if own == value:
        return None
    if own == 0 or value == 0 or (value < 0) != (own < 0):
        return "of another sign or zero"
    ratio = value / own
    if ratio >= WEIGHT_FACTOR:
        return f"{ratio:.0f}x"
    if ratio <= 1 / WEIGHT_FACTOR:
        return f"1/{1 / ratio:.0f} of"
    return None


def _fmt(name: str, value: float, own: float | None) -> str:
    return f"{name} {value:g}" + ("" if own is None or own == value else f" (the mode's {own:g})")


def check_weights(mode: str, overrides: dict[str, float]) -> tuple[str, list[str]]:
    """The line naming every weight of ``mode`` (overridden ones beside the mode's own) and the shaping
    ceiling, and a warning per weight :data:`WEIGHT_FACTOR` or more off its mode's own."""
    own = check_reward_weights(mode, {})
    w = check_reward_weights(mode, overrides)
    ceiling, outcome = shaping_ceiling(mode, w)
    changed = [k for k in w if k != OVER_SEARCH and w[k] != own.get(k)]
    if ceiling >= outcome:
        names = ", ".join(f"agent.reward.weights.{k}={own[k]:g}" for k in changed) or "the mode's own weights"
        raise ValueError(
            f"agent.reward.weights: {', '.join(_fmt(k, w[k], own[k]) for k in changed)}: the shaping terms pay a "
            f"wrong answer up to {ceiling:.2f}, not less than a right answer's outcome {outcome:g} (the mode's own "
            f"weights: {shaping_ceiling(mode, own)[0]:.2f}), so the policy learns to split and search instead of "
            f"answering; set {names}, or weights whose shaping stays under {outcome:g}"
        )
    warnings = [
        f"agent.reward.weights.{k} {w[k]:g} is {how} the mode's own {own[k]:g} (reward mode {mode}): if that is "
        f"a typo, set agent.reward.weights.{k}={own[k]:g}"
        for k in changed
        if (how := _off(w[k], own[k]))
    ]
    shown = ", ".join(_fmt(k, v, own.get(k)) for k, v in w.items() if k != OVER_SEARCH or v)
    said = "the mode's own" if not changed else f"{len(changed)} changed"
    line = (
        f"reward weights (mode {mode}, {said}): {shown}; shaping pays a wrong answer at most {ceiling:.2f} "
        f"< a right answer's {outcome:g}"
    )
    return line, warnings
