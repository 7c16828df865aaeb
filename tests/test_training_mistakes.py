"""Ten mistakes that cost a day of GPU time, each stopped before submission with one line naming
the cause and the fix (docs/training.md, "The pre-flight check"). The numbers follow the list the
checks were written against: 1 the install, 2 a reward that inverts the objective, 3 context
overflow, 4 the chat template, 5 contamination, 6 the retriever's identity, 7 the keys, 8 the
OpenRLHF contract, 9 the job folder, 10 rollout's exit code.

Real parts throughout: OpenRLHF's own parser, real ``/retrieve`` servers on 127.0.0.1 over a real
Chroma store, the tiny tokenizer this package builds (rl/tiny_model.py), real benchmark files.
"""

from __future__ import annotations

import pytest

from parallelsearch.cli import main
from parallelsearch.rl.preflight import PreflightError, check_resources
from parallelsearch.rl.train_config import load_train_config, paper_preset


def train_check(*settings: str, preset: str = "paper") -> int:
    """``train --preset paper --check`` with each of ``settings`` as a ``--set``."""
    return main(["train", "--preset", preset, "--check", *(x for kv in settings for x in ("--set", kv))])


# -- 9. the job folder and its config -------------------------------------------------------------


def test_set_values_are_yaml_scalars_so_a_prefix_with_a_colon_stays_a_string(tmp_path):
    """``--set agent.query_prefix="query: "`` (the shell strips the quotes) was read as the YAML
    mapping ``{query: None}`` and failed validation; typed values and flow lists still parse."""
    cfg = load_train_config(
        preset="paper",
        overrides=[
            "agent.query_prefix=query: ",
            "agent.graph_config.top_k=5",
            "colocate_all=false",
            "dynamic_filtering_range=[0.1, 0.9]",
        ],
    )
    assert cfg.agent.query_prefix == "query: "  # the trailing space kept
    assert cfg.agent.graph_config.top_k == 5 and cfg.colocate_all is False
    assert cfg.dynamic_filtering_range == (0.1, 0.9)
    quoted = load_train_config(preset="paper", overrides=['agent.query_prefix="query: "'])
    assert quoted.agent.query_prefix == "query: "
    assert "query_prefix: 'query: '" in cfg.agent_config_yaml()


def test_gpu_error_in_async_mode_does_not_advise_the_colocation_already_set():
    with pytest.raises(PreflightError) as err:
        check_resources(paper_preset(async_train=True))
    msg = str(err.value)
    assert "set async_train=false" in msg and "set colocate_all=true" not in msg
    with pytest.raises(PreflightError, match=r"set colocate_all=true"):
        check_resources(paper_preset(colocate_all=False))
