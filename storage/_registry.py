"""Opening a store from a URL: ``open_store("sqlite:///agents.db")``.

Adapters register their URL scheme in the ``durably.stores`` entry point group
(the mechanism pytest and SQLAlchemy use for plugins), so a third-party package
that declares::

    [project.entry-points."durably.stores"]
    redis = "my_package.store:RedisStore"

is found by ``open_store("redis://...")`` once installed. The class must accept
the URL as its only positional argument and implement the SPI. durably's own
schemes (``BUILTIN``, the entry points it declares) are found without reading
the installed packages' metadata.
"""

from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING

from ._errors import ArgumentTypeError, InvalidArgumentError, InvalidStoreURLError, UnknownSchemeError
from ._spi import Store
from ._url_redaction import redact_url

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

ENTRY_POINT_GROUP = "durably.stores"

_registered: dict[str, type] = {}
#: durably's own schemes: the entry points its ``pyproject.toml`` declares (a test keeps the two
#: equal), resolved without ``importlib.metadata``, whose import and scan of every installed
#: package cost a ``durably`` command more than opening the store and reading it.
BUILTIN = {
    "memory": "durably.adapters.memory:MemoryStore",
    "sqlite": "durably.adapters.sqlite:SQLiteStore",
    "file": "durably.adapters.filesystem:FileSystemStore",
    "s3": "durably.adapters.s3:S3Store",
    "postgresql": "durably.adapters.postgres:PostgresStore",
    "postgres": "durably.adapters.postgres:PostgresStore",
}
#: RFC 3986's scheme: a letter, then letters, digits, '+', '-' or '.'.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def register_store(scheme: str, factory: type) -> None:
    """Register ``factory`` for ``scheme`` in this process.

    For adapters that are not installed as a package (tests, notebooks); installed
    adapters use the entry point group instead. A later registration wins, and a
    registration wins over an installed entry point of the same scheme.

    Args:
        scheme: The URL scheme, e.g. ``"redis"``; matched case-insensitively.
        factory: The store class: it takes the URL as its only positional argument.

    Raises:
        InvalidArgumentError: When ``scheme`` is not a URL scheme (RFC 3986: a
            letter, then letters, digits, ``+``, ``-`` or ``.``).
        ArgumentTypeError: When ``scheme`` is not a str or ``factory`` is not callable.
    """
    if not isinstance(scheme, str):
        raise ArgumentTypeError(f"register_store: scheme must be a str, got {type(scheme).__name__}")
    if _SCHEME.fullmatch(scheme) is None:
        raise InvalidArgumentError(
            f"register_store: {scheme!r} is not a URL scheme (a letter, then letters, digits, '+', '-' or '.')"
        )
    if not callable(factory):
        raise ArgumentTypeError(f"register_store: factory must be a store class, got {type(factory).__name__}")
    _registered[scheme.lower()] = factory


def known_schemes() -> list[str]:
    """List the schemes ``open_store`` can handle now.

    Returns:
        The schemes of the installed ``durably.stores`` entry points, of durably's
            own adapters and of ``register_store``, sorted.
    """
    names = {ep.name for ep in _entry_points()}
    return sorted(names | set(BUILTIN) | set(_registered))


def open_store(url: str) -> Store:
    """Build the store for ``url`` (no I/O); use it as ``async with open_store(url) as store``.

    The adapter is looked up by the URL's scheme (case-insensitively): first
    ``register_store``, then durably's own adapters, then the installed
    ``durably.stores`` entry points.

    Args:
        url: ``scheme://...``: ``memory://name``, ``sqlite:///path/to.db``,
            ``s3://bucket/prefix?endpoint_url=...`` or any scheme an installed
            package registers.

    Returns:
        The adapter's store for ``url``, not yet opened.

    Raises:
        UnknownSchemeError: (listing the known schemes) when ``url`` has no
            scheme or no adapter handles it.
        InvalidStoreURLError: (its base class, a ``ValueError``) when ``url`` is not a
            ``str`` or the adapter rejects it.
        ExtraNotInstalledError: (an ``ImportError``) when the scheme's adapter needs an
            optional extra that is not installed (``s3``, ``postgres``).
    """
    if not isinstance(url, str):
        raise InvalidStoreURLError(f"a store URL is a string, got {type(url).__name__}", url=repr(url))
    head, colon, _ = url.partition(":")
    scheme = head.lower() if colon and _SCHEME.fullmatch(head) else ""
    if not scheme:
        shown = redact_url(url)
        raise UnknownSchemeError(f"{shown!r} has no scheme; known schemes: {', '.join(known_schemes())}", url=shown)
    factory = _registered.get(scheme)
    if factory is None and scheme in BUILTIN:
        module, _, name = BUILTIN[scheme].partition(":")
        factory = getattr(importlib.import_module(module), name)
    if factory is None:
        matches = [ep for ep in _entry_points() if ep.name == scheme]
        if not matches:
            raise UnknownSchemeError(
                f"no durably store adapter handles {scheme!r} URLs; known schemes: {', '.join(known_schemes())}",
                url=redact_url(url),
            )
        factory = matches[0].load()
    store: Store = factory(url)
    return store


def _entry_points() -> list[EntryPoint]:
    """The installed ``durably.stores`` entry points. ``importlib.metadata`` is imported
    here, at the first ``open_store``, not with durably (it costs more than the rest of
    ``import durably._runtime``'s dependencies)."""
    from importlib.metadata import entry_points

    return list(entry_points(group=ENTRY_POINT_GROUP))
