"""docs/training.md's install commands (step 1), run as written in a fresh virtual environment.

A GPU node is not here: the torch command installs 2.13.0's CPU build (the one this machine's
package index serves for that version), flash-attn is built with its CUDA kernels skipped, and
the last command runs pip's resolver only (``--dry-run``). So this checks what failed on a
cluster (flash-attn's build needing torch; the set not resolving; a later command replacing the
torch flash-attn was built against), not the CUDA builds themselves.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "training.md"

pytestmark = pytest.mark.slow


def install_commands() -> list[list[str]]:
    """The ``pip install`` lines of the first bash block under "1. Install on every node"."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## 1. Install on every node") :]
    block = re.search(r"```bash[^\n]*\n(.*?)```", section, re.DOTALL)  # its mark (gpu) after the language
    assert block, f"{DOC}: step 1 has no bash block"
    lines = [shlex.split(line, comments=True) for line in block.group(1).splitlines()]
    return [words for words in lines if words[:2] == ["pip", "install"]]


def test_the_install_commands_come_in_the_order_that_builds():
    """torch first, flash-attn without build isolation, the project last (a cheap check of the page)."""
    first, second, last = install_commands()
    assert first[2:] == ["torch==2.13.0"]
    assert second[2:] == ["flash-attn==2.8.3", "--no-build-isolation"]
    assert last[2:] == ["-e", ".[train,rl]"]


def pip(venv: Path, words: list[str], log: Path, **env: str) -> subprocess.CompletedProcess:
    """One of the page's commands as written; pip skips byte-compiling what it installs (what this
    checks is what resolves and builds, not the ``.pyc`` files, which cost CPU on every file)."""
    cmd = [str(venv / "bin" / "python"), "-m", *words]
    env = {**os.environ, "PIP_NO_COMPILE": "1", **env}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    log.write_text(f"$ {shlex.join(cmd)}\n{res.stdout}\n{res.stderr}")
    return res


#: the three installs' own deadlines and the venv's: on a loaded machine the torch install alone
#: took over 600 s (pytest's hang guard), where it takes about 70 s on a quiet one
@pytest.mark.timeout(300 + 3 * 900)
def test_the_install_commands_resolve_in_a_fresh_environment(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    torch_cmd, flash_cmd, project_cmd = install_commands()
    res = pip(venv, torch_cmd, tmp_path / "torch.log")
    assert res.returncode == 0, res.stderr[-2000:]
    # no GPU, no nvcc here: the kernels are skipped, the build (torch imported, metadata) is not
    no_cuda = {"FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE", "FLASH_ATTENTION_FORCE_BUILD": "TRUE"}
    res = pip(venv, flash_cmd, tmp_path / "flash.log", **no_cuda)
    assert res.returncode == 0, res.stderr[-2000:]
    report = tmp_path / "report.json"
    res = pip(venv, [*project_cmd, "--dry-run", "--report", str(report)], tmp_path / "project.log")
    assert res.returncode == 0, res.stderr[-3000:]
    would = {
        i["metadata"]["name"].lower(): i["metadata"]["version"]
        for i in json.loads(report.read_text())["install"]
    }
    assert would["openrlhf"] == "0.11.2" and would["vllm"] == "0.29.0", would
    assert {"ray", "deepspeed", "parallelsearch"} <= set(would)
    # nothing replaces the torch flash-attn was compiled against, nor flash-attn itself
    assert "torch" not in would and "flash-attn" not in would and "flash_attn" not in would
