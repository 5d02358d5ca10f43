"""Leases of the S3 adapter (``CAP_LEASES``): one small JSON object per stream, changed only by conditional PUTs.

The lease of a stream is the object ``data/N/A/lease`` (see ``s3_keys``)::

    {"v": 1, "owner": "worker-7", "token": 3, "expires_at": 1767225600.25, "ttl": 30.0, "nonce": "9f..."}

* **Acquire** is a compare-and-swap: GET the object with its ETag, decide,
  then PUT with ``If-None-Match: *`` (no lease object yet) or ``If-Match:
  <etag>`` (the version decided on). S3 applies conditional writes atomically,
  so of workers racing for one free lease exactly one PUT succeeds; the others
  get 412, read the object again and find it held (``None``). Every PUT carries
  a fresh random ``nonce``, so no two versions of the object are the same
  bytes and an ETag (a content hash) never repeats: a stale ``If-Match`` can
  never succeed by accident.
* **Tokens** (fencing tokens, Kleppmann 2016): the first lease of a stream has
  token 1; taking over an expired or released lease writes the previous token
  + 1; a renewal (the same owner, while others must still treat its lease as
  held) keeps the token. An owner that comes back after its lease ran out, or
  after releasing it, takes it anew with token + 1: someone may have acted on
  the expiry meanwhile. The token lives in the object and every change is a
  swap on the version read, so tokens never go back. **Release** therefore
  does not delete the object: it marks it released (``expires_at`` = 0, same
  owner and token, with ``If-Match``). ``delete_stream`` keeps it too: it ends
  the lease (owner ``PURGED_OWNER``, ``expires_at`` = 0, ``S3Leases.end``) and
  deletes everything else under the stream's prefix, so a stream purged and
  started anew counts on from the old token. Leases are not index entries: a
  stream with only a lease is not listed by ``list_streams``.
* **Clocks.** ``expires_at`` is unix seconds of the *acquiring client's* clock
  (S3 offers no clock to compare with), so the clocks of workers sharing a
  bucket must agree to well under the ttl (NTP keeps them within milliseconds).
  As a safety margin, another worker treats a lease as expired only after
  ``expires_at + ttl * SKEW_FRACTION`` (a tenth of the holder's ttl, stored in
  the object); ``get_lease`` answers by the same rule, so it returns None
  exactly when someone else could take the lease now. The holder itself must
  consider its lease lost at ``expires_at`` and renew well before.
* **Faults.** Requests go through the adapter's ``call``/``get`` (tenacity
  retries of throttling, 5xx, 409 and dropped connections, see ``s3_retry``).
  A conditional PUT whose outcome is unknown is resolved by reading the object
  back: a 412 after a retry, or retries that ran out, may hide our own PUT
  having landed; the nonce tells. A swap that lost to another write is decided
  again on the version read back, with backoff, under the same retry policy.

Cost: ``acquire_lease`` and ``release_lease`` are one GET and one PUT each
(plus one GET after a lost race); ``get_lease`` is one GET.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from durably.storage._errors import CorruptRecordError, InvalidRequestError, StoreUnavailableError
from durably.storage._spi import Lease, StreamId, check_lease

from ._keys import StreamKeys
from ._retry import RetryPolicy, retrying

#: Version of the lease object's JSON layout.
LEASE_VERSION = 1
#: Others treat a lease as expired ``ttl * SKEW_FRACTION`` seconds after its ``expires_at``.
SKEW_FRACTION = 0.1
#: The owner a purged stream's lease object names: the holder's name goes with the stream, the token stays.
PURGED_OWNER = "(purged)"

#: ``call(operation, *, expect=(), **params)``: one retried S3 request (see ``S3Requests.call``).
Call = Callable[..., Awaitable[dict[str, Any]]]
#: ``get(key)``: the object's bytes and ETag, or None when absent, retried (see ``S3Requests.get``).
Get = Callable[[str], Awaitable[tuple[bytes, str] | None]]


@dataclass(frozen=True, slots=True)
class LeaseObject:
    """One version of a stream's lease object: ``owner``, ``token``, ``expires_at`` and ``ttl`` in
    seconds (``expires_at`` = 0: released), and the ``nonce`` that makes this version's bytes unique."""

    owner: str
    token: int
    expires_at: float
    ttl: float
    nonce: str

    @property
    def released(self) -> bool:
        """True once the holder gave the lease up (``expires_at`` = 0)."""
        return self.expires_at <= 0

    def held(self, now: float) -> bool:
        """Whether, at ``now`` (unix seconds), others must still treat the lease as held: not
        released and not past ``expires_at`` plus the skew allowance."""
        return not self.released and now <= self.expires_at + self.ttl * SKEW_FRACTION

    def encode(self) -> bytes:
        """The object's bytes (JSON, see the module docstring)."""
        return json.dumps(
            {
                "v": LEASE_VERSION,
                "owner": self.owner,
                "token": self.token,
                "expires_at": self.expires_at,
                "ttl": self.ttl,
                "nonce": self.nonce,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes, stream: StreamId) -> LeaseObject:
        """Parse the object's bytes. Raises ``CorruptRecordError`` when they are not a lease object."""
        try:
            fields = json.loads(data)
            lease = cls(fields["owner"], fields["token"], fields["expires_at"], fields["ttl"], fields["nonce"])
            valid = (
                fields.get("v") == LEASE_VERSION
                and isinstance(lease.owner, str)
                and lease.owner
                and type(lease.token) is int
                and lease.token >= 1
                and all(isinstance(x, (int, float)) and math.isfinite(x) for x in (lease.expires_at, lease.ttl))
                and lease.ttl > 0
                and isinstance(lease.nonce, str)
            )
        except (ValueError, TypeError, KeyError):
            valid = False
        if not valid:
            raise CorruptRecordError("the lease object is malformed", stream=stream)
        return lease


def _fresh_nonce() -> str:
    return secrets.token_hex(16)


class _Lost(Exception):
    """A conditional PUT lost to another write; ``state`` is the object as read back (None: absent)."""

    def __init__(self, state: tuple[LeaseObject, str] | None) -> None:
        super().__init__("the lease object changed")
        self.state = state


class S3Leases:
    """The lease operations of one ``S3Store`` (see the module docstring).

    In: the store's retried ``call`` and ``get`` functions, its key ``prefix``
    (``""`` or ending in ``/``), its retry ``policy``, and ``clock`` (unix
    seconds; ``time.time`` unless a test fixes time). The store checks it is
    open before calling in.
    """

    def __init__(
        self, call: Call, get: Get, *, prefix: str, policy: RetryPolicy, clock: Callable[[], float] = time.time
    ) -> None:
        self.call = call
        self.get = get
        self.prefix = prefix
        self.policy = policy
        self.clock = clock

    async def acquire(self, stream: StreamId, owner: str, ttl: float) -> Lease | None:
        """Take or renew the lease of ``stream`` for ``owner`` for ``ttl`` seconds; see
        ``LeaseStore.acquire_lease`` and ``take``, which it is without the renewal flag."""
        taken = await self.take(stream, owner, ttl)
        return None if taken is None else taken[0]

    async def take(self, stream: StreamId, owner: str, ttl: float) -> tuple[Lease, bool] | None:
        """Take or renew the lease of ``stream`` for ``owner`` for ``ttl`` seconds.

        Out: the lease now held (``expires_at`` = the clock before the PUT +
        ``ttl``) and whether it kept the previous token (a renewal: no new
        fencing token was granted), or None when another owner's lease is still
        held (see the skew allowance above). Raises ``InvalidRequestError`` for
        an empty owner or a ``ttl`` that is not a finite number > 0,
        ``CorruptRecordError`` for a malformed lease object,
        ``StoreUnavailableError`` when S3 cannot be reached in time or the object
        kept changing under concurrent writers (then the lease may or may not be
        ours: it runs out after ``ttl``).
        """
        check_lease(owner, ttl)
        key = self._key(stream)
        state = await self._read(key, stream)
        try:
            async for attempt in retrying(self.policy, lambda exc: isinstance(exc, _Lost)):
                with attempt:
                    current, etag = state if state is not None else (None, None)
                    now = self.clock()
                    if current is None:
                        token = 1
                    elif not current.held(now):
                        token = current.token + 1  # a takeover of a released or expired lease, also by its owner
                    elif current.owner == owner:
                        token = current.token  # a renewal
                    else:
                        return None
                    new = LeaseObject(owner, token, now + float(ttl), float(ttl), _fresh_nonce())
                    try:
                        await self._swap(key, stream, etag, new)
                    except _Lost as lost:
                        state = lost.state
                        raise
                    return Lease(stream, owner, token, new.expires_at), current is not None and token == current.token
        except _Lost:
            pass
        raise StoreUnavailableError(f"the lease of {stream} kept changing under concurrent writers")

    async def release(self, lease: Lease) -> None:
        """Give ``lease`` up if its owner still holds the stream's lease with its token; see
        ``LeaseStore.release_lease``. Otherwise (taken over, released, purged) a no-op.

        Marks the object released instead of deleting it, so the next token is
        still greater. Raises ``InvalidRequestError`` when ``lease`` is not a
        ``Lease``, ``StoreUnavailableError`` as ``acquire`` does.
        """
        if not isinstance(lease, Lease):
            raise InvalidRequestError(f"release_lease needs a Lease, got {type(lease).__name__}")
        key = self._key(lease.stream)
        state = await self._read(key, lease.stream)
        try:
            async for attempt in retrying(self.policy, lambda exc: isinstance(exc, _Lost)):
                with attempt:
                    if state is None:
                        return
                    current, etag = state
                    if current.released or current.owner != lease.owner or current.token != lease.token:
                        return
                    released = replace(current, expires_at=0.0, nonce=_fresh_nonce())
                    try:
                        await self._swap(key, lease.stream, etag, released)
                    except _Lost as lost:
                        state = lost.state
                        raise
                    return
        except _Lost:
            pass
        raise StoreUnavailableError(f"the lease of {lease.stream} kept changing under concurrent writers")

    async def end(self, stream: StreamId) -> None:
        """End the lease of ``stream`` whoever holds it, keeping its token (a purge calls this).

        The object stays, marked released, so the next lease of the stream id
        gets a greater token: a holder from before the purge never outranks a
        new one. No lease object: a no-op. Raises ``CorruptRecordError`` for a
        malformed lease object, ``StoreUnavailableError`` as ``acquire`` does.
        """
        key = self._key(stream)
        state = await self._read(key, stream)
        try:
            async for attempt in retrying(self.policy, lambda exc: isinstance(exc, _Lost)):
                with attempt:
                    if state is None or state[0].owner == PURGED_OWNER:
                        return
                    current, etag = state
                    try:
                        ended = replace(current, owner=PURGED_OWNER, expires_at=0.0, nonce=_fresh_nonce())
                        await self._swap(key, stream, etag, ended)
                    except _Lost as lost:
                        state = lost.state
                        raise
                    return
        except _Lost:
            pass
        raise StoreUnavailableError(f"the lease of {stream} kept changing under concurrent writers")

    async def current(self, stream: StreamId) -> Lease | None:
        """The lease of ``stream`` others must treat as held now, or None; see ``LeaseStore.get_lease``.

        Raises ``CorruptRecordError`` for a malformed lease object, ``StoreUnavailableError``
        when S3 cannot be reached in time.
        """
        state = await self._read(self._key(stream), stream)
        if state is None or not state[0].held(self.clock()):
            return None
        found = state[0]
        return Lease(stream, found.owner, found.token, found.expires_at)

    async def grants(self, stream: StreamId, token: int) -> bool:
        """Whether the latest lease grant of ``stream`` has ``token`` and no purge ended it: one GET.

        Expired or released leases still count (nobody was granted a newer
        token). Raises ``CorruptRecordError`` for a malformed lease object,
        ``StoreUnavailableError`` when S3 cannot be reached in time.
        """
        state = await self._read(self._key(stream), stream)
        return state is not None and state[0].token == token and state[0].owner != PURGED_OWNER

    def _key(self, stream: StreamId) -> str:
        return StreamKeys(self.prefix, stream).lease

    async def _read(self, key: str, stream: StreamId) -> tuple[LeaseObject, str] | None:
        found = await self.get(key)
        return None if found is None else (LeaseObject.decode(found[0], stream), found[1])

    async def _swap(self, key: str, stream: StreamId, etag: str | None, new: LeaseObject) -> None:
        """PUT ``new`` if the object is still the version ``etag`` (None: still absent).

        Returns when ``new`` landed. Raises ``_Lost`` with the version read back
        when another write came first, ``StoreUnavailableError`` when retries ran
        out and a read-back does not show ``new`` either.
        """
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        try:
            # 412: the condition failed; 404: If-Match on an object deleted meanwhile (a purge).
            await self.call("put_object", Key=key, Body=new.encode(), expect=(404, 412), **condition)
            return
        except ClientError:
            pass  # another write came first, or a retried request whose first attempt landed
        except StoreUnavailableError:
            state = await self._read(key, stream)  # our PUT may have landed before the answers were lost
            if state is not None and state[0].nonce == new.nonce:
                return
            raise
        state = await self._read(key, stream)
        if state is not None and state[0].nonce == new.nonce:
            return
        raise _Lost(state)
