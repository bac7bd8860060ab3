"""The loom pytest plugin: yesterday's incidents as today's regression tests.

``pytest --loom-bundles=recordings/ --loom-flows=myapp.flows:loom`` adds one test per bundle
file (``*.json``, ``*.msgpack``) in each folder; a test fails with the readable divergence
(unrecorded key with its nearest neighbours, the diff of a changed prompt, of a changed
output) when the current code no longer reproduces the recording. ``--loom-flows`` (or the
``loom_flows`` ini option) names where the flows are registered: a ``Loom``, a
``FlowRegistry``, or a function returning one. No database is opened: a bundle carries all a
replay needs. An entry of the folder loom does not replay (a symbolic link, a folder, a file
whose name does not print as itself, or named ``.JSON``) is a test that fails saying why, and
so is a folder that holds no bundle at all: a regression run never passes having replayed
nothing. ``--loom-bundles-only`` runs those tests alone (no other test is collected), as the
next step a collected bundle's failure prints does.

For hand-written tests, the ``loom_replay`` fixture replays a bundle and fails the same way
(``--loom-update`` re-seals what it replays too); override the ``loom_flows`` fixture to
supply flows from a conftest instead of the option.

A test that runs a flow records on first run and replays after (ADR 0029)::

    @pytest.mark.loom(bundle="recordings/triage.json")
    def test_triage(loom):
        assert loom.run("triage", ticket="T-1").output.queue == "billing"

The ``loom`` fixture is a fresh ``Loom`` on a temporary SQLite file, with the ``loom_flows``.
Under the marker (path relative to the test file) its one run is recorded to the bundle or
answered from it, by ``--loom-record`` (ini ``loom_record``): ``none`` replays only (the
default: CI never records), ``once`` records a missing bundle and replays an existing one,
``rewrite`` records afresh. ``--loom-update`` re-seals a bundle whose replay diverged only by
changed decision inputs or output, and prints each diff it accepted; any other divergence
still fails. It re-seals the bundles ``--loom-bundles`` collects the same way. A recording or
a re-seal is written only when the test passes: a run its own test rejects is no golden file
(``once`` would replay it from then on).

Registered through the ``pytest11`` entry point, so installing loom is enough. That also
loads it into every pytest session of an environment where loom is installed, most of which
never use it: so this module imports only pytest, and loom itself is imported inside the hooks
and fixtures, when a bundle is collected or a loom fixture requested.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import sys
import traceback
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from loom_runtime.bundle import Bundle
    from loom_runtime.flow import FlowRegistry
    from loom_runtime.loom import Loom
    from loom_runtime.redaction import RedactorOption
    from loom_runtime.replay import ReplayResult
    from loom_runtime.tools.pytest_bundle import BundleLoom

NO_FLOWS = (
    "loom needs to know where the flows are registered: pass --loom-flows=MODULE:ATTR, set "
    "loom_flows in the ini file, or override the loom_flows fixture"
)
BUNDLE_SUFFIXES = (".json", ".msgpack")
RECORD_MODES = ("none", "once", "rewrite")
PASSED = pytest.StashKey[bool]()
PENDING = pytest.StashKey[list[Callable[[], "str | None"]]]()
"""The bundle writes of a test, done once its teardown has passed too (each returns the note of
a re-seal for the summary, or None)."""
"""Whether a test's call passed: a marked test's recording or re-seal is written only then."""
BUNDLED = pytest.StashKey["BundleLoom"]()
"""The marked test's ``BundleLoom``, for :func:`pytest_runtest_call` to read its verdict."""
REPLAYED = pytest.StashKey[list["BundleVerdict"]]()
"""The verdicts ``loom_replay`` raised in a test, for :func:`pytest_runtest_call` as well."""
BUNDLE_TESTS = pytest.StashKey[dict[Path, list[str]]]()
"""The session's marked tests by the bundle they name (see ``_bundle_tests``)."""
CAUSED = "The above exception was the direct cause of the following exception:"
"""Between what the flow raised on replay and the verdict, as Python and pytest word it."""
RESEALED_PROPERTY = "loom_resealed"
"""The user property a re-sealing test carries (bundle and accepted diffs): a property, not
session state, so the report reaches the controller when pytest-xdist runs the tests."""


class BundleVerdict(AssertionError):
    """A test's code no longer matches its recording. The message is the whole account, made
    inert (a bundle's values are untrusted: a recorded prompt can hold what a terminal
    obeys); the failure shows the test's own line, not the frames inside loom that found it
    (``pytest_runtest_call``), as an ``assert`` would."""

    def __init__(self, message: str) -> None:
        from loom_runtime.tools.display import visible

        super().__init__(visible(message))


class ReplayDiverged(BundleVerdict):
    """A bundle's replay was not identical: its divergences, and what to run if the change
    is intended (``next_step``)."""

    def __init__(self, result: ReplayResult, next_step: str) -> None:
        super().__init__(f"{result.describe().rstrip()}\n{next_step}")
        self.result = result


class BundleNotReplayed(BundleVerdict):
    """A test's bundle could not be replayed at all: it does not read (edited and not
    re-sealed, cut short, left with merge conflict markers), or the current code cannot run it
    (its flow renamed, a new required argument). Raised from that ``error``, whose type and
    message are the verdict's first line: raised as itself, it was an exception like any
    other, which a test expecting its recorded failure (``pytest.raises(Exception)``) caught
    and passed with nothing checked."""

    def __init__(self, bundle: Path, error: Exception, next_step: str) -> None:
        super().__init__(
            f"{bundle} could not be replayed: {type(error).__name__}: {error}\n{next_step}"
        )
        self.bundle = bundle
        self.error = error


def not_replayed_step(rerun: str, *, marked: bool) -> str:
    """What to do when a bundle could not be replayed (:class:`BundleNotReplayed`)."""
    again = (
        f"record it afresh with pytest --loom-record=rewrite {rerun}"
        if marked
        else "record the execution again and export it over this bundle (loom export ID -o FILE)"
    )
    return (
        f"If the code changed on purpose, {again}; a bundle that no longer reads (edited by "
        "hand, cut short, left with merge conflict markers) is restored from version control."
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("loom", "loom recorded executions")
    group.addoption(
        "--loom-bundles",
        action="append",
        default=[],
        metavar="PATH",
        help="replay every bundle in folder PATH, or bundle file PATH, as a test (repeatable)",
    )
    group.addoption(
        "--loom-bundles-only",
        action="store_true",
        help="run only the bundles --loom-bundles collects: no other test is collected or run "
        "(what a collected bundle's next step uses, so that --loom-update re-seals it alone)",
    )
    group.addoption(
        "--loom-flows",
        default=None,
        metavar="MODULE:ATTR",
        help="where the flows are registered: a Loom, a FlowRegistry, or a function returning one",
    )
    parser.addini("loom_flows", "default for --loom-flows", default=None)
    group.addoption(
        "--loom-record",
        choices=RECORD_MODES,
        default=None,
        help="for tests marked loom(bundle=...): none replays only (default), once records a "
        "missing bundle, rewrite records every bundle afresh",
    )
    parser.addini("loom_record", "default for --loom-record", default="none")
    group.addoption(
        "--loom-update",
        action="store_true",
        help="re-seal bundles whose replay changed only decision inputs or the output, "
        "printing each accepted diff",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "loom(bundle): the loom fixture's run is recorded to / replayed from this bundle file "
        "(relative to the test file; see --loom-record, --loom-update)",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Note whether the test's call passed, for the ``loom`` fixture's teardown to read."""
    report = yield
    if call.when == "call":
        item.stash[PASSED] = report.passed
    elif (
        call.when == "teardown"
        and (pending := item.stash.get(PENDING, None))
        and report.passed
        and item.stash.get(PASSED, False)
    ):
        # Written only now, and only if the whole test passed: a fixture whose teardown
        # fails (after the ``loom`` fixture ended) rejects the run as much as its call would.
        try:
            for write in pending:
                if (note := write()) is not None:
                    report.user_properties.append((RESEALED_PROPERTY, note))
        except Exception as exc:  # a report hook must not raise: the test's error instead
            report.outcome = "failed"
            report.longrepr = f"loom could not write the test's bundle: {exc}"
    if report.failed and _shows_a_bundle(item):
        report.longrepr = _inert(report.longrepr)
    return report


def _shows_a_bundle(item: pytest.Item) -> bool:
    """Whether ``item``'s failure can print a bundle's text: a collected bundle's (or refused
    entry's) test, a marked test's, one that takes ``loom_replay``."""
    return (
        isinstance(item, BundleItem | RefusedEntry)
        or BUNDLED in item.stash
        or "loom_replay" in getattr(item, "fixturenames", ())
    )


def _inert(longrepr: Any) -> Any:
    """A failure's report with every text in it shown as :func:`visible` shows it.

    A bundle's text reaches a failure by more ways than loom's verdicts (which are inert
    themselves): the error the replayed code raised, printed as a verdict's cause; a recorded
    error raised again into the test, whose class may print a message of its own (a
    ``__str__`` that is not its arguments'); a note; the summary line that quotes any of them.
    pytest prints each raw, so the report's texts (its lines, its crash message, the chain's)
    are made inert where they all end up, whatever raised them. pytest's report parts are
    dataclasses of strings, lists and tuples; anything else is left as it is."""
    from loom_runtime.tools.display import visible

    if isinstance(longrepr, str):
        return visible(longrepr)
    if type(longrepr) in (list, tuple):
        return type(longrepr)(_inert(part) for part in longrepr)
    if dataclasses.is_dataclass(longrepr) and not isinstance(longrepr, type):
        for field in dataclasses.fields(longrepr):
            # setattr of object's: a frozen report part (none is, today) is made inert too
            object.__setattr__(longrepr, field.name, _inert(getattr(longrepr, field.name)))
    return longrepr


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A verdict the test caught (``pytest.raises(Exception)`` around a run whose recording
    raised) fails it all the same: it says the code changed, which no test expects.

    A :class:`BundleVerdict` leaves the test without loom's own frames in its traceback
    (and in its cause's, what the flow raised on replay): the failure points at the test's
    ``loom.run`` line (where pytest's long form shows the test's code) and the message says
    the rest. Other errors, and every error under ``--full-trace``, keep every frame."""
    try:
        try:
            result = yield
        except (pytest.skip.Exception, pytest.xfail.Exception) as outcome:
            # Skipped or xfailed after catching the verdict ("backend down"): a green build.
            _raise_caught(
                item, "skipped" if isinstance(outcome, pytest.skip.Exception) else "xfailed"
            )
            raise
        _raise_caught(item, "passed")
        return result
    except BundleVerdict as verdict:
        if not item.config.getoption("fulltrace"):  # --full-trace: every frame, for loom's bugs
            verdict.__traceback__ = _outside_loom(verdict.__traceback__)
            if isinstance(verdict, BundleNotReplayed):  # its first line says what was raised
                verdict.__cause__, verdict.__suppress_context__ = None, True
            if verdict.__cause__ is not None:  # what the flow raised on replay: its own frames
                cause = verdict.__cause__
                cause.__traceback__ = _outside_loom(cause.__traceback__)
        raise


def _raise_caught(item: pytest.Item, would_have: str) -> None:
    """Raise the verdict ``item``'s run (or a ``loom_replay`` of it) raised, if the test caught
    it (and so would have ``would_have``): a verdict fails the test whoever catches it."""
    bundled = item.stash.get(BUNDLED, None)
    replayed = item.stash.get(REPLAYED, [])
    if bundled is not None and bundled.verdict is not None:
        caught = bundled.verdict
    elif replayed:
        caught = replayed[0]
    else:
        return
    caught.add_note(
        f"loom: the test caught this verdict (pytest.raises or except around its run) and "
        f"would have {would_have}; a verdict fails the test whoever catches it"
    )
    raise caught


def _outside_loom(traceback: TracebackType | None) -> TracebackType | None:
    """``traceback`` without the frames of loom's own modules."""
    import loom_runtime

    inside = str(Path(loom_runtime.__file__).parent) + os.sep
    kept: list[TracebackType] = []
    while traceback is not None:
        if not traceback.tb_frame.f_code.co_filename.startswith(inside):
            kept.append(traceback)
        traceback = traceback.tb_next
    trimmed = None
    for entry in reversed(kept):
        trimmed = TracebackType(trimmed, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return trimmed


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked with a bundle must take the ``loom`` fixture: without it the marker is
    silently nothing, and the test passes in every mode having recorded or replayed nothing.
    (Not a bundle collected by ``--loom-bundles``: it has no fixtures.)"""
    fixtures = getattr(item, "fixturenames", None)
    if fixtures is not None and "loom" not in fixtures and item.get_closest_marker("loom"):
        pytest.fail(
            f"{item.nodeid} is marked @pytest.mark.loom(bundle=...) but does not take the loom "
            "fixture, so nothing is recorded or replayed: add a `loom` argument and run the "
            "flow with loom.run(...), or remove the marker",
            pytrace=False,
        )


def _record_mode(config: pytest.Config) -> str:
    mode = str(config.getoption("--loom-record") or config.getini("loom_record"))
    if mode not in RECORD_MODES:
        raise pytest.UsageError(
            f"loom_record must be one of {', '.join(RECORD_MODES)}, not {mode!r}"
        )
    return mode


def _configured_flows(config: pytest.Config) -> FlowRegistry:
    return _configured(config)[0]


def _configured_redactor(config: pytest.Config) -> RedactorOption:
    """The redactor of the ``Loom`` that ``--loom-flows`` names (the app's own), else the
    built-in one: a bundle recorded through the app's redactor replays only through it. With
    the built-in one, a value the app redacts came back in clear on replay, the failure
    printed it, and ``--loom-update`` wrote it into the bundle to commit."""
    from loom_runtime.loom import Loom

    if not _flows_spec(config):  # flows from an overridden loom_flows fixture
        return "builtin"
    target = _configured(config)[1]
    return target.settings.redactor if isinstance(target, Loom) else "builtin"


def _configured(config: pytest.Config) -> tuple[FlowRegistry, object]:
    from loom_runtime.errors import ConfigurationError
    from loom_runtime.flow import load_flows_from

    spec = _flows_spec(config)
    if not spec:
        pytest.fail(NO_FLOWS, pytrace=False)  # a fixture's: each test that needs it errors
    # The project's package is found from the rootdir, as ``loom --flows`` finds it from the
    # current directory: the ``pytest`` script, unlike ``python -m pytest``, does not put the
    # current directory on the import path.
    root = str(config.rootpath)
    if root not in sys.path:
        sys.path.append(root)  # last: an installed package the tests run against still wins
    try:
        return load_flows_from(spec)
    except ConfigurationError as exc:
        pytest.fail(str(exc), pytrace=False)


def _flows_spec(config: pytest.Config) -> str | None:
    spec = config.getoption("--loom-flows") or config.getini("loom_flows")
    return str(spec) if spec else None


def replay_file(
    flows: FlowRegistry,
    bundle: Path,
    *,
    update: bool,
    rerun: str,
    redactor: RedactorOption = "builtin",
) -> tuple[ReplayResult, BundleLoom]:
    """Replay ``bundle`` with ``flows`` (no database is opened); raise :class:`ReplayDiverged`
    unless identical or, under ``update``, re-sealable (``rerun``: the pytest arguments that
    run the test again, for its next step). Returns the result and the loom that holds any
    re-sealed bundle, for :func:`_write_resealed`."""
    from loom_runtime.tools.pytest_bundle import BundleLoom

    replaying = BundleLoom(
        None,
        flows=flows,
        bundle=bundle,
        record=False,
        update=update,
        rerun=rerun,
        redactor=redactor,
    )
    return replaying.replay_file(), replaying


def _rerun(item: pytest.Item) -> str:
    """The pytest arguments that run ``item`` alone, from where pytest was run: its path and
    name, or for a collected bundle ``--loom-bundles-only --loom-bundles`` of its file and the
    flows given (a bundle is no path pytest collects by itself, and ``-k`` cannot parse every
    file name)."""
    from loom_runtime.tools.display import visible

    config = item.config
    here = config.invocation_params.dir
    if isinstance(item, BundleItem):
        # --loom-bundles-only: this bundle alone, not every test of the project (whose
        # bundles --loom-update would re-seal too, accepting changes no one looked at)
        arguments = ["--loom-bundles-only", f"--loom-bundles={os.path.relpath(item.path, here)}"]
        if flows := config.getoption("--loom-flows"):
            arguments.append(f"--loom-flows={flows}")
        rerun = shlex.join(arguments)
    else:
        _, _, name = item.nodeid.partition("::")
        rerun = shlex.quote(f"{os.path.relpath(item.path, here)}::{name}")
    # A folder's path can hold a line break, which shlex quotes but a verdict's message
    # (multi-line) keeps: the line after it in the terminal would be the folder's text.
    return visible(rerun, one_line=True)


class BundleFile(pytest.File):
    """A bundle file, collected as one test."""

    def collect(self) -> Iterator[BundleItem]:
        yield BundleItem.from_parent(self, name=f"replay[{self.path.name}]")


class BundleItem(pytest.Item):
    """Replays one bundle with the configured flows."""

    def runtest(self) -> None:
        flows = _configured_flows(self.config)
        update = bool(self.config.getoption("--loom-update"))
        redactor = _configured_redactor(self.config)
        _, replayed = replay_file(
            flows, self.path, update=update, rerun=_rerun(self), redactor=redactor
        )
        # Never through a link: one put in the folder's file's place since it was collected
        # would send the re-sealed bundle over whatever it points to (``_refusal``).
        if (note := _write_resealed(replayed, follow_link=False)) is not None:
            self.user_properties.append((RESEALED_PROPERTY, note))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        from loom_runtime.errors import LoomError
        from loom_runtime.tools.display import visible

        if isinstance(excinfo.value, ReplayDiverged):  # the verdict, after what the code raised
            cause = excinfo.value.__cause__
            if cause is None:
                return str(excinfo.value)
            # The replayed code's error: its message can be the bundle's (a recorded failure)
            raised = visible("".join(traceback.format_exception(cause)))
            return f"{raised}\n{CAUSED}\n\n{excinfo.value}"
        if isinstance(excinfo.value, LoomError):
            # An unusable file, a flow not registered: loom's error says what and why. Its
            # traceback runs through pytest's own frames (this item has no test function to
            # cut it at), a thousand lines of them and their locals; the message can quote
            # the bundle (a flow's name), so it is shown inert.
            return f"{type(excinfo.value).__name__}: {visible(str(excinfo.value), one_line=True)}"
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"loom replay {self.path.name}"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``--loom-bundles-only``, no file is collected (the folders still are, for their
    conftest files): only the bundles ``--loom-bundles`` adds are tests, and a test module
    elsewhere is neither imported nor can its import error stop the run."""
    if config.getoption("--loom-bundles-only") and not collection_path.is_dir():
        return True
    return None


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    folders = config.getoption("--loom-bundles")
    if folders and not _flows_spec(config):  # a bundle's test has no fixture to override
        raise pytest.UsageError(NO_FLOWS.removesuffix(", or override the loom_flows fixture"))
    only = config.getoption("--loom-bundles-only")
    if only and not folders:
        raise pytest.UsageError("--loom-bundles-only needs --loom-bundles=PATH: the bundles to run")
    for folder in folders:
        given = Path(folder)
        if given.is_dir():
            inside = given
            names = sorted(path.name for path in given.iterdir() if _listed(path))
        elif given.suffix.lower() in BUNDLE_SUFFIXES and (given.is_file() or given.is_symlink()):
            inside, names = given.parent, [given.name]  # one bundle: what a next step names
        else:
            raise pytest.UsageError(
                f"--loom-bundles={folder}: no such directory or bundle file "
                f"({', '.join(BUNDLE_SUFFIXES)})"
            )
        # The folder as the user named it may be a link; what is in it is taken as it is.
        inside = inside.resolve()
        failing: dict[str, str] = {}
        replayed = 0
        for name in names:
            if (refusal := _refusal(inside / name)) is None:
                _collected(session, items, BundleFile.from_parent(session, path=inside / name))
                replayed += 1
            else:
                failing[f"refused[{_printed(name)}]"] = f"{_printed(name)} {refusal}"
        if not replayed and not failing:
            failing["no-bundle"] = (
                f"--loom-bundles={_printed(folder)} holds no bundle ({', '.join(BUNDLE_SUFFIXES)}) "
                "to replay: a run that replays none would pass having checked nothing. Export "
                "an incident into it (loom export ID -o FILE), or leave the option out until "
                "there is one"
            )
        if failing:
            entries = RefusedEntries.from_parent(session, path=inside, failing=failing)
            _collected(session, items, entries)
    if only:  # what a plugin's own collection added too: the bundles alone run
        others = [item for item in items if not isinstance(item, BundleItem | RefusedEntry)]
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = [item for item in items if isinstance(item, BundleItem | RefusedEntry)]


def _listed(path: Path) -> bool:
    """Whether a folder's entry is replayed or refused: a bundle's suffix in any case, or a
    folder. A folder's bundles, or one named ``INCIDENT.JSON``, were silently left out of the
    run (a regression no test caught); other files (a README) are no bundle, and ignored, as
    are tooling's entries (``__pycache__``, a hidden ``.git``), which failed the run as
    folders with nothing wrong in them."""
    if path.name.startswith(".") or path.name == "__pycache__":
        return False
    return path.suffix.lower() in BUNDLE_SUFFIXES or path.is_dir()


def _collected(
    session: pytest.Session, items: list[pytest.Item], collector: pytest.Collector
) -> None:
    """Add ``collector``'s tests to the session's ``items``, reported as collected as pytest
    reports a file it collects: its count ("collected N items") was made before these."""
    collected = [item for item in collector.collect() if isinstance(item, pytest.Item)]
    items.extend(collected)
    result = list[pytest.Item | pytest.Collector](collected)
    session.ihook.pytest_collectreport(
        report=pytest.CollectReport(collector.nodeid, "passed", None, result)
    )


def _refusal(path: Path) -> str | None:
    """Why the folder's entry ``path`` is no bundle loom replays, or None if it is one.

    pytest makes a test's id of its file's path and prints it raw (the progress line, the
    failure's headline, the summary): a name holding an escape sequence or a line break
    retitled and cleared the terminal and forged a line of results. A symbolic link led out of
    the folder, to a file read and named as the test, and ``--loom-update`` re-sealed it
    there; a pipe blocks the read for ever. A folder's bundles, and a file named ``.JSON``,
    were left out of the run without a word (loom replays only the folder's own files, by
    their suffix as written: ADR 0013, "plugin review"). Each is a test that fails saying so,
    under the folder's own id (:class:`RefusedEntries`): never silently left out of a
    regression run."""
    if _printed(path.name) != path.name:
        return (
            "does not print as itself (<U+XXXX> and \\xNN stand for what a terminal obeys, a "
            "line break, a byte that is not UTF-8), and pytest prints a test's id raw: rename "
            "the file to replay it"
        )
    if path.is_symlink():
        return (
            "is a symbolic link: loom replays only the files in the folder itself (a link can "
            "lead out of it, and --loom-update would re-seal what it leads to); copy the bundle in"
        )
    if not path.is_file():
        refusal = "is not a regular file (a folder, a pipe or a device), so no bundle to replay"
        if path.is_dir():
            refusal += (
                "; loom replays the files of the folder it is given, not of the folders in it: "
                "give this one a --loom-bundles of its own"
            )
        return refusal
    if path.suffix not in BUNDLE_SUFFIXES:
        suffixes = " or ".join(BUNDLE_SUFFIXES)
        return (
            f"ends in {path.suffix}, and loom reads a bundle only as {suffixes} (the suffix says "
            "how it is encoded): rename the file to replay it"
        )
    return None


def _printed(name: str) -> str:
    """A file name as a terminal should see it: a byte that is not UTF-8 (which Python keeps
    as a lone surrogate, printed as the raw byte again) as ``\\xNN``, then as :func:`visible`
    shows a one-line value."""
    from loom_runtime.tools.display import visible

    return visible(os.fsencode(name).decode(errors="backslashreplace"), one_line=True)


class RefusedEntries(pytest.Directory):
    """The entries of a ``--loom-bundles`` folder that are no bundle to replay (``_refusal``),
    each a test that fails saying why, named by the folder's id and the entry's printed name
    (``refused[NAME]``: an id made of the entry's path would print that name raw); and for a
    folder with nothing to replay at all, the test ``no-bundle``."""

    def __init__(self, *, failing: dict[str, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failing = failing
        """Each failing test's name, and why it fails."""

    def collect(self) -> Iterator[RefusedEntry]:
        for name, refusal in self.failing.items():
            yield RefusedEntry.from_parent(self, name=name, refusal=refusal)


class RefusedEntry(pytest.Item):
    """A folder's entry loom does not replay: fails with why, and runs nothing."""

    def __init__(self, *, refusal: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.refusal = refusal

    def runtest(self) -> None:
        pytest.fail(self.refusal, pytrace=False)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"loom {self.name}"


@pytest.fixture
def loom_flows(pytestconfig: pytest.Config) -> FlowRegistry:
    """The flows bundles are replayed with (from --loom-flows / loom_flows); override freely."""
    return _configured_flows(pytestconfig)


@pytest.fixture
def loom_redactor(pytestconfig: pytest.Config) -> RedactorOption:
    """The redactor bundles are recorded and replayed through: the one of the ``Loom`` that
    --loom-flows / loom_flows names, else the built-in one; override freely."""
    return _configured_redactor(pytestconfig)


@pytest.fixture
def loom_replay(
    request: pytest.FixtureRequest, loom_flows: FlowRegistry, loom_redactor: RedactorOption
) -> Iterator[Callable[[str | Path], ReplayResult]]:
    """``loom_replay(path)`` replays a bundle and fails with the divergence if not identical.

    Under ``--loom-update`` a bundle whose replay changed only decision inputs or the output
    is re-sealed instead, as the marker's and the collected ones are: written (and printed)
    at teardown, and only if the test passed."""

    update = bool(request.config.getoption("--loom-update"))
    updated: list[BundleLoom] = []

    def replay(bundle: str | Path) -> ReplayResult:
        try:
            result, replayed = replay_file(
                loom_flows,
                Path(bundle),
                update=update,
                rerun=_rerun(request.node),
                redactor=loom_redactor,
            )
        except BundleVerdict as verdict:  # failing the test even if it catches it
            request.node.stash.setdefault(REPLAYED, []).append(verdict)
            raise
        except Exception as exc:  # nothing replayed: a verdict too, or a test's except hid it
            step = not_replayed_step(_rerun(request.node), marked=False)
            not_replayed = BundleNotReplayed(Path(bundle), exc, step)
            request.node.stash.setdefault(REPLAYED, []).append(not_replayed)
            raise not_replayed from exc
        updated.append(replayed)
        return result

    yield replay
    for updating in updated:  # a path the test chose: a link there is followed, as by export
        write = functools.partial(_write_resealed, updating, follow_link=True)
        _after_teardown(request.node, write)


@pytest.fixture
def loom(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    loom_flows: FlowRegistry,
    loom_redactor: RedactorOption,
) -> Iterator[Loom]:
    """A fresh ``Loom`` on a temporary SQLite file with the ``loom_flows``; under
    ``@pytest.mark.loom(bundle=...)`` its run records to or replays from that bundle."""
    from loom_runtime.loom import Loom

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    marker = request.node.get_closest_marker("loom")
    if marker is None:
        with Loom(url, flows=loom_flows, redactor=loom_redactor) as plain:
            yield plain
        return
    yield from _bundle_loom(request, marker, url, loom_flows, loom_redactor)


def _bundle_loom(
    request: pytest.FixtureRequest,
    marker: pytest.Mark,
    url: str,
    flows: FlowRegistry,
    redactor: RedactorOption,
) -> Iterator[Loom]:
    from loom_runtime.tools.pytest_bundle import BundleLoom

    bundle = _marked_bundle(request.node, marker)
    if bundle is None:
        raise pytest.UsageError(
            f"{request.node.nodeid}: @pytest.mark.loom needs bundle=PATH (the file its run "
            "records to and replays from)"
        )
    mode = _record_mode(request.config)
    record = mode == "rewrite" or (mode == "once" and not bundle.exists())
    if not record and not bundle.exists():
        pytest.fail(
            f"no loom bundle at {bundle}: record it with --loom-record=once (replay-only is "
            "the default, so CI never records)",
            pytrace=False,
        )
    sharing = _bundle_sharers(request.node, bundle) if record else []
    if len(sharing) > 1:
        pytest.fail(
            f"{bundle} is the bundle of {len(sharing)} tests ({', '.join(sharing)}): it holds "
            "one execution, so each would record over the other; give each test its own "
            "(for parameters: pytest.param(..., marks=pytest.mark.loom(bundle=...)))",
            pytrace=False,
        )
    bundled = request.node.stash[BUNDLED] = BundleLoom(
        url,
        flows=flows,
        bundle=bundle,
        record=record,
        update=bool(request.config.getoption("--loom-update")),
        rerun=_rerun(request.node),
        redactor=redactor,
    )
    try:
        yield bundled
        if not request.node.stash.get(PASSED, False):
            return  # what the test rejected is no recording to keep, nor a change to accept
        if not bundled.ran:
            pytest.fail(
                f"{request.node.nodeid} is marked with the bundle {bundle} but ran no flow "
                "through the loom fixture, so nothing was recorded or replayed: run it with "
                "loom.run(...) (or loom.arun), or remove the marker",
                pytrace=False,
            )
        if bundled.recorded is not None:
            _after_teardown(
                request.node,
                functools.partial(_write_recorded, bundled.bundle_of(bundled.recorded), bundle),
            )
        else:
            write = functools.partial(_write_resealed, bundled, follow_link=True)
            _after_teardown(request.node, write)  # the marker's path: its link is followed
    finally:
        bundled.close()


def _after_teardown(item: pytest.Item, write: Callable[[], str | None]) -> None:
    """Write a bundle once ``item``'s teardown has passed (see ``pytest_runtest_makereport``)."""
    item.stash.setdefault(PENDING, []).append(write)


def _write_recorded(recorded: Bundle, path: Path) -> None:
    from loom_runtime.bundle import write_bundle

    path.parent.mkdir(parents=True, exist_ok=True)
    write_bundle(recorded, path, over_any_file=True)  # the test's own: rewritten as asked


def _marked_bundle(item: pytest.Item, marker: pytest.Mark) -> Path | None:
    """The bundle ``marker`` names for ``item`` (relative to its file), or None if none."""
    name = marker.kwargs.get("bundle", marker.args[0] if marker.args else None)
    return item.path.parent / name if isinstance(name, str | Path) else None


def _bundle_sharers(item: pytest.Item, bundle: Path) -> list[str]:
    """The ids of the tests naming ``bundle``: of the session's, and of ``item``'s own
    siblings (its module's or class's tests, collected again). A run of one test or one case
    of a parametrized test (``-k``, a node id: the next step a failure prints) selected no
    other, so the session alone let each case record over the bundle they share in turn."""
    sharing = dict.fromkeys(_bundle_tests(item.session).get(bundle.resolve(), []))
    parent = item.parent
    if isinstance(parent, pytest.Collector):
        for sibling in parent.collect():
            if isinstance(sibling, pytest.Item) and _claims(sibling) == bundle.resolve():
                sharing.setdefault(sibling.nodeid)
    return list(sharing)


def _claims(item: pytest.Item) -> Path | None:
    """The bundle ``item`` runs the ``loom`` fixture under (resolved), or None."""
    marker = item.get_closest_marker("loom")
    bundle = None if marker is None else _marked_bundle(item, marker)
    if bundle is None or "loom" not in getattr(item, "fixturenames", ()):
        return None
    return bundle.resolve()


def _bundle_tests(session: pytest.Session) -> dict[Path, list[str]]:
    """The ids of the session's tests that run the ``loom`` fixture under a marker, by the
    bundle it names (resolved). Walked once, when a marked test first records: a session that
    records nothing never pays for it. Every pytest-xdist worker collects every test, so each
    sees the same claims whichever worker runs them."""
    claims = session.stash.get(BUNDLE_TESTS, None)
    if claims is None:
        claims = {}
        for item in session.items:
            if (bundle := _claims(item)) is not None:
                claims.setdefault(bundle, []).append(item.nodeid)
        session.stash[BUNDLE_TESTS] = claims
    return claims


def _write_resealed(bundled: BundleLoom, *, follow_link: bool) -> str | None:
    """Write the bundle ``bundled`` re-sealed, if it did; the note of it for the summary.
    ``follow_link`` as ``write_bundle``'s: only for a path a test chose."""
    from loom_runtime.bundle import write_bundle

    if bundled.resealed is None:
        return None
    write_bundle(bundled.resealed, bundled.bundle, follow_link=follow_link)
    accepted = "\n".join(str(divergence) for divergence in bundled.accepted)
    return f"re-sealed {bundled.bundle}, accepting:\n{accepted}"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Each bundle ``--loom-update`` re-sealed, with the diffs it accepted: the review."""
    for reports in list(terminalreporter.stats.values()):
        for report in reports:
            if getattr(report, "when", None) != "teardown":
                continue
            for name, text in getattr(report, "user_properties", ()):
                if name == RESEALED_PROPERTY:
                    from loom_runtime.tools.display import visible  # values from a bundle

                    terminalreporter.write_sep("-", "loom --loom-update")
                    terminalreporter.write_line(visible(str(text)))
