"""Training: rewards, training data, the graph as an environment, the OpenRLHF executor, launcher, rollouts.

Light parts import eagerly; OpenRLHF, Ray and vLLM are imported only inside the
functions (and the ``openrlhf_agent`` module) that need them.

Internal: the building blocks behind the public API in ``parallelsearch`` (docs/api.md); names here may change without notice.
"""

from parallelsearch.data.metrics import cover_match, exact_match, f1_score, normalize_answer
from parallelsearch.rl.env import EnvGraph, SearchEnv, StepResult
from parallelsearch.rl.rewards import (
    MODES,
    PAPER_WEIGHTS,
    RewardBreakdown,
    RewardMode,
    check_reward_mode,
    question_class,
    read_episode,
    score_episode,
    score_trajectory,
)

__all__ = [
    "MODES",
    "PAPER_WEIGHTS",
    "EnvGraph",
    "RewardBreakdown",
    "RewardMode",
    "SearchEnv",
    "StepResult",
    "check_reward_mode",
    "cover_match",
    "exact_match",
    "f1_score",
    "normalize_answer",
    "question_class",
    "read_episode",
    "score_episode",
    "score_trajectory",
]
