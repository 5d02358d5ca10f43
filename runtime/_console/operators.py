"""Who is asking: the console's operators, each with a name, a role and their own token.

An operators file (``durably ui --operators FILE``) is TOML, one table per operator::

    [[operator]]
    name = "alice"
    role = "approver"          # or "read-only"
    token_hash = "scrypt$16384$8$1$<salt, base64>$<hash, base64>"

``hash_token`` makes a ``token_hash`` (``durably ui --hash-token`` prints one),
so the file holds no token an attacker who reads it could replay. A request's
token is checked against every hash with scrypt (RFC 7914) and
``hmac.compare_digest``; a token once verified is remembered by its SHA-256
for the life of the process (and the last 1,024 wrong ones too), so the slow
hash runs once per token, not once per request. ``--token`` is one unnamed operator with the approver role.

The name a decision records comes from the credential that made the request,
never from a field of the form.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import tomllib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from durably.errors import ConsoleConfigError

APPROVER = "approver"
READ_ONLY = "read-only"
ROLES = (APPROVER, READ_ONLY)
#: scrypt cost: N, r, p (about 16 MiB and a few tens of milliseconds per check).
SCRYPT_COST = (2**14, 8, 1)
MIN_TOKEN_CHARS = 16
_MAXMEM = 256 * 1024 * 1024
_REFUSED_KEPT = 1024


@dataclass(frozen=True, slots=True)
class Operator:
    """One person (or the holder of ``--token``) the console knows: ``name`` and ``role``."""

    name: str
    role: str

    @property
    def may_decide(self) -> bool:
        """Whether this operator may change anything (approve, deny, "it happened")."""
        return self.role == APPROVER


#: Who a request is when the console has no credentials at all (loopback, no token).
ANONYMOUS = Operator("anonymous (no login)", APPROVER)
#: The holder of ``--token``: every holder of that token is this one operator.
TOKEN_HOLDER = Operator("token holder", APPROVER)


def hash_token(token: str, *, salt: bytes | None = None) -> str:
    """The ``token_hash`` of ``token`` for an operators file (scrypt, a random salt).

    Raises ``ConsoleConfigError`` when the token is shorter than 16 characters.
    """
    if len(token) < MIN_TOKEN_CHARS:
        raise ConsoleConfigError(f"an operator's token must be at least {MIN_TOKEN_CHARS} characters")
    salt = salt if salt is not None else secrets.token_bytes(16)
    n, r, p = SCRYPT_COST
    digest = hashlib.scrypt(token.encode(), salt=salt, n=n, r=r, p=p, maxmem=_MAXMEM, dklen=32)
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(digest)}"


@dataclass(frozen=True, slots=True)
class _Credential:
    operator: Operator
    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    def matches(self, token: str) -> bool:
        """Blocking (scrypt): run it in a worker thread."""
        computed = hashlib.scrypt(
            token.encode(), salt=self.salt, n=self.n, r=self.r, p=self.p, maxmem=_MAXMEM, dklen=32
        )
        return hmac.compare_digest(computed, self.digest)


class Operators:
    """The operators a console accepts, and who a presented token belongs to."""

    def __init__(self, credentials: Iterable[_Credential] = (), token: str | None = None) -> None:
        self._credentials = list(credentials)
        self._token = token
        self._known: dict[bytes, Operator] = {}
        self._refused: OrderedDict[bytes, None] = OrderedDict()  # recent wrong tokens, not hashed again

    @classmethod
    def build(cls, *, token: str | None = None, file: str | Path | None = None) -> Operators:
        """The operators of ``file`` (an operators file) plus ``token`` (one unnamed approver).

        Raises ``ConsoleConfigError`` for a token shorter than 16 characters and
        for a file that cannot be read or does not have the shape above (the
        message says which entry and what is wrong).
        """
        if token is not None and len(token) < MIN_TOKEN_CHARS:
            raise ConsoleConfigError(f"the console token must be at least {MIN_TOKEN_CHARS} characters")
        return cls(_read_file(Path(file)) if file is not None else (), token)

    @property
    def required(self) -> bool:
        """Whether every request must carry a token (any credential is configured)."""
        return bool(self._credentials) or bool(self._token)

    async def identify(self, token: str) -> Operator | None:
        """The operator whose token ``token`` is, or None. Checks every hash when needed, off the event loop."""
        if not token:
            return None
        if self._token is not None and hmac.compare_digest(token.encode(), self._token.encode()):
            return TOKEN_HOLDER
        fingerprint = hashlib.sha256(token.encode()).digest()
        known = self._known.get(fingerprint)
        if known is not None:
            return known
        if fingerprint in self._refused:
            return None
        for credential in self._credentials:
            if await anyio.to_thread.run_sync(credential.matches, token):
                self._known[fingerprint] = credential.operator
                return credential.operator
        self._refused[fingerprint] = None
        if len(self._refused) > _REFUSED_KEPT:
            self._refused.popitem(last=False)
        return None


def _read_file(path: Path) -> list[_Credential]:
    try:
        parsed = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConsoleConfigError(f"cannot read the operators file {path}: {exc}") from None
    entries = parsed.get("operator")
    if not isinstance(entries, list) or not entries:
        raise ConsoleConfigError(f"{path}: no [[operator]] entries")
    credentials, names = [], set()
    for number, entry in enumerate(entries, 1):
        where = f"{path}: operator {number}"
        if not isinstance(entry, dict) or set(entry) != {"name", "role", "token_hash"}:
            raise ConsoleConfigError(f"{where}: needs exactly name, role and token_hash")
        name, role, token_hash = entry["name"], entry["role"], entry["token_hash"]
        if not isinstance(name, str) or not name.strip() or not name.isprintable():
            raise ConsoleConfigError(f"{where}: the name must be printable text")
        if name in names:
            raise ConsoleConfigError(f"{where}: {name!r} is named twice")
        if role not in ROLES:
            raise ConsoleConfigError(f"{where}: role {role!r} is not one of {', '.join(ROLES)}")
        names.add(name)
        credentials.append(_parse_hash(Operator(name, role), token_hash, where))
    return credentials


def _parse_hash(operator: Operator, token_hash: object, where: str) -> _Credential:
    refusal = f"{where}: token_hash is not one `durably ui --hash-token` prints"
    parts = token_hash.split("$") if isinstance(token_hash, str) else []
    if len(parts) != 6 or parts[0] != "scrypt":
        raise ConsoleConfigError(f"{refusal}: not scrypt$N$r$p$salt$hash")
    try:
        n, r, p = (int(x) for x in parts[1:4])
        salt, digest = base64.b64decode(parts[4], validate=True), base64.b64decode(parts[5], validate=True)
    except ValueError as exc:
        raise ConsoleConfigError(f"{refusal}: {exc}") from None
    if n < 2**14 or n & (n - 1) or not 1 <= r <= 32 or not 1 <= p <= 16 or 128 * n * r > _MAXMEM // 2:
        raise ConsoleConfigError(f"{refusal}: cost out of range (N >= 16384 and a power of 2, 128*N*r <= 128 MiB)")
    if len(salt) < 16 or len(digest) != 32:
        raise ConsoleConfigError(f"{refusal}: a 16-byte salt and a 32-byte hash are needed")
    return _Credential(operator, n, r, p, salt, digest)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
