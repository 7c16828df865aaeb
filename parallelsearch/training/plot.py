"""The learning smoke's plot, as a self-contained SVG (no plotting package in the vLLM tier): the batch
reward of each training step for the run and its control, and the held-out means with their standard
errors before (step 0) and after (the last step)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

W, H = 720, 400
LEFT, RIGHT, TOP, BOTTOM = 60, 180, 30, 50
COLORS = {"run": "#1f77b4", "control": "#d62728"}


def _scale(lo: float, hi: float, a: float, b: float):  # noqa: ANN202 - a local affine map
    span = (hi - lo) or 1.0
    return lambda v: a + (v - lo) / span * (b - a)


def _polyline(points: Sequence[tuple[float, float]], color: str, dashed: bool = False) -> str:
    dash = ' stroke-dasharray="5,4"' if dashed else ""
    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{pts}"/>'


def _marker(x: float, y: float, err: float, color: str) -> str:
    return (
        f'<line x1="{x:.1f}" y1="{y - err:.1f}" x2="{x:.1f}" y2="{y + err:.1f}" stroke="{color}" stroke-width="2"/>'
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="white" stroke="{color}" stroke-width="2"/>'
    )


def learning_svg(record: dict[str, Any]) -> str:
    """The SVG text of ``record`` (``learning.json``'s content)."""
    series = {"run": record["steps"], "control": record.get("control_steps") or []}
    held = {
        "run": [record["evaluations"][k] for k in ("before", "after") if k in record["evaluations"]],
        "control": [
            record["evaluations"][k]
            for k in ("control_before", "control_after")
            if k in record["evaluations"]
        ],
    }
    n = max(len(record["steps"]), 1)
    values = [row["reward"] for rows in series.values() for row in rows]
    values += [e["mean"] + s * e["stderr"] for evs in held.values() for e in evs for s in (-1, 1)]
    lo, hi = min(values + [0.0]), max(values + [1.0])
    x = _scale(0, n, LEFT, W - RIGHT)
    y = _scale(lo, hi, H - BOTTOM, TOP)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="black"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="black"/>',
        f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 12}" text-anchor="middle">training step</text>',
        f'<text x="16" y="{(TOP + H - BOTTOM) / 2}" transform="rotate(-90 16 {(TOP + H - BOTTOM) / 2})" '
        'text-anchor="middle">mean reward</text>',
    ]
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        parts.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        parts.append(f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{W - RIGHT}" y2="{y(v):.1f}" stroke="#eee"/>')
    for s in sorted({0, n, *range(0, n + 1, max(n // 5, 1))}):
        parts.append(f'<text x="{x(s):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{s}</text>')
    for name, rows in series.items():
        if rows:
            parts.append(_polyline([(x(r["step"]), y(r["reward"])) for r in rows], COLORS[name], dashed=True))
    for name, evs in held.items():
        pts = [(x(0 if i == 0 else n), y(e["mean"])) for i, e in enumerate(evs)]
        if len(pts) == 2:
            parts.append(_polyline(pts, COLORS[name]))
        for (px, py), e in zip(pts, evs, strict=True):
            parts.append(_marker(px, py, abs(y(e["mean"] + e["stderr"]) - py), COLORS[name]))
    legend = [
        ("run", False, "held-out, run (± 1 s.e.)"),
        ("run", True, "training batch, run"),
        ("control", False, "held-out, control"),
        ("control", True, "training batch, control"),
    ]
    for i, (name, dashed, label) in enumerate(legend):
        ly = TOP + 10 + 20 * i
        parts.append(_polyline([(W - RIGHT + 12, ly), (W - RIGHT + 40, ly)], COLORS[name], dashed))
        parts.append(f'<text x="{W - RIGHT + 46}" y="{ly + 4}">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_plot(record: dict[str, Any], path: Path) -> Path:
    path.write_text(learning_svg(record), encoding="utf-8")
    return path
