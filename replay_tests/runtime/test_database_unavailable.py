"""A PostgreSQL database that cannot be reached is named, with its cause, at once.

It used to surface as eventsourcing's "couldn't get a connection after 5.00 sec" from the
connection pool, which names neither the database nor why.
"""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from loom_runtime import DatabaseUnavailableError, Loom, LoomError
from replay_tests.conftest import NO_PG, PG_URL

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]


@pytest.mark.parametrize("persistence", ["builtin", "sqlalchemy"])
def test_a_missing_database_is_a_typed_error_naming_it_and_the_cause(persistence: str) -> None:
    """Opening the log fails with the database's name and 'does not exist' from the server's
    first answer, not the pool's "couldn't get a connection after 5.00 sec" (no clock read:
    that message, which names neither, is what waiting for the pool would end in)."""
    url = make_url(PG_URL).set(database="loom_no_such_database")
    loom = Loom(url.render_as_string(hide_password=False), persistence=persistence)  # type: ignore[arg-type]
    with pytest.raises(DatabaseUnavailableError) as raised:
        _ = loom.log
    message = str(raised.value)
    assert "couldn't get a connection" not in message
    assert "loom_no_such_database" in message and "does not exist" in message
    assert "createdb" in message  # the next step
    assert isinstance(raised.value, LoomError) and raised.value.database == "loom_no_such_database"


def test_the_cli_reports_it_in_one_line_with_exit_2() -> None:
    """`loom executions list --db <missing database>`: the reason, no traceback."""
    from typer.testing import CliRunner

    from loom_runtime.tools.cli import app

    url = make_url(PG_URL).set(database="loom_no_such_database")
    result = CliRunner().invoke(
        app, ["executions", "list", "--db", url.render_as_string(hide_password=False)]
    )
    assert result.exit_code == 2 and "does not exist" in " ".join(result.output.split())
    assert not isinstance(result.exception, LoomError)
