"""A job folder belongs to one run. A folder that already holds another job's files is refused
(its stale eval file, data and checkpoints would ship with the new run, and the new run would
write over the old one's checkpoints) unless the run resumes it, or it is the same job written
again (the same resolved config, nothing trained yet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _has_checkpoint(folder: Path) -> bool:
    actor = folder / "_actor"
    return actor.is_dir() and any(actor.iterdir())


def check_reuse(folder: Path, config_file: str, config_text: str, cfg: Any) -> None:
    """A ValueError when ``folder`` holds another job: files other than this job's own config text
    at ``config_file``, or a checkpoint, without ``resume``."""
    if cfg.resume or not folder.is_dir() or not any(folder.iterdir()):
        return
    old = folder / config_file
    same = old.is_file() and old.read_text(encoding="utf-8") == config_text
    ckpt = Path(str(cfg.ckpt_path or Path(cfg.save_path) / "ckpt").removeprefix("$PWD/"))
    trained = _has_checkpoint(ckpt if ckpt.is_absolute() else folder / ckpt)
    if same and not trained:
        return
    held = sorted(p.name for p in folder.iterdir())
    why = "a checkpoint of a run" if trained else "another job's files"
    raise ValueError(
        f"job_dir {folder} already holds {why} ({', '.join(held[:6])}{', ...' if len(held) > 6 else ''}): "
        "its stale eval file, data and checkpoints would ship with this run and be written over; give a new "
        "job_dir, remove the folder, or pass --resume (resume=true) to continue that run"
    )
