"""Counting the tenacity retry controllers a store builds, to check that its calls go through ``durably.storage.retried``."""

from __future__ import annotations

from typing import Any

import pytest
import tenacity


def count_controllers(monkeypatch: pytest.MonkeyPatch) -> list[tenacity.AsyncRetrying]:
    """The list every ``tenacity.AsyncRetrying`` built from now on is added to (undone with ``monkeypatch``)."""
    built: list[tenacity.AsyncRetrying] = []
    real_init = tenacity.AsyncRetrying.__init__

    def counting_init(self: tenacity.AsyncRetrying, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(tenacity.AsyncRetrying, "__init__", counting_init)
    return built
