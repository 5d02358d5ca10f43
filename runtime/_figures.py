"""One check for every number (and every yes/no) that enters durably from outside.

Budgets, budget extensions, policies and model usage are compared with
``>=``; a NaN compares false with everything, so a NaN limit never bites and
a NaN cost never adds up. Every such figure passes through ``check_figure``;
every bool option through ``check_bool`` (a str is truthy: ``"no"`` would mean yes).
"""

from __future__ import annotations

import math
from typing import Any

from durably.errors import ArgumentTypeError, InvalidArgumentError


def check_figure(owner: str, name: str, value: Any, *, integer: bool = False, optional: bool = True) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite number >= 0 (an int if
    ``integer``; None allowed if ``optional``). ``owner`` and ``name`` say where
    it came from. A NaN compares false with everything, so a NaN limit would
    never bite: every figure that enters durably passes through here."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise InvalidArgumentError(f"{owner}: {name} must be {'an int' if integer else 'a number'}, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"{owner}: {name} must be finite and not negative, got {value!r}")


def check_bool(owner: str, name: str, value: object) -> None:
    """Raise ``ArgumentTypeError`` unless ``value`` is a bool: ``"no"`` or ``0`` is not one
    (a str is truthy, so ``approved="no"`` would approve). ``owner`` and ``name`` say where it came from."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{owner}: {name} must be True or False, got {type(value).__name__} {value!r}")
