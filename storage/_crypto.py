"""Encryption at rest: AES-256-GCM of frame payloads, and where the keys come from.

``AESGCMCipher`` is the ``FrameCipher`` the frame codec (``durably.storage._codec``)
calls after compressing a payload: compress *then* encrypt, because ciphertext
is indistinguishable from random bytes and would not compress. The sealed
payload is::

    1 byte  length of the key id (1..64)
    n bytes key id (ASCII: letters, digits, '.', '_', '-')
    12      nonce: 96 random bits, fresh for every frame
    ...     AES-GCM ciphertext followed by its 16-byte tag

The tag authenticates, besides the ciphertext, the associated data the codec
builds (header fields, namespace, agent id, seq: ``codec.associated_data``)
plus the key id, so a frame copied to another place, a flipped header flag or a
swapped key id fails with ``DecryptionError`` instead of decoding.

Keys come from a ``KeyProvider``: a current key id for new frames and a lookup
of any key id for old ones, which is all key rotation needs (new writes use
the new key, old frames stay readable under the id they name, ``durably
reencrypt`` rewrites them). Random 96-bit nonces keep the collision risk under
NIST SP 800-38D's bound (2^-32) for up to 2^32 frames per key: rotate well
before a key has sealed four billion frames.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ._codec import _HEADER, FLAG_ENCRYPTED, HEADER_SIZE, MAGIC
from ._errors import CorruptRecordError, DecryptionError, UnknownKeyError
from ._spi import StreamId
from durably.errors import ArgumentTypeError, KeyConfigError

KEY_SIZE = 32  # bytes: AES-256
NONCE_SIZE = 12  # bytes: the 96-bit nonce GCM is specified for (SP 800-38D, 8.2)
TAG_SIZE = 16
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_AAD_KEY_ID = struct.Struct(">B")


@runtime_checkable
class KeyProvider(Protocol):
    """Where the encryption keys come from.

    ``current_key_id()`` names the key new frames are sealed with (str);
    ``get(key_id)`` returns that key's 32 bytes and raises ``KeyError`` for an
    id it does not have. Both may be called from several threads at once. A key
    id must always name the same key: frames carry only the id.
    """

    def current_key_id(self) -> str: ...

    def get(self, key_id: str) -> bytes: ...


def _check_key(key_id: str, key: bytes) -> None:
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise KeyConfigError(f"key id {key_id!r} must be 1-64 characters of A-Z a-z 0-9 . _ -")
    if not isinstance(key, bytes) or len(key) != KEY_SIZE:
        raise KeyConfigError(f"key {key_id!r} must be {KEY_SIZE} bytes (AES-256), got {len(key) if isinstance(key, bytes) else type(key).__name__}")


def generate_key() -> bytes:
    """A fresh random 32-byte AES-256 key (from the OS's CSPRNG)."""
    return os.urandom(KEY_SIZE)


class StaticKeyProvider:
    """Keys held in memory: ``keys`` maps key id -> 32-byte key; ``current`` is the
    id new frames use (default: the last one in ``keys``). Raises ``KeyConfigError``.

    For tests, and for programs that fetch keys from a KMS or vault themselves.
    """

    def __init__(self, keys: Mapping[str, bytes], current: str | None = None) -> None:
        if not keys:
            raise KeyConfigError("a key provider needs at least one key")
        for key_id, key in keys.items():
            _check_key(key_id, key)
        self._keys = dict(keys)
        self._current = current if current is not None else list(self._keys)[-1]
        if self._current not in self._keys:
            raise KeyConfigError(f"current key id {self._current!r} is not among the keys")

    def current_key_id(self) -> str:
        """The id new frames are sealed with."""
        return self._current

    def get(self, key_id: str) -> bytes:
        """The key named ``key_id``; ``KeyError`` when absent."""
        return self._keys[key_id]

    def key_ids(self) -> list[str]:
        """Every key id this provider can decrypt with."""
        return list(self._keys)


def _decode_key(key_id: str, text: str) -> bytes:
    text = text.strip()
    try:
        if len(text) == 2 * KEY_SIZE and all(c in "0123456789abcdefABCDEF" for c in text):
            key = bytes.fromhex(text)
        else:  # standard or URL-safe base64, padding optional
            normal = text.replace("-", "+").replace("_", "/")
            key = base64.b64decode(normal + "=" * (-len(normal) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise KeyConfigError(f"key {key_id!r} is neither base64 nor 64 hex digits") from None
    return key


class EnvKeyProvider(StaticKeyProvider):
    """Keys from environment variables, read once when constructed.

    ``DURABLY_KEYS`` (``keys_var``): comma-separated ``id=key`` pairs, each key
    32 bytes as base64 (standard or URL-safe) or 64 hex digits, e.g.
    ``DURABLY_KEYS="2025-01=q83v...,2025-07=Zm9v..."``. ``DURABLY_KEY_ID``
    (``current_var``): the id new frames use; default the last listed. Rotate by
    appending a new pair and pointing ``DURABLY_KEY_ID`` at it; drop an old pair
    only after ``durably reencrypt`` rewrote its frames. ``environ`` defaults to
    ``os.environ``. Raises ``KeyConfigError`` when a variable is missing or malformed,
    ``ArgumentTypeError`` when ``environ`` is not a mapping.
    """

    def __init__(self, environ: Mapping[str, str] | None = None, *, keys_var: str = "DURABLY_KEYS",
                 current_var: str = "DURABLY_KEY_ID") -> None:
        if environ is not None and not isinstance(environ, Mapping):
            raise ArgumentTypeError(f"EnvKeyProvider: environ must be a mapping (like os.environ), "
                                    f"got {type(environ).__name__}")
        env = os.environ if environ is None else environ
        listing = env.get(keys_var, "").strip()
        if not listing:
            raise KeyConfigError(f"${keys_var} is not set (expected id=base64key,...)")
        keys: dict[str, bytes] = {}
        for item in filter(None, (part.strip() for part in listing.split(","))):
            key_id, sep, text = item.partition("=")
            if not sep:
                raise KeyConfigError(f"${keys_var}: entry {key_id[:64]!r}... is not id=key")
            keys[key_id.strip()] = _decode_key(key_id.strip(), text)
        super().__init__(keys, env.get(current_var) or None)


class AESGCMCipher:
    """The ``FrameCipher`` of durably: AES-256-GCM with per-frame random nonces.

    In: ``keys`` (a ``KeyProvider``); ``allow_plaintext``: also read frames
    written without encryption (for moving an existing store to encryption,
    together with ``durably reencrypt``); by default they are refused with
    ``EncryptionRequiredError``. Thread-safe: the AESGCM objects are stateless.
    """

    def __init__(self, keys: KeyProvider, *, allow_plaintext: bool = False) -> None:
        self.keys = keys
        self.required = not allow_plaintext
        self._aeads: dict[str, AESGCM] = {}

    def current_key_id(self) -> str:
        """The key id new frames are sealed with."""
        return self.keys.current_key_id()

    def _aead(self, key_id: str) -> AESGCM:
        aead = self._aeads.get(key_id)
        if aead is None:
            key = self.keys.get(key_id)  # KeyError for an unknown id
            _check_key(key_id, key)
            # Imported at the first key used: a runtime without encryption never loads cryptography.
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            aead = self._aeads[key_id] = AESGCM(key)
        return aead

    def seal(self, payload: bytes, aad: bytes) -> bytes:
        """``payload`` encrypted under the current key, bound to ``aad`` (see the module docstring)."""
        key_id = self.keys.current_key_id()
        kid = key_id.encode("ascii")
        nonce = os.urandom(NONCE_SIZE)
        sealed = self._aead(key_id).encrypt(nonce, bytes(payload), aad + _AAD_KEY_ID.pack(len(kid)) + kid)
        return b"".join((_AAD_KEY_ID.pack(len(kid)), kid, nonce, sealed))

    def open(self, sealed: bytes, aad: bytes, *, stream: StreamId | None = None, seq: int | None = None) -> bytes:
        """The payload sealed in ``sealed`` if ``aad`` matches.

        Raises ``UnknownKeyError`` when the provider lacks the frame's key id and
        ``DecryptionError`` when authentication fails or the layout is malformed.
        """
        key_id, body = _split(sealed, stream, seq)
        try:
            aead = self._aead(key_id)
        except KeyError:
            raise UnknownKeyError(f"no key {key_id!r} in the key provider", key_id=key_id, stream=stream, seq=seq) from None
        from cryptography.exceptions import InvalidTag

        kid = key_id.encode("ascii")
        try:
            return aead.decrypt(body[:NONCE_SIZE], body[NONCE_SIZE:], aad + _AAD_KEY_ID.pack(len(kid)) + kid)
        except InvalidTag:
            raise DecryptionError(
                f"authentication failed under key {key_id!r}: the frame was altered, moved from another "
                "stream or seq, or sealed with another key", stream=stream, seq=seq) from None


def _split(sealed: bytes, stream: StreamId | None = None, seq: int | None = None) -> tuple[str, bytes]:
    if len(sealed) < 1 + 1 + NONCE_SIZE + TAG_SIZE or not 1 <= sealed[0] <= 64:
        raise DecryptionError("encrypted payload is too short or names no key id", stream=stream, seq=seq)
    end = 1 + sealed[0]
    try:
        key_id = sealed[1:end].decode("ascii")
    except UnicodeDecodeError:
        raise DecryptionError("encrypted payload has a malformed key id", stream=stream, seq=seq) from None
    if not _KEY_ID.fullmatch(key_id) or len(sealed) < end + NONCE_SIZE + TAG_SIZE:
        raise DecryptionError("encrypted payload has a malformed key id", stream=stream, seq=seq)
    return key_id, sealed[end:]


def key_id_of(frame: bytes) -> str | None:
    """The key id an encrypted frame names, or None for a plaintext frame.

    Reads the header and the key id only (no key needed, nothing decrypted).
    Raises ``CorruptRecordError`` for bytes that are not a frame.
    """
    if len(frame) < HEADER_SIZE or frame[:2] != MAGIC:
        raise CorruptRecordError("not a durably frame")
    flags = _HEADER.unpack_from(frame)[2]
    if not flags & FLAG_ENCRYPTED:
        return None
    return _split(bytes(frame[HEADER_SIZE:]))[0]
