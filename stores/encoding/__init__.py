"""The encoder: text in, normalised float32 vectors out. Start at ``embedder.py``; ``backend.py``
picks the engine, ``passage_pool.py`` spreads passage encoding over processes or GPUs."""
