"""Store URLs as people may see them: every password and secret option masked.

A store URL can carry credentials: ``postgresql://user:password@host/db``, a
``password=`` or ``sslpassword=`` option, another URL inside an option (the
PostgreSQL adapter's ``listen_dsn``, S3's ``endpoint_url``) with a password of
its own. ``redact_url`` masks each with ``***``; it is what errors, reprs,
logs, the command line and the console show. ``SecretScrubber`` is the last
line for text that embeds a URL it did not build (a driver's message, a
command's own line): built once from the URLs a process was given, it replaces
each URL by its redacted form and each secret in it by ``***`` in any text or
JSON-like value, and (``guarding_logs``) in every log record the process's
handlers write.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlencode, urlsplit, urlunsplit

#: What a masked secret reads as.
MASK = "***"

#: Query options whose value is a secret, by the words their names contain (lower case):
#: libpq's ``password`` and ``sslpassword``, and the usual names of keys and tokens.
_SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token", "credential", "signature", "sig", "apikey", "api_key")

#: A bare secret shorter than this is masked only inside its URL: replacing every
#: occurrence of a 1-3 character string would mangle all other text, and so short a
#: password is no secret anyway.
MIN_SCRUBBED_LENGTH = 4


def _secret_option(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _split(url: str) -> SplitResult | None:
    try:
        return urlsplit(url)
    except ValueError:  # "Invalid IPv6 URL": a '[' in the host
        return None


def _schemeless_userinfo(url: str) -> bool:
    """True for ``user:password@host...`` given without ``scheme://`` (a mistyped store URL)."""
    return "://" not in url and not url.startswith("//") and "@" in url


def redact_url(url: str) -> str:
    """``url`` with every secret replaced by ``***``, fit for logs, errors, reprs and pages.

    Masked: the password of the user part (``user:***@host``), the value of every query
    option whose name says it is a secret (``password``, ``sslpassword``, ``...token``,
    ``...secret``...), and, the same way, any URL given as an option's value. A URL
    ``urlsplit`` cannot read shows as its scheme only. Never raises; a non-str shows as
    its type's name.
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    if _schemeless_userinfo(url):  # "app:pw@db/agents": a URL without its scheme still hides its password
        return redact_url("//" + url)[2:]
    parts = _split(url)
    if parts is None:
        return url.partition(":")[0] + "://<unreadable URL>"
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    query = parts.query
    if query:
        options = parse_qsl(query, keep_blank_values=True)
        if any(_secret_option(k) or "://" in v for k, v in options):
            query = urlencode(
                [(k, MASK if _secret_option(k) else redact_url(v) if "://" in v else v) for k, v in options],
                safe="*:/@",
            )
    if not netloc and url.partition(":")[2].startswith("//"):
        # An empty host ("sqlite:////abs/path.db"): urlunsplit would drop its "//" and, with a
        # path that starts with "//", make the path's first segment read as a host.
        return (
            f"{parts.scheme}://{parts.path}"
            + (f"?{query}" if query else "")
            + (f"#{parts.fragment}" if parts.fragment else "")
        )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_secrets(url: str) -> frozenset[str]:
    """The secrets ``url`` holds (as written in it and percent-decoded): the user part's
    password, the values of its secret options and those of URLs nested in its options.
    Empty for a URL without any (or one ``urlsplit`` cannot read). Never raises."""
    if not isinstance(url, str):
        return frozenset()
    if _schemeless_userinfo(url):
        return url_secrets("//" + url)
    parts = _split(url)
    if parts is None:
        return frozenset()
    found: set[str] = set()
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        raw = userinfo.split(":", 1)[1]
        found.update((raw, unquote(raw)))
    for raw_pair in parts.query.split("&"):
        raw_name, _, raw_value = raw_pair.partition("=")
        name, value = unquote(raw_name.replace("+", " ")), unquote(raw_value.replace("+", " "))
        if _secret_option(name):
            found.update((raw_value, value))
        elif "://" in value:
            found.update(url_secrets(value))
    return frozenset(s for s in found if s and s != MASK)


class SecretScrubber:
    """Removes the secrets of some store URLs from any text or JSON-like value.

    In: the URLs (any number; None and "" are skipped). ``text`` replaces each URL,
    as given, by ``redact_url`` of it, then each secret it holds (``url_secrets``) of at
    least ``MIN_SCRUBBED_LENGTH`` characters by ``***``, wherever it appears: in a
    driver's error message, a table title, a log line. ``value`` does the same to every
    str (keys too) of nested dicts, lists and tuples. Neither raises.
    """

    def __init__(self, urls: Iterable[str | None] = ()) -> None:
        given = [u for u in urls if isinstance(u, str) and u]
        self._urls = sorted(((u, redact_url(u)) for u in given if redact_url(u) != u), key=lambda p: -len(p[0]))
        secrets = {s for u in given for s in url_secrets(u) if len(s) >= MIN_SCRUBBED_LENGTH}
        self._secrets = sorted(secrets, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._urls or self._secrets)

    def text(self, text: str) -> str:
        """``text`` with every URL redacted and every secret masked."""
        for url, shown in self._urls:
            text = text.replace(url, shown)
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text

    def value(self, value: Any) -> Any:
        """``value`` with ``text`` applied to every str in it (dict keys too); other values as they are."""
        if not self:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value

    @contextlib.contextmanager
    def guarding_logs(self) -> Iterator[None]:
        """While in the block, every log record made in this process is scrubbed as it is made:
        its message and its traceback text, whichever handler (configured before or during
        the block) writes it. For an application's entry point (a command); the record
        factory is put back afterwards."""
        if not self:
            yield
            return
        make = logging.getLogRecordFactory()

        def scrubbed(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = make(*args, **kwargs)
            message = record.getMessage()
            clean = self.text(message)
            if clean != message:
                record.msg, record.args = clean, None
            if record.exc_info:
                record.exc_text = self.text(logging.Formatter().formatException(record.exc_info))
            return record

        logging.setLogRecordFactory(scrubbed)
        try:
            yield
        finally:
            logging.setLogRecordFactory(make)
