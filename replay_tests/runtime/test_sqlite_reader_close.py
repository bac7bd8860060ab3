"""ADR 0048 (amended "review"): once the log closes its position reader, no read opens another.

The log closes each recorder's reader before its pool; a position read by another thread in
between used to open a fresh reader that nothing would close. It now reads through the pool.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from loom_runtime.log import LogSettings, Row, open_log
from loom_runtime.storage.sqlite import ChainedSQLiteRecorder


def test_a_position_read_after_close_reader_opens_no_reader(tmp_path: Path) -> None:
    log = open_log(LogSettings(f"sqlite:///{tmp_path / 'loom.db'}"))
    try:
        log.insert_rows([Row(stream=uuid.uuid4(), version=1, topic="test.Noted", state=b"{}")])
        recorder = log.application.recorder  # type: ignore[attr-defined]
        assert isinstance(recorder, ChainedSQLiteRecorder)
        assert recorder.max_notification_id() == 1
        assert recorder._reader is not None  # the held reader answered
        recorder.close_reader()
        assert recorder.max_notification_id() == 1  # the pool's answer
        assert recorder._reader is None
    finally:
        log.close()
