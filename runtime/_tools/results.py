"""What a tool's result becomes in the journal.

The journal stores the standard library's value types exactly (the codec
tags them: datetimes, dates, times, durations, Decimal, UUID, tuple, set,
frozenset, bytes). The user's own classes are a different matter: decoding
must never import a class named by stored bytes (a forged frame would choose
what code runs), so an Enum member, a dataclass or a pydantic model is
journaled as its data, by one rule:

* an ``Enum`` member (``StrEnum``, ``IntEnum``, ``IntFlag`` too) -> its ``value``;
* a dataclass instance -> a dict of its fields;
* a pydantic model -> a dict of its fields (and extra fields);

applied recursively. Where the tool's return annotation names the type,
``Tool.load_result`` rebuilds it exactly (pydantic validates the data into
it); the conversation the model sees holds the data. Any other object is left
for the codec, which refuses it with its field path.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from typing import Any

_PLAIN = (str, int, float, bool, bytes, type(None))
_MAX_DEPTH = 64  # deeper values are left as they are: the codec reports the depth with its path


def journal_form(value: Any, _depth: int = 0) -> Any:
    """``value`` with Enum members, dataclasses and pydantic models replaced by
    their data (see the module docstring); containers are copied only when
    something inside them changed. Never raises."""
    kind = type(value)
    if kind in _PLAIN or _depth > _MAX_DEPTH:
        return value
    if isinstance(value, enum.Enum):
        return journal_form(value.value, _depth + 1)
    pydantic = sys.modules.get("pydantic")  # a value can be a pydantic model only once pydantic is loaded
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        data = {name: getattr(value, name) for name in type(value).model_fields}
        data.update(value.model_extra or {})
        return journal_form(data, _depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return journal_form(data, _depth + 1)
    if kind is dict:
        out = {k: journal_form(v, _depth + 1) for k, v in value.items()}
        return value if all(out[k] is v for k, v in value.items()) else out
    if kind in (list, tuple, set, frozenset):
        items = [journal_form(v, _depth + 1) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=False)) else kind(items)
    return value
