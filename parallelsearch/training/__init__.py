"""The CPU training smokes: ``train --smoke`` (one checked step, ``one_step.py``) and
``train --smoke --learn`` (a run whose held-out reward rises, ``learning_run.py``), both on
OpenRLHF's own code and a vLLM CPU engine (docs/training.md)."""
