"""Getting corpora into a store: file readers, the passage token budget, text and vector ingestion.
Nothing is re-exported here, so no submodule name shadows a function (``ingest``)."""
