"""Store URLs, parsed and checked the same way by every adapter.

``scheme://netloc/path?name=value&...``: the scheme must be one the adapter
serves, every query option must be one it knows, given once, with a value its
converter accepts; anything else is an ``InvalidStoreURLError`` (a
``ValueError``) that names the URL and the option, raised by the store's
constructor before any I/O. A local path's parent directory must exist:
``?create=1`` asks for the missing directories to be made (owner-only), so a
mistyped ``sqlite:////nonexistent/dir/x.db`` is refused instead of creating
folders at the filesystem root.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ._errors import InvalidStoreURLError
from ._url_redaction import redact_url

#: The option every adapter with a local path takes: create missing parent directories.
CREATE = "create"


def flag(raw: str) -> bool:
    """A boolean URL option: ``1 true yes on`` / ``0 false no off`` (any case) or empty (false).

    Raises ``ValueError`` for anything else."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean flag: {raw!r}")


@dataclass(frozen=True, slots=True)
class StoreURL:
    """A parsed store URL: ``scheme`` (lower case), ``netloc``, ``path`` (as in the URL,
    percent-escapes kept), ``options`` (name -> converted value, only those given) and
    ``passthrough`` (the unknown options, in order, when the adapter passes them on)."""

    url: str
    scheme: str
    netloc: str
    path: str
    options: dict[str, Any] = field(default_factory=dict)
    passthrough: list[tuple[str, str]] = field(default_factory=list)


def seconds(raw: str) -> float:
    """A URL option holding a finite number of seconds (``float`` also takes ``nan`` and ``inf``).

    Args:
        raw: The option's text.

    Returns:
        The number.

    Raises:
        ValueError: When it is not a finite number.
    """
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError("not a finite number of seconds")
    return value


def parse_store_url(
    url: str,
    schemes: tuple[str, ...] | None,
    options: Mapping[str, Callable[[str], Any]],
    *,
    display: str | None = None,
    passthrough: bool = False,
) -> StoreURL:
    """Parse ``url`` for an adapter serving ``schemes`` and knowing ``options``.

    In: ``schemes`` the adapter serves (lower case; None: any, for a class that
    subclasses register under schemes of their own); ``options`` maps each option name to a converter (``int``, ``float``,
    ``flag``, ``str`` or your own; a ``ValueError`` from it means a bad value);
    ``display``: the URL as errors may show it (default: ``redact_url(url)``, every
    password and secret option masked); ``passthrough``:
    unknown options are returned in ``passthrough`` instead of refused (libpq's).
    Raises ``InvalidStoreURLError`` for another scheme, a scheme not followed by
    ``//`` (``sqlite:/a.db``, ``sqlite:a.db``), a URL ``urlsplit`` cannot read (a
    malformed host), a NUL character (also percent-encoded), an unknown or
    repeated option (a passed-through one too), or a value its converter refuses.
    """
    if not isinstance(url, str):
        raise InvalidStoreURLError(f"a store URL is a string, got {type(url).__name__}", url=repr(url))
    shown = display if display is not None else redact_url(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL": a '[' in the host
        raise InvalidStoreURLError(f"{shown!r} is not a URL this adapter can read: {exc}", url=shown) from None
    if "\x00" in unquote(url):
        raise InvalidStoreURLError(f"{shown!r} holds a NUL character (%00): no path or option can", url=shown)
    scheme = parts.scheme.lower()
    if schemes is not None and scheme not in schemes:
        raise InvalidStoreURLError(f"{shown!r} is not a {' or '.join(s + '://' for s in schemes)} URL", url=shown)
    if not url.partition(":")[2].startswith("//"):
        # "sqlite:/agents.db" splits as "sqlite:///agents.db" does (the relative path agents.db): refuse
        # the lookalike instead of guessing which path was meant.
        raise InvalidStoreURLError(
            f"{shown!r} is not a {scheme}:// URL: the scheme is followed by '//' "
            "(sqlite:///relative.db, sqlite:////absolute/path.db)"
            if scheme == "sqlite"
            else f"{shown!r} is not a {scheme}:// URL: the scheme is followed by '//'",
            url=shown,
        )
    given: dict[str, Any] = {}
    unknown: list[tuple[str, str]] = []
    for name, raw in parse_qsl(parts.query, keep_blank_values=True):
        if name not in options:
            if passthrough:
                if any(name == seen for seen, _ in unknown):
                    raise InvalidStoreURLError(
                        f"{scheme}:// URL option {name!r} is given twice in {shown!r}", url=shown
                    )
                unknown.append((name, raw))
                continue
            known = ", ".join(sorted(options)) or "none"
            raise InvalidStoreURLError(
                f"unknown {scheme}:// URL option {name!r} in {shown!r} (known: {known})", url=shown
            )
        if name in given:
            raise InvalidStoreURLError(f"{scheme}:// URL option {name!r} is given twice in {shown!r}", url=shown)
        try:
            given[name] = options[name](raw)
        except ValueError as exc:
            raise InvalidStoreURLError(
                f"{scheme}:// URL option {name}={raw!r} is not valid: {exc}", url=shown
            ) from None
    return StoreURL(shown, scheme, parts.netloc, parts.path, given, unknown)


def check_parent(path: Path, *, create: bool, url: str) -> None:
    """Refuse ``path`` when its parent directory does not exist and ``create`` is false.

    Blocking (one ``stat``): call it from a worker thread in async code. Raises
    ``InvalidStoreURLError`` naming the missing directory and the ``?create=1`` remedy.
    """
    parent = path.absolute().parent
    if not create and not parent.is_dir():
        raise InvalidStoreURLError(
            f"{str(parent)!r} is not a directory (from {url!r}); add ?create=1 to the URL to "
            "create the missing directories",
            url=url,
        )
