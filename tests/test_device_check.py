"""A CUDA device torch cannot use is refused by name before a model loads (one CLI line, exit 2),
instead of torch's AssertionError from inside the first tensor move."""

from __future__ import annotations

import pytest
import torch

from parallelsearch import cli
from parallelsearch.stores.encoding.backend import check_device
from parallelsearch.stores.encoding.passage_pool import PassagePool, device_list
from parallelsearch.stores.errors import UnavailableError


@pytest.fixture()
def two_gpus(monkeypatch):
    """What torch reports on a host with two CUDA devices (this machine has none)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.fixture()
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_cuda_without_a_device_is_refused_by_name(no_gpu):
    for device in ("cuda", "cuda:0", "CUDA:1"):
        with pytest.raises(UnavailableError, match=f"device '{device}': torch sees no CUDA device"):
            check_device(device)
    for device in (None, "", "cpu", "mps"):
        check_device(device)  # not CUDA: nothing to check here


def test_a_cuda_index_past_the_devices_is_refused(two_gpus):
    check_device("cuda")
    check_device("cuda:1")
    with pytest.raises(
        UnavailableError, match=r"device 'cuda:2': torch sees 2 CUDA device\(s\), cuda:0..cuda:1"
    ):
        check_device("cuda:2")
    with pytest.raises(UnavailableError, match="device 'cuda:x'"):
        check_device("cuda:x")


def test_the_encoding_pool_checks_every_device_before_a_worker_starts(two_gpus):
    PassagePool(None, device_list("cuda", 2))  # cuda:0, cuda:1 exist
    with pytest.raises(UnavailableError, match="cuda:2"):
        PassagePool(None, device_list("cuda", 3))
    with pytest.raises(UnavailableError, match="cuda:5"):
        PassagePool(None, device_list("cuda:0,cuda:5", None))


def test_index_with_cuda_on_a_host_without_it_is_one_line(no_gpu, tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "one.jsonl"
    corpus.write_text('{"id": "1", "contents": "\\"A\\"\\nabc"}\n', encoding="utf-8")
    monkeypatch.setenv("PARALLELSEARCH_CHROMA_PATH", str(tmp_path / "stores"))
    code = cli.main(["index", "--store", "gpu-test", "--device", "cuda", "--no-progress", str(corpus)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "error: device 'cuda': torch sees no CUDA device here (a CPU build of torch, or no driver); "
        "run the encoder with --device cpu"
    )
    assert "Traceback" not in err
