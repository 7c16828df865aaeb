"""Every registry of kinds is walked row by row, so a kind's help, its checks and its build cannot
drift apart: a new row is in the help, the forms, the constrained check and the rules that ask."""

from __future__ import annotations

import pytest

from parallelsearch.agents.policies.spec import (
    POLICY_KINDS,
    SPEC_FORMS,
    SPEC_HELP,
    model_string_reading,
    policy_from_spec,
)
from parallelsearch.rl.estimators import ALGORITHM_ALIASES, ESTIMATORS, estimator
from parallelsearch.rl.openrlhf_command import openrlhf_args
from parallelsearch.rl.preflight import gpu_demand
from parallelsearch.rl.preflight_run import check_sampling
from parallelsearch.rl.train_config import TrainConfig


@pytest.mark.parametrize("name", list(POLICY_KINDS))
def test_every_policy_kind_is_in_the_help_and_the_forms(name):
    kind = POLICY_KINDS[name]
    assert all(form in SPEC_HELP for form in kind.help)
    assert repr(kind.form) in SPEC_FORMS
    assert kind.form.partition(":")[0] == name and all(
        f.partition(":")[0].split()[0] == name for f in kind.help
    )
    assert (
        model_string_reading(kind.form if kind.form != "openai:MODEL@URL" else "openai:m@http://h/v1")
        == "spec"
    )


@pytest.mark.parametrize("name", list(POLICY_KINDS))
def test_every_policy_kind_is_held_to_its_row(name):
    """A kind that needs a value refuses a bare name; one that cannot decode constrained refuses the
    flag naming the kinds that can; the ones with no model ignore it."""
    kind = POLICY_KINDS[name]
    if kind.needs_value:
        with pytest.raises(ValueError, match=f"needs a value after '{name}:'"):
            policy_from_spec(name + ":")
    if kind.constrained is False:
        able = " or ".join(k.form for k in POLICY_KINDS.values() if k.constrained)
        with pytest.raises(ValueError, match=f"use {able} against vllm serve, not {name}:"):
            policy_from_spec(f"{name}:x", constrained=True)
    if not kind.needs_value:
        assert policy_from_spec(name, constrained=True) is not None


def test_a_new_policy_kind_is_one_row(monkeypatch):
    """A backend registered as one row is built from its spec, with the options the spec passes."""
    from parallelsearch.agents.policies.spec import PolicyKind

    built = []
    row = PolicyKind(
        lambda value, opts: built.append((value, opts.base_url)) or "policy", ("echo:X",), "echo:X"
    )
    monkeypatch.setitem(POLICY_KINDS, "echo", row)
    assert policy_from_spec("echo:abc", base_url="http://h/v1") == "policy"
    assert built == [("abc", "http://h/v1")]
    with pytest.raises(ValueError, match="did you mean 'echo'"):
        policy_from_spec("ecko:abc")


def _config(algorithm: str, n: int) -> TrainConfig:
    return TrainConfig(
        model="m", prompt_data="d.jsonl", algorithm=algorithm, n_samples_per_prompt=n, temperature=0
    )


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_rule_asks_the_estimator_row(name):
    """The critic's GPUs and flags follow ``critic``; the group's size and sampling follow ``group``."""
    row = ESTIMATORS[name]
    cfg = _config(name, 4)
    spread = cfg.model_copy(update={"colocate_all": False})
    assert ("critic" in gpu_demand(spread)[1]) == row.critic
    assert any(a.startswith("--critic.") for a in openrlhf_args(cfg, agent_func_path="a.py")) == row.critic
    if row.group:
        with pytest.raises(ValueError, match=f"algorithm {name} needs >= 2"):
            _config(name, 1)
        with pytest.raises(ValueError, match="temperature 0"):
            check_sampling(cfg)
    else:
        check_sampling(_config(name, 1))
    assert name in TrainConfig.model_fields["algorithm"].description


def test_estimator_aliases_and_typos():
    for alias, name in ALGORITHM_ALIASES.items():
        assert _config(alias, 4).algorithm == name and estimator(alias) is ESTIMATORS[name]
    with pytest.raises(ValueError, match="unknown algorithm 'grop'.*group_norm"):
        _config("grop", 4)


def _rows() -> list[dict]:
    base = {"em": 1.0, "f1": 1.0, "acc": 1.0, "policy_calls": 2, "search_rounds": 1, "subqueries": 2}
    base.update(resolver_calls=0, latency_ms=10.0, gold_recall=0.5, hop_recall=0.5, answer_coverage=1.0)
    return [
        {
            **base,
            "variant": v,
            "id": str(i),
            "split": "parallel",
            "decomposed": i % 2,
            "dataset": "d",
            "type": "t",
        }
        for v in ("parallel", "sequential")
        for i in range(4)
    ]


def test_every_metric_is_in_the_summary_and_its_tables(tmp_path):
    """The summary's keys, the report's columns and the notes under its tables all come from METRICS."""
    from parallelsearch.eval.report import comparison_lines, notes_line, table_metrics, type_lines
    from parallelsearch.eval.summary import METRICS, by_type, summarize

    summary = summarize(_rows())
    assert list(summary["parallel"]["all"]) == [m.name for m in METRICS]
    assert summary["parallel"]["parallel"]["decomposition_ratio"] == 0.5
    for table, lines in (
        ("comparison", comparison_lines(summary, False)),
        ("types", type_lines(by_type(_rows()), False)),
    ):
        header = [c.strip() for c in lines[0].strip("|").split("|")][2:]
        assert header == [m.column for m in table_metrics(table)] and len(header) > 5
        assert all(f"{m.column} = {m.note}" in notes_line(table) for m in table_metrics(table) if m.note)
    assert all(m.column for m in METRICS if m.tables)


def test_every_figure_is_drawn(tmp_path):
    pytest.importorskip("matplotlib", reason="the plots extra draws the figures")
    from parallelsearch.eval.report import FIGURES, plots
    from parallelsearch.eval.summary import summarize

    files = plots(_rows(), summarize(_rows()), tmp_path, False)
    assert len(files) == len(FIGURES) == len(set(files))
    assert all((tmp_path / f).stat().st_size > 1000 for f in files)


def test_a_new_store_kind_is_one_row_and_needs_no_setting(monkeypatch, tmp_path):
    """A store kind registered as one row is a ``--store-kind`` choice, and its stores live in the
    generic kind folder: ``<home>/<kind>``, or ``--store-path``; no setting names the kind."""
    import argparse

    from parallelsearch.cli.common import add_chroma_args, settings_from_args
    from parallelsearch.graphs.factory import STORE_KINDS, StoreKind, stores_location
    from parallelsearch.settings import Settings
    from parallelsearch.stores.config import RetrievalConfig

    row = StoreKind(None, None, None, None, RetrievalConfig.kind_location)  # type: ignore[arg-type]
    monkeypatch.setitem(STORE_KINDS, "memo", row)
    p = argparse.ArgumentParser()
    add_chroma_args(p)
    home = Settings(home=tmp_path / "home")
    cfg = settings_from_args(p.parse_args(["--store-kind", "memo"]), home)
    assert cfg.kind_folder() == tmp_path / "home" / "memo" and stores_location(cfg) == str(cfg.kind_folder())
    given = settings_from_args(
        p.parse_args(["--store-kind", "memo", "--store-path", str(tmp_path / "x")]), home
    )
    assert given.retrieval().kind_folder() == tmp_path / "x"
    with pytest.raises(ValueError, match="no folder for memo stores: set store_path"):
        RetrievalConfig(store_kind="memo").kind_folder()
