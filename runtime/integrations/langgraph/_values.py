"""Channel values and pending writes: LangGraph's serializer, made strict, plus list deltas.

LangGraph serializes values with its ``serde`` (``JsonPlusSerializer``:
msgpack with extension types naming a module and a class, which its loader
imports and calls). Stored bytes are untrusted: whoever can write the store's
rows chooses the module and the callable (``os.system`` included). So the
default serializer is strict (``default_serde``: LangGraph's own safe types plus
the ones the application allows), and ``StrictSerde`` walks the msgpack bytes
before the loader sees them: an extension naming a type outside that allowlist
is refused without importing anything. A type on the allowlist whose class is
gone, a type the loader blocked, and an unknown extension code are refused too
(LangGraph's loader would return the raw payload or ``None`` with a warning:
state silently changing shape), so the caller can name the channel in a
``CheckpointValueError``.

A stored channel value (one per ``(checkpoint_ns, channel, version)``, only
when LangGraph gives the channel a new version) is one of::

    ["f", type, bytes]                     the whole value (serde typed)
    ["e"]                                  the channel is empty at this version
    ["d", base_version, n, type, bytes]    a list: the value at base_version
                                           (n items) followed by these items

The delta form is how an append-only list channel (``add_messages``) costs
O(new items) per step instead of O(conversation): the idea of an event log
over snapshots (each step stores what happened, not the whole state).
"""

from __future__ import annotations

import contextvars
import copy
import gc
import importlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from operator import eq
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_METHODS, SAFE_MSGPACK_TYPES
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from durably.errors import CheckpointValueError
from durably.integrations._langgraph_threads import DELTA, EMPTY, FULL

_CLASS_EXTS = frozenset({0, 1, 2, 3, 4, 5})  # JsonPlusSerializer's codes whose payload names (module, class)
_METHOD_EXT = 3  # its payload also names a method: (module, class, argument, method)
_NUMPY_EXT, _DELTA_SNAPSHOT_EXT = 6, 7
_blocked: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("durably_lg_blocked", default=None)
_listener_installed = False
_AVAILABLE: set[tuple[str, str]] = set()  # classes found importable (a class, once imported, stays)


def default_serde(allowed_types: Iterable[type | tuple[str, ...]] = ()) -> JsonPlusSerializer:
    """LangGraph's serializer in strict mode: its loader builds only LangGraph's safe
    types (messages, ``Send``, ``Interrupt``, datetimes...) and ``allowed_types``
    (classes, or ``(module, name)`` pairs)."""
    allowed = tuple(allowed_types)
    return JsonPlusSerializer(allowed_msgpack_modules=allowed or None)


def msgpack_allowlist(serde: Any) -> frozenset[tuple[str, ...]] | None:
    """The ``(module, name)`` pairs ``serde``'s msgpack loader builds, or None when
    it builds whatever a value names (LangGraph's permissive mode, or a serializer
    of the application's own, whose rules are its own)."""
    inner = serde.serde if isinstance(serde, EncryptedSerializer) else serde
    if not isinstance(inner, JsonPlusSerializer):
        return None
    allowed = getattr(inner, "_allowed_msgpack_modules", True)
    if allowed is True:
        return None
    return SAFE_MSGPACK_TYPES | frozenset(allowed or ())


def _install_listener() -> None:
    """Learn of types LangGraph's allowlist blocked while we decode (it only logs them)."""
    global _listener_installed
    if _listener_installed:
        return
    from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener

    def listener(event: SerdeEvent) -> None:
        found = _blocked.get()
        if found is not None and event.get("kind") == "msgpack_blocked":
            found.append(f"{event.get('module')}.{event.get('name')}")

    register_serde_event_listener(listener)
    _listener_installed = True


@contextmanager
def paused_gc() -> Iterator[None]:
    """Hold the cyclic garbage collector during a synchronous bulk decode.

    Rebuilding a long thread allocates tens of thousands of containers that all
    stay alive; each allocation burst triggers collections that walk the whole
    heap (LangGraph's and pydantic's included) for nothing. Measured on a
    1,000-step thread: a cold ``aget_state`` of 200-750 ms becomes 150-220 ms.
    Only around code without ``await``, so no other task runs meanwhile."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _ExtChecker:
    """An ``ext_hook`` that only validates: every nested class must be on the
    allowlist (checked before anything is imported) and importable.

    ``allowed``: the loader's allowlist, or None when the loader imports
    whatever a value names anyway. ormsgpack replaces a hook's exception by
    "ext_hook failed", so the reason is kept in ``problem``."""

    def __init__(self, allowed: frozenset[tuple[str, ...]] | None) -> None:
        self.allowed = allowed
        self.problem: str | None = None

    def __call__(self, code: int, data: bytes) -> Any:
        if code in _CLASS_EXTS or code == _DELTA_SNAPSHOT_EXT:
            inner = ormsgpack.unpackb(data, ext_hook=self, option=ormsgpack.OPT_NON_STR_KEYS)
            if code == _DELTA_SNAPSHOT_EXT:
                return None
            if not isinstance(inner, (list, tuple)) or len(inner) < (4 if code == _METHOD_EXT else 3):
                self._fail(f"extension {code} holds no (module, class, payload)")
            module, name = inner[0], inner[1]
            if not isinstance(module, str) or not isinstance(name, str):
                self._fail(f"extension {code} names no (module, class)")
            if self.allowed is not None:
                # Decided on the names alone: importing a module runs its code.
                if code == _METHOD_EXT and (module, name, inner[3]) not in SAFE_MSGPACK_METHODS:
                    self._fail(f"method {module[:100]}.{name[:100]}.{str(inner[3])[:100]} is not allowed")
                if code != _METHOD_EXT and (module, name) not in self.allowed:
                    self._fail(
                        f"type {module[:100]}.{name[:100]} is not in the msgpack allowlist "
                        "(DurablySaver(allowed_types=[...]) allows a type of the graph's own)"
                    )
            if (module, name) in _AVAILABLE:
                return None
            try:
                getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError, TypeError, ValueError) as exc:
                self._fail(f"class {module}.{name} is not available here ({type(exc).__name__}: {exc})")
            if len(_AVAILABLE) < 4096:
                _AVAILABLE.add((module, name))
            return None
        if code == _NUMPY_EXT:
            try:
                importlib.import_module("numpy")
            except ImportError:
                self._fail("a numpy array, and numpy is not installed")
            return None
        self._fail(f"unknown msgpack extension code {code}")

    def _fail(self, problem: str) -> None:
        self.problem = self.problem or problem
        raise ValueError(problem)


class StrictSerde:
    """LangGraph's ``serde`` (``dumps_typed``/``loads_typed``) that never guesses on load.

    ``loads(typed, where)`` returns the value or raises ``CheckpointValueError``
    naming ``where`` (thread, ns, checkpoint id, channel).
    """

    def __init__(self, serde: Any) -> None:
        self.serde = serde
        _install_listener()

    def dumps(self, value: Any) -> tuple[str, bytes]:
        """``(type, bytes)`` of ``value`` through the wrapped serializer."""
        typed: tuple[str, bytes] = self.serde.dumps_typed(value)
        return typed

    def loads(self, type_: str, data: bytes, where: Callable[[str], Exception]) -> Any:
        """The value of ``(type_, data)``; ``where(reason)`` builds the error to raise."""
        if type_ == "msgpack":
            checker = _ExtChecker(msgpack_allowlist(self.serde))
            try:
                ormsgpack.unpackb(data, ext_hook=checker, option=ormsgpack.OPT_NON_STR_KEYS)
            except (ValueError, TypeError, ImportError, ormsgpack.MsgpackDecodeError) as exc:
                raise where(checker.problem or f"undecodable msgpack value: {exc}") from exc
        found: list[str] = []
        token = _blocked.set(found)
        try:
            value = self.serde.loads_typed((type_, data))
        except Exception as exc:  # the serializer's own failure, whatever its type
            raise where(f"{type(exc).__name__}: {exc}") from exc
        finally:
            _blocked.reset(token)
        if found:
            raise where(f"type {', '.join(found)} is blocked by the serializer's msgpack allowlist")
        return value


def extends(value: Any, base: list[Any] | None) -> bool:
    """True when ``value`` is a list that starts with items equal to every item
    of ``base`` and is not shorter than it.

    ``base`` holds private copies of what was stored (``private_copy``), never
    the graph's own objects: an item the graph edited in place since compares
    unequal, so the edit is stored instead of being hidden behind a reference."""
    if base is None or type(value) is not list or len(value) < len(base) or not base:
        return False
    return all(map(eq, value[: len(base)], base))


def private_copy(items: list[Any]) -> list[Any] | None:
    """Deep copies of ``items`` (as they are now), or None when one cannot be copied
    (then no delta is built on them: the next value is stored whole)."""
    try:
        return copy.deepcopy(items)
    except Exception:  # an object that refuses copying, whatever its error: no base, no delta
        return None


def lend(index: PrefixIndex, lent: dict[int, tuple[list[Any], list[Any]]]) -> list[Any]:
    """Copies of ``index.items`` for a caller, made once per ``lent`` (one read).

    The index's own items are the base later deltas are compared with: a caller
    (the graph) that edits what it was given in place must not edit them."""
    held = lent.get(id(index))
    if held is None or held[0] is not index.items:
        held = lent[id(index)] = (index.items, copy.deepcopy(index.items))
    return held[1]


def build_entry(
    serde: StrictSerde, value: Any, base: tuple[Any, list[Any]] | None, redact: Callable[[Any], Any] | None
) -> list[Any]:
    """The stored form of a channel value (see the module docstring).

    ``base``: ``(version, list)`` of the last value this process stored or read
    for the channel, or None. ``redact``: applied to what is stored.
    """
    if base is not None and extends(value, base[1]):
        added = value[len(base[1]) :]
        if redact is not None:
            added = redact(added)
        type_, data = serde.dumps(added)
        return [DELTA, base[0], len(base[1]), type_, data]
    type_, data = serde.dumps(redact(value) if redact is not None else value)
    return [FULL, type_, data]


class PrefixIndex:
    """The last list rebuilt for one channel, and the versions whose values are its prefixes.

    Versions of one lineage are prefixes of one another, so after rebuilding
    the newest value once, each older one is a slice (``alist`` over a
    1,000-step thread decodes each message once, not once per checkpoint).
    ``items`` is private: callers get copies.
    """

    __slots__ = ("items", "lengths")

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.lengths: dict[Any, int] = {}


def load_entry(
    serde: StrictSerde,
    blobs: dict[Any, list[Any]],
    key: tuple[str, str, Any],
    index: PrefixIndex,
    where: Callable[[str], CheckpointValueError],
) -> Any:
    """Rebuild the value stored under ``key`` = ``(ns, channel, version)``.

    Follows delta entries back to a whole value or to a version ``index``
    knows, iteratively (a 1,000-step conversation is a 1,000-long chain), and
    updates ``index``. Returns ``EMPTY`` for an empty channel. Raises
    ``CheckpointValueError`` for a missing base, a length mismatch or an
    undecodable part.
    """
    ns, channel, _ = key
    chain: list[tuple[Any, list[Any]]] = []  # (version, delta entry), newest first
    cursor = key
    known: int | None = None
    while True:
        if cursor[2] in index.lengths:
            known = index.lengths[cursor[2]]
            start = index.items[:known]
            if not chain:
                return start
            break
        entry = blobs.get(cursor)
        if entry is None:
            raise where(f"version {cursor[2]!r} is not stored" + (" (a delta's base is missing)" if chain else ""))
        if entry[0] == EMPTY:
            if chain:
                raise where(f"delta base version {cursor[2]!r} is an empty channel")
            return EMPTY
        if entry[0] == FULL:
            value = serde.loads(entry[1], entry[2], where)
            if not chain and type(value) is not list:
                return value
            if type(value) is not list:
                raise where("a delta's base is not a list")
            start = value
            break
        if entry[0] != DELTA or len(chain) > len(blobs):
            raise where(f"stored entry of kind {entry[0]!r} is not understood")
        chain.append((cursor[2], entry))
        cursor = (ns, channel, entry[1])
    lengths = {} if known is not None else {cursor[2]: len(start)}
    for version, entry in reversed(chain):
        if len(start) != entry[2]:
            raise where(f"delta expects {entry[2]} base items, found {len(start)}")
        added = serde.loads(entry[3], entry[4], where)
        if type(added) is not list:
            raise where("a delta's items are not a list")
        start.extend(added)
        lengths[version] = len(start)
    # Versions of the old lineage up to the one reached are prefixes of this value too.
    kept = {v: n for v, n in index.lengths.items() if n <= known} if known is not None else {}
    index.lengths = kept | lengths
    index.items = list(start)
    return start
