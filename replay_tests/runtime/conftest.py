"""Runtime tests: register the event-log conformance kit for assertion rewriting before it loads."""

import pytest

pytest.register_assert_rewrite("loom_runtime.log_conformance")
