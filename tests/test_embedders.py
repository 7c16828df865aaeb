"""The query encoder's CPU fast path gives sentence-transformers' own embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from parallelsearch.stores.encoding.embedder import DEFAULT_MODEL, resolve_model_path
from parallelsearch.stores.encoding.torch_engine import TransposedLinear, transpose_linear_layers


@pytest.mark.parametrize("bias", [True, False])
def test_transposed_linear_is_the_same_product(bias):
    torch.manual_seed(0)
    lin = torch.nn.Linear(24, 40, bias=bias)
    fast = TransposedLinear(lin)
    for shape in [(5, 24), (3, 7, 24), (1, 1, 24)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(fast(x), lin(x), rtol=1e-5, atol=1e-6)
    assert fast(torch.randn(2, 3, 24)).shape == (2, 3, 40)


def test_transpose_linear_layers_replaces_every_linear():
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 8),
        torch.nn.ReLU(),
        torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)),
    )
    x = torch.randn(3, 4)
    want = net(x)
    assert transpose_linear_layers(net) == 3
    assert not any(type(m) is torch.nn.Linear for m in net.modules())
    torch.testing.assert_close(net(x), want, rtol=1e-5, atol=1e-6)


def test_query_embeddings_match_sentence_transformers_encode(embedder):
    """The store's encoder (transposed layers, lean query path) against a fresh, untouched model."""
    from sentence_transformers import SentenceTransformer

    assert embedder._model.device.type == "cpu"
    assert not any(type(m) is torch.nn.Linear for m in embedder._model.modules())
    assert sum(type(m) is TransposedLinear for m in embedder._model.modules()) > 30
    reference = SentenceTransformer(resolve_model_path(DEFAULT_MODEL), device="cpu")
    queries = ["Scott Derrickson", "Who directed the 1994 film Ed Wood?", "Moscow State University", "x"]
    want = reference.encode(queries, normalize_embeddings=True, convert_to_numpy=True)
    got = embedder.encode_queries(queries, batch_size=3)  # two chunks
    assert got.dtype == np.float32 and got.shape == want.shape == (4, embedder.dimension)
    np.testing.assert_allclose(got, want, atol=1e-5)
    passages = embedder.encode_passages(queries)
    np.testing.assert_allclose(passages, want, atol=1e-5)
    assert embedder.encode_queries([]).shape == (0, embedder.dimension)
    assert embedder.encode_passages([]).shape == (0, embedder.dimension)


def _encode_in_child(queue):
    from parallelsearch.stores import get_embedder

    queue.put(get_embedder().encode_queries(["Ed Wood"]).shape)


def test_a_forked_child_gets_its_own_encoder_thread(embedder):
    """Threads do not survive fork; a child must not wait on the parent's encoder thread."""
    import multiprocessing as mp

    embedder.encode_queries(["start the encoder thread in this process"])
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_encode_in_child, args=(queue,))
    child.start()
    child.join(timeout=120)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung encoding a query")
    assert child.exitcode == 0
    assert queue.get(timeout=5) == (1, embedder.dimension)
