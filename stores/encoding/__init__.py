"""The encoder: text in, normalised float32 vectors out.

``embedder.py`` is the place to start: :class:`~.embedder.Embedder` owns its engine
(``torch_engine.py``: sentence-transformers; ``onnx_engine.py``: ONNX Runtime fp32/int8) and
its encoder threads (``threads.py``); ``backend.py`` is the rule that picks the engine
(``auto``); ``passage_pool.py`` spreads passage encoding over processes or GPUs.
"""
