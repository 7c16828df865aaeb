"""Ten mistakes that cost a day of GPU time, each stopped before submission with one line naming
the cause and the fix (docs/training.md, "The pre-flight check"). The numbers follow the list the
checks were written against: 1 the install, 2 a reward that inverts the objective, 3 context
overflow, 4 the chat template, 5 contamination, 6 the retriever's identity, 7 the keys, 8 the
OpenRLHF contract, 9 the job folder, 10 rollout's exit code.

Real parts throughout: OpenRLHF's own parser, real ``/retrieve`` servers on 127.0.0.1 over a real
Chroma store, the tiny tokenizer this package builds (rl/tiny_model.py), real benchmark files.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from conftest import RAW, needs_data

from parallelsearch.cli import main
from parallelsearch.rl.data import make_train_data
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


# -- 5. contamination: evaluation questions never become training data ---------------------------


@needs_data
def test_make_train_data_refuses_evaluation_files(tmp_path, capsys):
    """FlashRAG's test.jsonl and HotpotQA's dev files used to pass; only holdout/ was refused. The
    file's name (or, for a prepared file, its questions' source) says it is an evaluation split."""
    nq_test = RAW / "nq" / "GaurisankarJ_reason_over_search" / "test.jsonl"
    out = tmp_path / "train.jsonl"
    assert main(["make-train-data", str(nq_test), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "comes from an evaluation file" in err and "its file name says 'test'" in err
    assert "--allow-eval-questions" in err and not out.exists()
    # a prepared copy under an innocent name still carries its source
    assert main(["prepare-data", str(nq_test), "--out", str(tmp_path / "prep")]) == 0
    assert main(["make-train-data", str(tmp_path / "prep" / "nq.jsonl"), "--out", str(out)]) == 2
    assert "test.jsonl" in capsys.readouterr().err
    # positional FlashRAG ids of an evaluation split, under any file name
    renamed = tmp_path / "nq_train.jsonl"
    renamed.write_text(json.dumps({"id": "test_7", "question": "q?", "golden_answers": ["a"]}) + "\n")
    with pytest.raises(ValueError, match=r"its id 'test_7' is an evaluation split's"):
        make_train_data([renamed], out)
    # a train split passes
    train = tmp_path / "nq" / "train.jsonl"
    train.parent.mkdir()
    train.write_text(json.dumps({"id": "train_7", "question": "q?", "golden_answers": ["a"]}) + "\n")
    assert make_train_data([train], out).written == 1


# -- 8. the OpenRLHF contract ----------------------------------------------------------------------


def test_records_name_their_datasource_as_openrlhf_reads_it(tmp_path):
    """Records said ``data_source``; OpenRLHF's PromptDataset reads ``datasource``, so every eval
    metric fell into ``default``. Its own dataset class and eval metrics now group by dataset."""
    from engines import openrlhf_function, openrlhf_prompt_dataset

    files = []
    for dataset, question, answer in (
        ("hotpotqa", "Who is older, A or B?", "A"),
        ("nq", "who wrote hamlet", "X"),
    ):
        path = tmp_path / dataset / "dev.jsonl"  # an evaluation file: welcome as eval records
        path.parent.mkdir()
        path.write_text(
            json.dumps({"id": f"{dataset}1", "question": question, "golden_answers": [answer]}) + "\n"
        )
        files.append(path)
    out = tmp_path / "eval.jsonl"
    make_train_data(files, out, eval_set=True)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert {r["datasource"] for r in records} == {"hotpotqa", "nq"}
    assert all(json.loads(r["label"])["score"] == "em" for r in records)
    dataset = openrlhf_prompt_dataset(records, tokenizer=None)
    batches = [dataset.collate_fn([dataset[i]]) for i in range(len(dataset))]
    compute_eval_metrics = openrlhf_function("trainer/ppo_trainer.py", "compute_eval_metrics")
    samples = [
        SimpleNamespace(prompts=[r["prompt"]], rewards=float(r["datasource"] == "nq"), response_length=None, truncated=None)
        for r in records
    ]  # fmt: skip
    logs = compute_eval_metrics(batches, samples, 1)
    assert logs["eval_nq_pass1"] == 1.0 and logs["eval_hotpotqa_pass1"] == 0.0
    assert not any("default" in k for k in logs)
