"""A registered flow: the function, its name and code version, and its input/output schema.

The input schema is built from the function's signature once, at registration, so a bad call
is refused before anything is appended, and a live run receives its input *decoded from the
stored bytes*, exactly as a replay will (a tuple argument arrives as a list in both).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import inspect
import traceback
import typing
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec

from loom_runtime import codec
from loom_runtime.errors import (
    ConfigurationError,
    FlowAlreadyRegisteredError,
    FlowInputError,
    FlowNotFoundError,
)
from loom_runtime.redaction import Redactor
from loom_runtime.storable import text_problem

if TYPE_CHECKING:
    from uuid import UUID

F = TypeVar("F", bound=Callable[..., Any])


class Flow:
    """A flow function registered under a stable name."""

    def __init__(self, fn: Callable[..., Any], *, name: str, version: str | None) -> None:
        if not callable(fn):
            raise ConfigurationError(f"flow {name!r} must be a function, not {fn!r}")
        self.fn = fn
        self.name = name
        self.is_async = inspect.iscoroutinefunction(fn)
        self.version = version or _source_version(fn)
        self._input_type = _input_schema(fn, name)
        self.output_type = _output_type(fn)

    def bind(
        self, arguments: dict[str, Any], *, redactor: Redactor | None = None
    ) -> tuple[msgspec.Raw, dict[str, Any]]:
        """Check ``arguments`` against the signature: the stored input, and the kwargs to call."""
        names = set(self._input_type.__struct_fields__)
        unknown = sorted(set(arguments) - names)
        if unknown:
            raise FlowInputError(
                f"flow {self.name!r} takes no argument(s) {', '.join(unknown)}; "
                f"its parameters are: {', '.join(self._input_type.__struct_fields__) or 'none'}"
            )
        raw = codec.encode(arguments, path="input", redactor=redactor)
        return raw, self.decode_input(raw)

    def decode_input(self, raw: msgspec.Raw) -> dict[str, Any]:
        """The keyword arguments a stored input calls the flow with."""
        try:
            decoded: msgspec.Struct = codec.decode(raw, type=self._input_type)
        except msgspec.ValidationError as exc:
            raise FlowInputError(
                f"input of flow {self.name!r} does not fit its signature: {exc}"
            ) from exc
        return msgspec.structs.asdict(decoded)


class FlowRegistry:
    """Flows by name, independent of any database.

    A :class:`~loom_runtime.Loom` has one; a process that only replays bundles needs nothing
    else (no log is opened until one is used).
    """

    def __init__(self) -> None:
        self._flows: dict[str, Flow] = {}

    def flow(self, name: str | None = None, *, version: str | None = None) -> Callable[[F], F]:
        """Register a flow (``def`` or ``async def``) under ``name`` (default: its __name__).

        ``version`` labels the code that recorded an execution (default: a hash of the flow's
        source); a replay reports both labels. The function is returned unchanged.
        """

        def register(fn: F) -> F:
            flow_name = fn.__name__ if name is None else name
            _check_text(flow_name, what="flow name")
            if version is not None:
                _check_text(version, what=f"version label of flow {flow_name!r}")
            if flow_name in self._flows:
                raise FlowAlreadyRegisteredError(
                    f"a flow named {flow_name!r} is already registered; flow names key stored "
                    "executions, so each must be unique (pass another name to @loom.flow)"
                )
            self._flows[flow_name] = Flow(fn, name=flow_name, version=version)
            return fn

        return register

    def get_flow(self, name: str, *, recorded_by: UUID | None = None) -> Flow:
        """The flow registered as ``name``, or :class:`FlowNotFoundError` naming those that are.

        ``recorded_by`` is the execution whose log gave ``name`` (a replay, resume or fork): a
        name the user did not type gets no "did you mean", which would suggest an edit they
        cannot make, but the execution that needs it."""
        if not isinstance(name, str):
            raise FlowNotFoundError(f"a flow is named by a string, not {name!r}")
        try:
            return self._flows[name]
        except KeyError:
            known = ", ".join(sorted(self._flows)) or "none"
            if recorded_by is not None:
                raise FlowNotFoundError(
                    f"execution {recorded_by} was recorded by the flow {name!r}, which is not "
                    f"registered in this process (registered: {known}); import the module "
                    "that defines it (as it was registered when recorded)"
                ) from None
            close = difflib.get_close_matches(name, self._flows, n=1)
            guess = f"did you mean {close[0]!r}? " if close else ""
            raise FlowNotFoundError(
                f"no flow named {name!r} is registered in this process (registered: {known}); "
                f"{guess}import the module that defines it before running or replaying"
            ) from None

    def find(self, name: str) -> Flow | None:
        """The flow registered as ``name``, or None."""
        return self._flows.get(name)

    def names(self) -> list[str]:
        """Every registered flow name, sorted."""
        return sorted(self._flows)


def load_flows_from(spec: str) -> tuple[FlowRegistry, Any]:
    """Import ``MODULE:ATTR`` naming a :class:`FlowRegistry`, an object with a ``flows``
    registry (a ``Loom``), or a function returning either; return the registry and the object
    named (called, if a function): a ``Loom`` carries settings a caller replaying or running
    its flows must share (its redactor)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"flows must be given as MODULE:ATTR, not {spec!r}")
    try:
        target: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load flows from {spec!r}: {exc}") from exc
    except (Exception, SystemExit) as exc:  # its own code failed, would not compile, or exited
        raise ConfigurationError(f"cannot load flows from {spec!r}: {_raised(exc)}") from exc
    if callable(target) and not isinstance(target, FlowRegistry):
        try:
            target = target()
        except (Exception, SystemExit) as exc:
            raise ConfigurationError(
                f"cannot load flows from {spec!r}: calling it raised {_raised(exc)}"
            ) from exc
    registry = getattr(target, "flows", target)
    if not isinstance(registry, FlowRegistry):
        raise ConfigurationError(f"{spec} is a {type(target).__name__}, not a Loom or FlowRegistry")
    return registry, target


def _raised(error: BaseException) -> str:
    """``error`` in one line, with where it was raised: a ``SyntaxError`` names its file and
    line itself; any other error, the innermost frame of its traceback (the user's module)."""
    said = f"{type(error).__name__}: {error}"
    frames = traceback.extract_tb(error.__traceback__)
    if isinstance(error, SyntaxError) or not frames:
        return said
    return f"{said} (at {frames[-1].filename}, line {frames[-1].lineno})"


def _check_text(value: object, *, what: str) -> None:
    """Refuse a flow name or version label that is not plain text: each is stored in every
    execution's start and printed by every command, so one that is no string made every
    listing of the log fail, and a control or invisible character (a line break, a bidi
    override) printed a line loom did not write or a name that reads as another."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"a {what} must be a non-empty string, not {value!r}")
    problem = text_problem(value)
    refused = next((c for c in value if _refused_in_name(c)), None)
    if problem is None and refused is not None:
        problem = f"contains U+{ord(refused):04X}, a control, line-breaking or bidi character"
    if problem is not None:
        raise ConfigurationError(f"the {what} {value!r} {problem}; give plain text")


_BIDI_AND_INVISIBLE: Final = frozenset(
    chr(code)
    for code in (
        *(0x061C, 0x180E, 0x200B, 0x200E, 0x200F, 0x2060, 0xFEFF),
        *range(0x202A, 0x202F),
        *range(0x2061, 0x2070),
    )
)
"""Format characters a name must not hold: the bidi controls (a name printed reversed), and
the invisible spaces, word joiner, invisible operators and deprecated format characters (two
names that look alike)."""


def _refused_in_name(character: str) -> bool:
    """Whether a flow name or version label may not hold ``character``: a control or a line
    or paragraph separator (a line of its own in every listing), a lone surrogate, or
    :data:`_BIDI_AND_INVISIBLE`. Other format characters are part of how names are written
    (a Persian name's zero-width non-joiner, an emoji sequence's zero-width joiner and tags, a
    soft hyphen), so the labels' stricter rule (every format character) is not applied."""
    return (
        unicodedata.category(character) in ("Cc", "Cs", "Zl", "Zp")
        or character in _BIDI_AND_INVISIBLE
    )


def _input_schema(fn: Callable[..., Any], name: str) -> type[msgspec.Struct]:
    parameters = list(inspect.signature(fn).parameters.values())
    if not parameters:
        raise ConfigurationError(f"flow {name!r} must take the context as its first parameter")
    hints = _hints(fn)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for parameter in parameters[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ConfigurationError(
                f"flow {name!r} cannot take *args/**kwargs: its input is recorded by name"
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise ConfigurationError(
                f"flow {name!r} cannot take the positional-only parameter {parameter.name!r}: "
                "its input is recorded by name, and the flow is called with it by keyword"
            )
        if parameter.name == "labels":  # loom.run(name, labels=..., **arguments)
            raise ConfigurationError(
                f"flow {name!r} cannot take a parameter named 'labels': loom.run takes that "
                "keyword for the execution's tenant, user, session and tags; rename it"
            )
        annotation = hints.get(parameter.name, Any)
        if parameter.default is parameter.empty:
            fields.append((parameter.name, annotation))
        else:
            fields.append((parameter.name, annotation, parameter.default))
    try:
        schema = msgspec.defstruct(
            f"{name}_input", fields, kw_only=True, forbid_unknown_fields=True
        )
    except TypeError as exc:  # a default msgspec refuses: every call would share it
        mutable = ", ".join(repr(p.name) for p in parameters[1:] if _shared_default(p.default))
        if not mutable:  # another default (a mutable Struct) or name: msgspec says what
            raise ConfigurationError(f"flow {name!r} cannot take its parameters: {exc}") from exc
        raise ConfigurationError(
            f"flow {name!r} cannot take parameter {mutable} with a non-empty list, dict, set "
            "or bytearray as its default (every call would share it): default to None (or a "
            "tuple or frozenset of immutable values) and build the collection in the flow"
        ) from exc
    try:
        msgspec.json.Decoder(schema)
    except TypeError as exc:
        raise ConfigurationError(
            f"flow {name!r} has a parameter type msgspec cannot decode ({exc}); "
            "annotate inputs with plain data types or msgspec Structs"
        ) from exc
    return schema


def _shared_default(default: object) -> bool:
    """Whether msgspec refuses ``default`` as a field's default: a non-empty mutable
    collection, which every call would share (an empty one it copies per call)."""
    return isinstance(default, list | dict | set | bytearray) and len(default) > 0


def _output_type(fn: Callable[..., Any]) -> Any:
    """The return annotation when msgspec can decode into it, else plain JSON (``Any``)."""
    annotation = _hints(fn).get("return", Any)
    try:
        msgspec.json.Decoder(annotation)
    except TypeError:
        return Any
    return annotation


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except (NameError, TypeError):
        return {}


def _source_version(fn: Callable[..., Any]) -> str:
    """Default code-version label: a short hash of the flow's source text."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return "unknown"
    return "src-" + hashlib.sha256(source.encode()).hexdigest()[:12]
