"""The LangServe app and what every served request passes: guards, admission, threads, the
OpenAI-compatible endpoint and the ``/ui`` page (docs/architecture.md, "Guarding the servers")."""
