"""Every public class and function has a Google-style docstring, in one style.

The docs site renders docstrings with mkdocstrings (``docstring_style: google``),
so inputs, outputs and errors are documented in sections that griffe parses,
not in prose. This check defines "done" for that conversion. Each public object
needs:

* a summary line;
* ``Args:`` naming every parameter (``*args`` and ``**kwargs`` too, written with
  their stars) and no parameter that does not exist. A class documents its
  ``__init__`` parameters in the class docstring (``merge_init_into_class``); a
  dataclass or NamedTuple documents each field under ``Attributes:`` or ``Args:``;
* ``Returns:`` when the return annotation is not None (``Yields:`` for a
  generator; a function returning an iterator may use either). ``__init__`` and
  properties need none: a property's summary says what it gives;
* ``Raises:`` naming each exception class the body raises directly
  (``raise SomeError(...)``, not in a nested function), or a base class of it.
  A class counts what its own ``__init__`` and ``__post_init__`` raise. Not
  counted: ``AssertionError`` (an "unreachable" marker) and private ``_Errors``;
* no warning from griffe while it parses the docstring (a documented parameter
  that is not in the signature, a parameter with no type anywhere, ...).

Error classes need only a summary (it says when they are raised). The surface
is ``__all__`` of the public modules (a module without ``__all__``: the public
names it defines itself); a class brings its public methods and properties
defined by durably, not the ones it inherits from the standard library or
other packages. Constants (``DAY``, ``CAP_*``) are not checked: they have no
docstring of their own. Nor are the conformance kit's ``test_*`` methods: pytest
calls them, their names say what they check, their parameters are fixtures.
What this check cannot see: whether units are given and where an idea comes
from; that is for review.

A failure lists every offender as ``module.qualname: what is missing``.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import dataclasses
import functools
import importlib
import inspect
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import griffe
import pytest

from durably.errors import ExtraNotInstalledError

PUBLIC_MODULES = [
    "durably",
    "durably.errors",
    "durably.storage",
    "durably.storage.conformance",
    "durably.schemas",
    "durably.models",
    "durably.models.openai",
    "durably.models.anthropic",
    "durably.integrations.langgraph",
    "durably.integrations.openai_agents",
    "durably.adapters.memory",
    "durably.adapters.filesystem",
    "durably.adapters.sqlite",
    "durably.adapters.s3",
    "durably.adapters.postgres",
]
#: Top-level packages whose definitions are checked (this file: for the self-test's samples).
OWN_PACKAGES = {"durably", __name__}
#: Return annotations that need no ``Returns:`` section.
RETURNS_NOTHING = {"None", "NoReturn", "Never", "typing.NoReturn", "typing.Never"}
#: Raised as an "unreachable" marker, not an error a caller handles: no ``Raises:`` entry needed.
UNREACHABLE = {AssertionError}
#: Return annotations (outermost name) that may be documented under ``Yields:`` instead.
ITERATORS = {"Iterator", "AsyncIterator", "Generator", "AsyncGenerator", "Iterable", "AsyncIterable"}


@dataclass(frozen=True)
class Target:
    """One object to check: a class, a function or method, or a property.

    Attributes:
        name: ``module.qualname`` of its definition, as the report shows it.
        obj: The class, the function (decorators unwrapped) or the property.
    """

    name: str
    obj: Any


# --- the public surface -----------------------------------------------------------------


def source_of(obj: Any) -> Any:
    """The class or function whose source defines ``obj`` (a property's getter)."""
    return getattr(obj, "fget", None) or getattr(obj, "func", None) or obj


def is_own(obj: Any) -> bool:
    """Whether ``obj`` is defined by durably (not by the standard library or a dependency)."""
    return (getattr(obj, "__module__", None) or "").split(".")[0] in OWN_PACKAGES


def public_names(module: ModuleType) -> list[str]:
    """``module.__all__``, or the public names the module defines itself when it has none."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    ]


def members_of(cls: type) -> Iterator[Any]:
    """The public methods and properties ``cls`` offers that durably defines."""
    for name in dir(cls):
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or name.startswith("_") or name.startswith("test_"):
            continue
        member = vars(owner)[name]
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if isinstance(member, (property, functools.cached_property)):
            if is_own(source_of(member)):
                yield member
        elif inspect.isfunction(inspect.unwrap(member)) and is_own(member):
            yield inspect.unwrap(member)


def public_surface() -> tuple[list[Target], dict[str, str]]:
    """Every public class, function, method and property once; and the modules skipped (why)."""
    targets: list[Target] = []
    seen: set[int] = set()
    skipped: dict[str, str] = {}

    def add(obj: Any) -> None:
        if id(obj) not in seen:
            seen.add(id(obj))
            targets.append(Target(f"{source_of(obj).__module__}.{source_of(obj).__qualname__}", obj))

    for module_name in PUBLIC_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:  # an optional extra that is not installed
            missing = (error.name or "").split(".")[0] if isinstance(error, ModuleNotFoundError) else "durably"
            if not isinstance(error, ExtraNotInstalledError) and missing == "durably":
                raise  # durably itself is broken, not an extra missing
            skipped[module_name] = f"{type(error).__name__}: {error}"
            continue
        for name in public_names(module):
            obj = getattr(module, name)  # resolves durably's lazy (PEP 562) names
            if inspect.isclass(obj) and is_own(obj):
                add(obj)
                if not issubclass(obj, BaseException):
                    for member in members_of(obj):
                        add(member)
            elif inspect.isfunction(inspect.unwrap(obj)) and is_own(obj):
                add(inspect.unwrap(obj))
    return targets, skipped


# --- what one object must document ----------------------------------------------------------


def annotation_text(annotation: Any) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def documented_name(parameter: inspect.Parameter) -> str:
    """How ``Args:`` names a parameter: ``*args`` and ``**kwargs`` keep their stars."""
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return stars.get(parameter.kind, "") + parameter.name


def parameters_of(obj: Any) -> list[inspect.Parameter]:
    """The documented parameters: a function's (no self/cls), a class's ``__init__``'s."""
    if inspect.isclass(obj):
        init = next((vars(k)["__init__"] for k in obj.__mro__ if "__init__" in vars(k)), None)
        if not (is_own(init) or dataclasses.is_dataclass(obj)):
            return []  # object's, Protocol's or another package's __init__
    elif not inspect.isfunction(obj):
        return []  # a property
    return [p for p in inspect.signature(obj).parameters.values() if p.name not in ("self", "cls")]


def fields_of(cls: Any) -> list[str]:
    """A value class's fields: a dataclass's or a NamedTuple's."""
    if dataclasses.is_dataclass(cls):
        return [field.name for field in dataclasses.fields(cls)]
    return list(getattr(cls, "_fields", ())) if inspect.isclass(cls) and issubclass(cls, tuple) else []


def griffe_parent(obj: Any) -> griffe.Object:
    """A griffe model of ``obj``'s signature, so griffe checks the docstring against it."""
    parameters = griffe.Parameters(
        *[
            griffe.Parameter(
                p.name, annotation=annotation_text(p.annotation), kind=griffe.ParameterKind(p.kind.description)
            )
            for p in parameters_of(obj)
        ]
    )
    if inspect.isclass(obj):
        cls = griffe.Class(obj.__name__)
        cls.set_member("__init__", griffe.Function("__init__", parameters=parameters))
        return cls
    function = source_of(obj)
    return griffe.Function(
        function.__name__, parameters=parameters, returns=annotation_text(inspect.signature(function).return_annotation)
    )


@contextlib.contextmanager
def griffe_warnings() -> Iterator[list[str]]:
    """Collect what griffe logs while parsing."""
    messages: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("griffe")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def docstring_of(obj: Any) -> str:
    doc = source_of(obj).__doc__ if not inspect.isclass(obj) else vars(obj).get("__doc__")
    if dataclasses.is_dataclass(obj) and doc and doc.startswith(f"{obj.__name__}("):
        doc = None  # the signature @dataclass writes into a class that has no docstring
    return inspect.cleandoc(doc or "")


@functools.cache
def module_tree(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as source:
        return ast.parse(source.read())


def definition_of(function: Any) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The ``def`` of ``function`` in its module's source (None for generated code)."""
    path = inspect.getsourcefile(function)
    if path is None or not os.path.isfile(path):  # a dataclass's __init__ comes from "<string>"
        return None
    first_line = function.__code__.co_firstlineno  # the first decorator's line, if any
    for node in ast.walk(module_tree(path)):
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name == function.__name__
            and min([node.lineno, *(d.lineno for d in node.decorator_list)]) == first_line
        ):
            return node
    return None


def raised_by(function: Any) -> list[type[BaseException] | str]:
    """The exception classes ``function``'s own body raises as ``raise SomeError(...)``.

    A name that does not resolve in the module's globals (a local import) is
    kept as a name when it is spelled like a class.
    """
    node = definition_of(inspect.unwrap(function))
    if node is None:
        return []
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    found: list[type[BaseException] | str] = []
    pending: list[ast.AST] = [child for child in node.body if not isinstance(child, nested)]
    while pending:  # the body, not the bodies of functions or classes defined in it
        statement = pending.pop()
        pending += [child for child in ast.iter_child_nodes(statement) if not isinstance(child, nested)]
        if isinstance(statement, ast.Raise) and isinstance(statement.exc, ast.Call):
            dotted = ast.unparse(statement.exc.func)
            head, *rest = dotted.split(".")
            value = function.__globals__.get(head, getattr(builtins, head, None))
            for part in rest:
                value = getattr(value, part, None)
            name = dotted.split(".")[-1]
            if name.startswith("_") or value in UNREACHABLE:
                continue  # a private exception is control flow, caught inside durably
            if inspect.isclass(value) and issubclass(value, BaseException):
                found.append(value)
            elif value is None and name[:1].isupper():
                found.append(name)
    return list(dict.fromkeys(found))


def raised_on_construction(cls: type) -> list[type[BaseException] | str]:
    found: list[type[BaseException] | str] = []
    for hook in ("__init__", "__post_init__"):
        function = next((vars(k)[hook] for k in cls.__mro__ if hook in vars(k)), None)
        if inspect.isfunction(function) and is_own(function):
            found += raised_by(function)
    return list(dict.fromkeys(found))


def needed_result_section(function: Any) -> set[str]:
    """The sections that may document what ``function`` gives back (empty: none needed)."""
    unwrapped = inspect.unwrap(function)
    if inspect.isgeneratorfunction(unwrapped) or inspect.isasyncgenfunction(unwrapped):
        return {"yields"}
    returns = annotation_text(inspect.signature(function).return_annotation)
    if returns is not None and returns.strip("'\"") in RETURNS_NOTHING:
        return set()
    outer = (returns or "").split("[")[0].split(".")[-1]
    return {"returns", "yields"} if outer in ITERATORS else {"returns"}


def listed_names(sections: list[griffe.DocstringSection]) -> dict[str, set[str]]:
    """Section kind (``parameters``, ``attributes``, ``returns``, ``raises``...) -> the names it lists."""
    listed: dict[str, set[str]] = {}
    for section in sections:
        names = listed.setdefault(section.kind.value, set())
        if section.kind.value in ("parameters", "attributes"):
            names.update(item.name for item in section.value)
        elif section.kind.value == "raises":  # ``errors.StoreError`` names StoreError
            names.update(str(item.annotation).split(".")[-1] for item in section.value)
    return listed


def missing_parameters(obj: Any, listed: dict[str, set[str]]) -> str | None:
    fields = fields_of(obj)
    described = listed.get("parameters", set()) | (listed.get("attributes", set()) if fields else set())
    required = dict.fromkeys([documented_name(p) for p in parameters_of(obj)] + fields)
    missing = [name for name in required if name not in described and not name.startswith("_")]  # _x: not API
    return f"{'Attributes' if fields else 'Args'}: missing {', '.join(missing)}" if missing else None


def missing_result(obj: Any, listed: dict[str, set[str]]) -> str | None:
    wanted = needed_result_section(obj) if inspect.isfunction(obj) else set()  # not a class, not a property
    if not wanted or wanted & listed.keys():
        return None
    if wanted == {"yields"}:
        return "missing Yields:"
    return "missing Returns:" if wanted == {"returns"} else "missing Returns: (or Yields:)"


def missing_raises(obj: Any, listed: dict[str, set[str]]) -> str | None:
    raised = raised_on_construction(obj) if inspect.isclass(obj) else raised_by(source_of(obj))
    documented = listed.get("raises", set())
    missing = [
        error if isinstance(error, str) else error.__name__
        for error in raised
        if not documented & ({error} if isinstance(error, str) else {k.__name__ for k in error.__mro__})
    ]
    return f"Raises: missing {', '.join(missing)}" if missing else None


def split_results(sections: list[griffe.DocstringSection]) -> str | None:
    """A Returns:/Yields: section read as several items: its continuation lines are not indented
    past the first line, so griffe takes each line for a new return value (one table row each)."""
    split = [
        section.kind.value
        for section in sections
        if section.kind.value in ("returns", "yields") and len(section.value) > 1
    ]
    return f"{split[0].capitalize()}: one value written over lines not indented further" if split else None


def problems(obj: Any) -> list[str]:
    """What ``obj``'s docstring lacks (empty when it passes)."""
    text = docstring_of(obj)
    with griffe_warnings() as warnings:
        sections = griffe.Docstring(text, parent=griffe_parent(obj)).parse("google")
    found = []
    if re.search(r"^\s*>", text, re.M):  # Markdown reads it as a quote: "x\n    >= 0" renders as "x" + a quote
        found.append("a line starts with '>' (Markdown makes it a quote: reword)")
    if not (sections and sections[0].kind.value == "text" and sections[0].value.strip()):
        found.append("no summary line" if text else "no docstring")
    if not (inspect.isclass(obj) and issubclass(obj, BaseException)):  # an error needs only its summary
        listed = listed_names(sections)
        found += [
            p
            for p in (
                missing_parameters(obj, listed),
                missing_result(obj, listed),
                missing_raises(obj, listed),
                split_results(sections),
            )
            if p
        ]
    return found + [f"griffe: {message.split(': ', 1)[-1]}" for message in warnings]  # drop "<module>:N: "


def offenders(targets: list[Target]) -> list[str]:
    """``module.qualname: what is missing`` for every target that fails."""
    return sorted(f"{t.name}: {'; '.join(p)}" for t in targets if (p := problems(t.obj)))


# --- the checks ----------------------------------------------------------------------------


def test_every_public_object_has_a_google_style_docstring():
    targets, skipped = public_surface()
    failing = offenders(targets)
    assert not failing, (
        f"{len(failing)} of {len(targets)} public objects fail the docstring style "
        f"(skipped modules: {skipped or 'none'}):\n" + "\n".join(failing)
    )
    if skipped:
        pytest.skip(f"checked without modules whose extras are missing: {skipped}")


def sample_reads_badly(path: str, *options: str, retries: int = 3) -> bytes:
    """Read ``path``.

    Args:
        path: The file.
        timeout: Seconds.
    """
    if not path:
        raise FileNotFoundError(path)
    return b""


def sample_reads_well(path: str, *options: str, retries: int = 3) -> bytes:
    """Read ``path``, retrying a failed read (the idea of tenacity's ``retry``).

    Args:
        path: The file, relative to the working directory.
        *options: Flags passed to the reader.
        retries: Attempts after the first, a count >= 0.

    Returns:
        The file's content.

    Raises:
        OSError: The file cannot be read after ``retries`` attempts.
    """

    def never_called() -> None:
        raise KeyError(path)  # raised by the helper, not by this function

    if not path:
        raise FileNotFoundError(path)  # documented by its base class, OSError
    return b""


@dataclass
class SampleSpan:
    """A span of bytes in a file.

    Attributes:
        start: The first byte's offset.
        length: Bytes.
    """

    start: int
    length: int


@dataclass
class SampleSpanMissingAField:
    """A span of bytes in a file.

    Attributes:
        start: The first byte's offset.
    """

    start: int
    length: int


def test_the_checker_flags_a_bad_docstring_and_accepts_a_good_one():
    assert problems(sample_reads_badly) == [
        "Args: missing *options, retries",
        "missing Returns:",
        "Raises: missing FileNotFoundError",
        "griffe: No type or annotation for parameter 'timeout'",
        "griffe: Parameter 'timeout' does not appear in the function signature",
    ]
    assert problems(sample_reads_well) == []
    assert problems(SampleSpan) == []
    assert problems(SampleSpanMissingAField) == ["Attributes: missing length"]


def test_the_surface_holds_the_public_api_once():
    targets, _ = public_surface()
    names = [t.name for t in targets]
    assert len(names) == len(set(names)), "an object counted twice"
    assert {
        "durably._runtime.Runtime",
        "durably._runtime.Runtime.start",  # a lazy name, a method
        "durably._loop.state.AgentState.parked",  # a property
        "durably.errors.DurablyError",
        "durably.storage._spi_store.Store.read",
        "durably.adapters.memory.MemoryStore",
    } <= set(names)  # a module without __all__
    assert not [name for name in names if name.rpartition(".")[2].startswith(("test_", "_"))]
