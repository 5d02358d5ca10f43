"""The values a frame may hold, and the CBOR tags that keep them exact.

Plain data (None, bool, int in 64 bits, float, str, bytes, list, dict with str
keys) is CBOR's own. The standard library's value types are written with the
tags the IANA CBOR tag registry assigns them, so any CBOR reader knows them,
and read back as the same type and value:

======================  ====================================================
aware ``datetime``      tag 0, RFC 3339 text with its UTC offset (RFC 8949)
``date``                tag 1004, RFC 3339 full-date text (RFC 8943)
``Decimal`` (finite)    tag 4, decimal fraction ``[exponent, mantissa]``;
                        a mantissa past 64 bits is a bignum (tags 2/3)
``UUID``                tag 37, 16 bytes (RFC 9562)
``set``                 tag 258, an array of distinct items
``tuple``, ``frozenset``, tag 27 ("object with type name and constructor
``time``, ``timedelta``,  arguments"): ``["tuple", [items]]``,
naive ``datetime``        ``["frozenset", [items]]``, ``["time", iso text]``,
                          ``["timedelta", [days, seconds, microseconds]]``,
                          ``["datetime", iso text]``
======================  ====================================================

A naive datetime is stored as its wall-clock fields and read back naive: no
host's time zone ever shifts it, so every host reads the same value. RFC 9581's
duration tag 1002 would need integer map keys, which the strict decoder
refuses everywhere, hence tag 27 for ``timedelta``.

Nothing else is written, and decoding refuses every other tag (shared
references, string references, regexes, rationals, IP addresses, MIME, epoch
times...): a forged frame can neither build objects durably never wrote nor
make a small record expand into a huge graph. Subclasses of str, int and float
(``StrEnum``, ``IntEnum``, ``IntFlag`` members included) are refused at save
time with their path rather than stored as the plain value, which would lose
their type silently; ``durably._tools.results`` turns a tool's Enum,
dataclass and pydantic results into data first, by a documented rule.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import cbor2

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
_MAX_BIGNUM_BYTES = 64  # a Decimal mantissa of ~150 digits; a longer one is refused on read
_MAX_EXPONENT = 999_999  # decimal.Context's default Emax
_PYTHON = 27  # tag: type name and constructor argument

#: Types the encoder tags (checked with ``type(x) is``: subclasses are refused).
TAGGED_TYPES = frozenset({dt.datetime, dt.date, dt.time, dt.timedelta, Decimal, uuid.UUID, tuple, set, frozenset})


def problem(item: Any) -> str | None:
    """Why the tagged-type value ``item`` cannot be stored, or None when it can."""
    kind = type(item)
    if kind is Decimal and not item.is_finite():
        return f"Decimal {item} is not finite"
    if kind is Decimal and abs(item.as_tuple().exponent) > _MAX_EXPONENT:
        return "Decimal exponent out of range"
    if kind is dt.time and item.tzinfo is not None and item.utcoffset() is None:
        return "time with a tzinfo that gives no offset"
    if kind is dt.datetime and item.tzinfo is not None and item.utcoffset() is None:
        return "datetime with a tzinfo that gives no offset"
    return None


def children(item: Any) -> Any:
    """The values inside a tagged-type value (a tuple's or set's items), else ()."""
    return item if type(item) in (tuple, set, frozenset) else ()


def to_cbor(value: Any) -> Any:
    """``value`` with every tagged-type value replaced by its ``cbor2.CBORTag``.

    Containers are rebuilt; call it only on values ``check_encodable`` passed
    and reported as holding tagged types."""
    kind = type(value)
    if kind is dict:
        return {k: to_cbor(v) for k, v in value.items()}
    if kind is list:
        return [to_cbor(v) for v in value]
    if kind not in TAGGED_TYPES:
        return value
    if kind is dt.datetime:
        if value.tzinfo is None:
            return cbor2.CBORTag(_PYTHON, ["datetime", value.isoformat()])
        return cbor2.CBORTag(0, value.isoformat())
    if kind is dt.date:
        return cbor2.CBORTag(1004, value.isoformat())
    if kind is dt.time:
        return cbor2.CBORTag(_PYTHON, ["time", value.isoformat()])
    if kind is dt.timedelta:
        return cbor2.CBORTag(_PYTHON, ["timedelta", [value.days, value.seconds, value.microseconds]])
    if kind is Decimal:
        sign, digits, exponent = value.as_tuple()
        mantissa = int("".join(map(str, digits)) or "0")
        return cbor2.CBORTag(4, [exponent, -mantissa if sign else mantissa])
    if kind is uuid.UUID:
        return cbor2.CBORTag(37, value.bytes)
    items = [to_cbor(v) for v in value]
    if kind is set:
        return cbor2.CBORTag(258, items)
    return cbor2.CBORTag(_PYTHON, ["tuple" if kind is tuple else "frozenset", items])


#: Bytes that start a CBOR simple value other than false, true and null
#: (simple 0-19, ``undefined``, the two-byte simple values 32-255). UTF-8 text
#: and integers may hold them too, so finding one only says a walk is needed.
_SIMPLE_START = re.compile(rb"[\xe0-\xf3\xf7\xf8]")


def simple_value_path(raw: bytes | memoryview, value: Any) -> str | None:
    """Where the decoded ``value`` holds a CBOR simple value durably never writes.

    ``raw`` is the CBOR ``value`` was decoded from: without a byte that can start
    such a simple value the walk is skipped. Returns a path such as
    ``value["messages"][2]``, or None when there is none. Containers are walked
    without recursion, so a deep value cannot exhaust the stack."""
    if _SIMPLE_START.search(raw) is None or not _holds_simple(value):
        return None
    # Found: walked again, with paths, to name where.
    stack: list[tuple[Any, str]] = [(value, "value")]
    while stack:
        item, path = stack.pop()
        kind = type(item)
        if kind is _SIMPLE or item is _UNDEFINED:
            return path
        if kind is dict:
            stack.extend((v, f"{path}[{k!r}]") for k, v in item.items())
        elif kind in (list, tuple):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
        elif kind in (set, frozenset):
            stack.extend((v, f"{path}{{...}}") for v in item)
    return None


_SIMPLE, _UNDEFINED = cbor2.CBORSimpleValue, cbor2.undefined
_LEAVES = frozenset({str, int, float, bool, bytes, type(None)})


def _holds_simple(value: Any) -> bool:
    """Whether a CBOR simple value is anywhere in ``value`` (no paths: the common case is no).

    About a fifth of cbor2's own decode time for a large state (measured on a
    2 MB snapshot of 20,000 messages), paid only for a frame whose bytes hold a
    candidate (floats' and non-ASCII text's bytes often do)."""
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind in _LEAVES:
            continue
        if kind is dict:
            extend(item.values())
        elif kind is list or kind is tuple or kind is set or kind is frozenset:
            extend(item)
        elif kind is _SIMPLE or item is _UNDEFINED:
            return True
    return False


class RefusedTagError(ValueError):
    """Decoding met a tag durably never writes, or a tagged value out of shape."""


def _datetime(value: Any, immutable: bool) -> dt.datetime:
    when = dt.datetime.fromisoformat(_text(value, 0))
    if when.tzinfo is None:
        raise RefusedTagError("tag 0 holds a datetime without a UTC offset")
    return when


def _date(value: Any, immutable: bool) -> dt.date:
    return dt.date.fromisoformat(_text(value, 1004))


def _bignum(negative: bool) -> Callable[[Any, bool], int]:
    def decode(value: Any, immutable: bool) -> int:
        if type(value) is not bytes or len(value) > _MAX_BIGNUM_BYTES:
            raise RefusedTagError(f"bignum of more than {_MAX_BIGNUM_BYTES} bytes")
        number = int.from_bytes(value, "big")
        return -1 - number if negative else number

    return decode


def _decimal(value: Any, immutable: bool) -> Decimal:
    if type(value) is not list or len(value) != 2 or type(value[0]) is not int or type(value[1]) is not int:
        raise RefusedTagError("tag 4 must hold [exponent, mantissa] integers")
    exponent, mantissa = value
    if abs(exponent) > _MAX_EXPONENT:
        raise RefusedTagError("tag 4 exponent out of range")
    digits = tuple(int(d) for d in str(abs(mantissa)))
    return Decimal((1 if mantissa < 0 else 0, digits, exponent))


def _uuid(value: Any, immutable: bool) -> uuid.UUID:
    if type(value) is not bytes or len(value) != 16:
        raise RefusedTagError("tag 37 must hold 16 bytes")
    return uuid.UUID(bytes=value)


def _set(value: Any, immutable: bool) -> set[Any]:
    if type(value) is not list:
        raise RefusedTagError("tag 258 must hold an array")
    items = set(value)
    if len(items) != len(value):
        raise RefusedTagError("tag 258 holds duplicate items")
    return items


def _python(value: Any, immutable: bool) -> Any:
    if type(value) is not list or len(value) != 2 or type(value[0]) is not str:
        raise RefusedTagError("tag 27 must hold [type name, argument]")
    name, argument = value
    if name == "tuple" and type(argument) is list:
        return tuple(argument)
    if name == "frozenset" and type(argument) is list:
        items = frozenset(argument)
        if len(items) != len(argument):
            raise RefusedTagError("frozenset holds duplicate items")
        return items
    if name == "time":
        return dt.time.fromisoformat(_text(argument, 27))
    if name == "datetime":
        when = dt.datetime.fromisoformat(_text(argument, 27))
        if when.tzinfo is not None:
            raise RefusedTagError("a naive datetime with an offset")
        return when
    if name == "timedelta" and type(argument) is list and len(argument) == 3 and all(type(a) is int for a in argument):
        return dt.timedelta(days=argument[0], seconds=argument[1], microseconds=argument[2])
    raise RefusedTagError(f"tag 27 type {name[:40]!r} is not one durably writes")


def _text(value: Any, tag: int) -> str:
    if type(value) is not str or len(value) > 64:
        raise RefusedTagError(f"tag {tag} must hold a short text")
    return value


def _refuse(tag: int) -> Callable[[Any, bool], Any]:
    def refuse(value: Any, immutable: bool) -> Any:
        raise RefusedTagError(f"tag {tag} is not one durably writes")

    return refuse


def refuse_unknown(tag: cbor2.CBORTag, immutable: bool) -> Any:
    """``tag_hook``: every tag without a decoder of its own is refused.

    cbor2 6 calls it as ``tag_hook(tag, immutable)`` (mypy --strict found the
    old ``(decoder, tag)`` signature, which raised ``AttributeError`` instead).
    """
    raise RefusedTagError(f"tag {tag.tag} is not one durably writes")


#: Tags cbor2 decodes natively (cbor2 6: found by decoding each number): each
#: one is either durably's own, with a strict decoder here, or refused.
_NATIVE = (0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004, 43000, 55799)

SEMANTIC_DECODERS: dict[int, Any] = {tag: _refuse(tag) for tag in _NATIVE}
SEMANTIC_DECODERS.update(
    {
        0: _datetime,
        1004: _date,
        2: _bignum(False),
        3: _bignum(True),
        4: _decimal,
        37: _uuid,
        258: _set,
        _PYTHON: _python,
    }
)
