"""The result an operator reports for a call that happened ("it happened"): JSON text, parsed strictly.

``durably approve --happened --result`` and the console's "It happened" box
share this parser, so both refuse the same things: text that is not JSON,
``NaN`` and ``Infinity`` (Python's ``json`` accepts them; no tool returns
them and other readers of the journal would not parse them), and nesting
deeper than a journal record can hold.
"""

from __future__ import annotations

import json
from typing import Any

from durably.errors import InvalidCommandError

#: Containers inside containers a reported result may have (a record holds it two levels down,
#: and the codec stores at most 64).
MAX_DEPTH = 32


def parse_reported_result(text: str) -> Any:
    """The value of ``text`` (JSON).

    Raises ``InvalidCommandError`` when it is not JSON, holds ``NaN`` or
    ``Infinity``, or nests more than ``MAX_DEPTH`` containers deep.
    """
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidCommandError(f"the result nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise InvalidCommandError(f"the result is not JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise InvalidCommandError(f"the result nests deeper than {MAX_DEPTH} levels")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a tool returns")


def _depth(value: Any) -> int:
    """How many containers deep ``value`` goes (walked without recursion)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth + 1)
            if deepest > MAX_DEPTH:
                return deepest
            stack.extend((child, depth + 1) for child in item)
    return deepest
