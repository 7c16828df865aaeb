"""The advantage estimators a run can name (OpenRLHF's ``--algo.advantage.estimator``), one row each.

Every rule that depends on the estimator asks its row, not its name: ``critic`` (a value model is
trained beside the actor: its GPUs, its flags, its checkpoint's family) and ``group`` (the baseline
is taken over the samples of one prompt: it needs ``n_samples_per_prompt >= 2`` and sampling that
makes them differ). A new estimator is one row here (and, when researchers know it by another
name, an alias).
"""

from __future__ import annotations

from dataclasses import dataclass

from parallelsearch.stores.errors import check_choice


@dataclass(frozen=True)
class Estimator:
    """What a run with this estimator needs: a critic, a group of samples per prompt."""

    help: str
    critic: bool = False
    group: bool = False
    aliases: tuple[str, ...] = ()


#: every estimator OpenRLHF 0.11.2 accepts that a run may name, by OpenRLHF's name
ESTIMATORS: dict[str, Estimator] = {
    "gae": Estimator("PPO: a learned critic and GAE", critic=True, aliases=("ppo",)),
    "reinforce_baseline": Estimator("REINFORCE with the group's mean reward as baseline", group=True),
    "group_norm": Estimator(
        "GRPO: rewards normalised within each prompt's group", group=True, aliases=("grpo",)
    ),
    "rloo": Estimator("REINFORCE leave-one-out: the other samples' mean as baseline", group=True),
    "dr_grpo": Estimator("Dr. GRPO: the group's mean without the std normalisation", group=True),
}

#: names researchers type for an estimator -> OpenRLHF's name (GRPO is group_norm in OpenRLHF)
ALGORITHM_ALIASES: dict[str, str] = {alias: name for name, row in ESTIMATORS.items() for alias in row.aliases}


def estimator_name(value: str) -> str:
    """OpenRLHF's name of ``value`` (an alias resolved); a ValueError naming the known ones."""
    return check_choice(ALGORITHM_ALIASES.get(value, value), tuple(ESTIMATORS), "algorithm")


def estimator(name: str) -> Estimator:
    """The row of estimator ``name`` (or of an alias)."""
    return ESTIMATORS[estimator_name(name)]
