"""Getting corpora into a store: file readers, the passage token budget, text and vector ingestion.

The text ingestion is :func:`parallelsearch.stores.ingestion.pipeline.ingest` (also
``parallelsearch.stores.ingest``); this package re-exports nothing, so no submodule name can
shadow a function of the same name.
"""
