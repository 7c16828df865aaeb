"""Real benchmark sample shipped with the package for the offline demo (see README.md here)."""

from pathlib import Path

HOTPOTQA_SAMPLE = Path(__file__).with_name("hotpotqa_dev_sample.jsonl")
