"""Running a program that forks, bounded: what the fork tests share.

A fork test runs its scenario (``runtime/forked_loom.py``, ``memory/forked_store.py``) in a
fresh interpreter, since the failure it guards against is a hang of the parent as well as of
the children: in a session of its own, so that a hang is ended for the forked children too,
and without the caller's ``LOOM_*`` settings.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_forking_program(program: Path, *args: str, timeout: float) -> Any:
    """The JSON report ``program`` prints as its last line; the test fails if it exits
    non-zero or does not end within ``timeout`` seconds (its whole process group killed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    # The programs import replay_tests.forked_children: the checkout's root on their path.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    running = subprocess.Popen(
        [sys.executable, str(program), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = running.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(running.pid, signal.SIGKILL)
        _, stderr = running.communicate()
        pytest.fail(f"the parent or a child hung:\n{stderr}")
    assert running.returncode == 0, stderr
    return msgspec.json.decode(stdout.strip().splitlines()[-1])
