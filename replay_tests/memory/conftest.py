"""Memory-seam tests: register the conformance kit for assertion rewriting before it loads."""

import pytest

pytest.register_assert_rewrite("loom_memory.conformance")
