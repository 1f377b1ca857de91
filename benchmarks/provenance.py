"""What every benchmark result records about the code that produced it (shared by the scripts)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git_sha() -> str:
    """The checked-out commit, or ``ATTNREC_GIT_SHA`` when set: a remote machine's copy of the tree may
    carry a .git at an older commit than the one its files come from."""
    if os.environ.get("ATTNREC_GIT_SHA"):
        return os.environ["ATTNREC_GIT_SHA"]
    try:
        return subprocess.check_output(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, text=True, stderr=subprocess.DEVNULL
        ).strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("ATTNREC_GIT_SHA", "unknown")
