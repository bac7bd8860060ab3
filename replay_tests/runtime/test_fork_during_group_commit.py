"""A process forked while another thread's append is being committed can append in the child.

The SQLite recorder's appends go through a group commit (``loom_runtime.storage.group_commit``):
a caller that finds a commit under way waits for it to end. ``os.fork`` copies that state
(a commit under way, its lock), but not the thread running the commit, so in the child it never
ended and the child's first append waited for ever. The group commit is now reset in a forked
child (``loom_runtime.storage.forks.reset_in_child``).

The parent's commit is held inside the recorder's commit function while the fork happens. The
child has a few seconds (``signal.alarm``) to append and close; the parent's held append then
completes too, and both rows are in the log.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from loom_runtime.log import LogSettings, open_log
from loom_runtime.storage.sqlite import ChainedSQLiteRecorder
from replay_tests.runtime.test_fork_held_locks import _append

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_a_child_forked_during_a_commit_appends_and_closes(tmp_path: Path) -> None:
    log = open_log(LogSettings(f"sqlite:///{tmp_path / 'loom.db'}"))
    try:
        recorder = log.application.recorder  # type: ignore[attr-defined]
        assert isinstance(recorder, ChainedSQLiteRecorder)
        group_commit = recorder.group_commit
        commit = group_commit._commit
        parent = os.getpid()
        inside, release = threading.Event(), threading.Event()

        def held(group: Sequence[Any]) -> None:
            if os.getpid() == parent:  # the parent's commit waits, holding the group commit
                inside.set()
                release.wait()
            commit(group)

        group_commit._commit = held
        appender = threading.Thread(target=_append, args=(log,))
        appender.start()
        inside.wait()
        pid = os.fork()
        if pid == 0:  # the child: nothing here may raise past os._exit
            code = 1
            try:
                signal.alarm(10)
                _append(log)
                assert log.position == 1  # the parent's held append is not committed yet
                log.close()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        release.set()
        appender.join()
        assert os.waitstatus_to_exitcode(status) == 0
        assert log.position == 2  # the child's row, then the parent's
    finally:
        log.close()
