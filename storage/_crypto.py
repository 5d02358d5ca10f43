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

from durably.errors import ArgumentTypeError, KeyConfigError

from ._codec import _HEADER, FLAG_ENCRYPTED, HEADER_SIZE, MAGIC
from ._errors import CorruptRecordError, DecryptionError, UnknownKeyError
from ._group_frames import FORMAT_GROUP, GROUP_HEADER_SIZE
from ._spi import StreamId

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

    def current_key_id(self) -> str:
        """Name the key new frames are sealed with.

        Returns:
            The current key id.
        """

    def get(self, key_id: str) -> bytes:
        """Look a key up by its id.

        Args:
            key_id: The id a frame names (or ``current_key_id()``).

        Returns:
            The key's 32 bytes.

        Raises:
            KeyError: For an id the provider does not have.
        """


def _check_key(key_id: str, key: bytes) -> None:
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise KeyConfigError(f"key id {key_id!r} must be 1-64 characters of A-Z a-z 0-9 . _ -")
    if not isinstance(key, bytes) or len(key) != KEY_SIZE:
        raise KeyConfigError(
            f"key {key_id!r} must be {KEY_SIZE} bytes (AES-256), got {len(key) if isinstance(key, bytes) else type(key).__name__}"
        )


def generate_key() -> bytes:
    """Make a fresh random AES-256 key from the OS's CSPRNG (``os.urandom``).

    Returns:
        32 random bytes.
    """
    return os.urandom(KEY_SIZE)


class StaticKeyProvider:
    """Keys held in memory: a ``KeyProvider`` over a mapping of key id to key.

    For tests, and for programs that fetch keys from a KMS or vault themselves.

    Args:
        keys: Key id -> 32-byte key; at least one. A key id is 1-64 characters
            of A-Z a-z 0-9 . _ -.
        current: The id new frames use; None (the default) for the last one in ``keys``.

    Raises:
        KeyConfigError: When ``keys`` is not a mapping or is empty, a key id is
            malformed, a key is not 32 bytes, or ``current`` is not among the keys.
    """

    def __init__(self, keys: Mapping[str, bytes], current: str | None = None) -> None:
        if not isinstance(keys, Mapping):
            raise KeyConfigError(f"keys must be a mapping of key id to key, got {type(keys).__name__}")
        if not keys:
            raise KeyConfigError("a key provider needs at least one key")
        for key_id, key in keys.items():
            _check_key(key_id, key)
        self._keys = dict(keys)
        self._current = current if current is not None else list(self._keys)[-1]
        if self._current not in self._keys:
            raise KeyConfigError(f"current key id {self._current!r} is not among the keys")

    def current_key_id(self) -> str:
        """Name the key new frames are sealed with.

        Returns:
            The current key id.
        """
        return self._current

    def get(self, key_id: str) -> bytes:
        """Look a key up by its id.

        Args:
            key_id: The id a frame names.

        Returns:
            The key's 32 bytes.

        Raises:
            KeyError: When the provider has no key ``key_id``.
        """
        return self._keys[key_id]

    def key_ids(self) -> list[str]:
        """List the key ids this provider can decrypt with.

        Returns:
            Every key id, in the order of the ``keys`` mapping.
        """
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

    Rotate by appending a new pair to ``DURABLY_KEYS`` and pointing
    ``DURABLY_KEY_ID`` at it; drop an old pair only after ``durably reencrypt``
    rewrote its frames.

    Args:
        environ: Where to read the variables; None (the default) for ``os.environ``.
        keys_var: The variable holding comma-separated ``id=key`` pairs, each key
            32 bytes as base64 (standard or URL-safe, padding optional) or 64 hex
            digits, e.g. ``DURABLY_KEYS="2025-01=q83v...,2025-07=Zm9v..."``.
        current_var: The variable naming the id new frames use; when unset or
            empty, the last pair listed.

    Raises:
        KeyConfigError: When ``keys_var`` is missing or empty, an entry is not
            ``id=key``, a key is neither base64 nor 64 hex digits or not 32
            bytes, a key id is malformed, or ``current_var`` names an id not listed.
        ArgumentTypeError: When ``environ`` is not a mapping.
    """

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        keys_var: str = "DURABLY_KEYS",
        current_var: str = "DURABLY_KEY_ID",
    ) -> None:
        if environ is not None and not isinstance(environ, Mapping):
            raise ArgumentTypeError(
                f"EnvKeyProvider: environ must be a mapping (like os.environ), got {type(environ).__name__}"
            )
        env = os.environ if environ is None else environ
        listing = env.get(keys_var, "").strip()
        if not listing:
            raise KeyConfigError(f"${keys_var} is not set (expected id=base64key,...)")
        keys: dict[str, bytes] = {}
        for number, item in enumerate(filter(None, (part.strip() for part in listing.split(","))), 1):
            key_id, sep, text = item.partition("=")
            key_id = key_id.strip()
            if not sep or not _KEY_ID.fullmatch(key_id) or not text.strip():
                # Never quoted: an entry without its id is the key itself (base64 ends in '=').
                raise KeyConfigError(
                    f"${keys_var}: entry {number} is not id=key, the id 1-64 characters of A-Z a-z 0-9 . _ - "
                    "(the entry is not shown: it may hold a key)"
                )
            keys[key_id] = _decode_key(key_id, text)
        super().__init__(keys, env.get(current_var) or None)


class AESGCMCipher:
    """The ``FrameCipher`` of durably: AES-256-GCM with per-frame random nonces.

    Thread-safe: the AESGCM objects are stateless. The ``cryptography`` package
    is imported at the first key used, so a runtime without encryption never loads it.

    Args:
        keys: Where the keys come from.
        allow_plaintext: Also read frames written without encryption (for moving
            an existing store to encryption, together with ``durably
            reencrypt``); by default (False) the codec refuses them with
            ``EncryptionRequiredError``.

    Attributes:
        keys: The key provider given.
        required: ``not allow_plaintext``: whether the codec refuses plaintext frames.

    Raises:
        ArgumentTypeError: ``allow_plaintext`` is not a bool (a ``TypeError``:
            ``"no"`` would be truthy and let plaintext frames in).
    """

    def __init__(self, keys: KeyProvider, *, allow_plaintext: bool = False) -> None:
        if not isinstance(allow_plaintext, bool):
            raise ArgumentTypeError(
                f"AESGCMCipher: allow_plaintext must be True or False, "
                f"got {type(allow_plaintext).__name__} {allow_plaintext!r}"
            )
        self.keys = keys
        self.required = not allow_plaintext
        self._aeads: dict[str, AESGCM] = {}

    def current_key_id(self) -> str:
        """Name the key new frames are sealed with (the provider's current key).

        Returns:
            The current key id.
        """
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
        """Encrypt ``payload`` under the current key, bound to ``aad``.

        A fresh random 96-bit nonce per call; the layout of the result is in
        the module docstring.

        Args:
            payload: The (compressed) frame payload.
            aad: The associated data the codec built (``codec.associated_data``);
                the key id is authenticated with it.

        Returns:
            The sealed payload: key id length, key id, nonce, ciphertext and 16-byte tag.

        Raises:
            KeyConfigError: When the provider returns a key that is not 32 bytes
                or the current key id is malformed.
        """
        key_id = self.keys.current_key_id()
        kid = key_id.encode("ascii")
        nonce = os.urandom(NONCE_SIZE)
        sealed = self._aead(key_id).encrypt(nonce, bytes(payload), aad + _AAD_KEY_ID.pack(len(kid)) + kid)
        return b"".join((_AAD_KEY_ID.pack(len(kid)), kid, nonce, sealed))

    def open(self, sealed: bytes, aad: bytes, *, stream: StreamId | None = None, seq: int | None = None) -> bytes:
        """Decrypt ``sealed`` if it authenticates under ``aad``.

        Args:
            sealed: A payload as ``seal`` returned it.
            aad: The associated data the codec rebuilt for this frame.
            stream: The frame's stream, only for the error's context; None when unknown.
            seq: The frame's seq, only for the error's context; None when unknown.

        Returns:
            The payload that was sealed.

        Raises:
            UnknownKeyError: When the provider lacks the frame's key id.
            DecryptionError: When authentication fails (the frame was altered,
                moved from another stream or seq, or sealed with another key) or
                the layout is malformed.
            KeyConfigError: When the provider returns a key that is not 32 bytes.
        """
        key_id, body = _split(sealed, stream, seq)
        try:
            aead = self._aead(key_id)
        except KeyError:
            raise UnknownKeyError(
                f"no key {key_id!r} in the key provider", key_id=key_id, stream=stream, seq=seq
            ) from None
        from cryptography.exceptions import InvalidTag

        kid = key_id.encode("ascii")
        try:
            return aead.decrypt(body[:NONCE_SIZE], body[NONCE_SIZE:], aad + _AAD_KEY_ID.pack(len(kid)) + kid)
        except InvalidTag:
            raise DecryptionError(
                f"authentication failed under key {key_id!r}: the frame was altered, moved from another "
                "stream or seq, or sealed with another key",
                stream=stream,
                seq=seq,
            ) from None


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
    start = GROUP_HEADER_SIZE if frame[2] == FORMAT_GROUP else HEADER_SIZE
    return _split(bytes(frame[start:]))[0]
