"""Object keys of the S3 adapter: order-preserving names and descending seq numbers.

Two tricks make S3's one listing order (ascending UTF-8 bytes of the key) do
what the adapter needs without listing whole histories:

* **Descending seq names.** A seq ``s`` is written as the 20 decimal digits of
  ``10**20 - 1 - s``, so a listing returns the *highest* seq first. "The
  latest batch" is a one-key listing, and "the highest seq <= X" is a one-key
  listing that starts after the name of ``X + 1`` (``StartAfter`` is exclusive).
* **Order-preserving segment escape.** Namespaces and agent ids go into keys
  through a prefix-free code whose code words sort like the characters they
  stand for, so listing index keys yields agent ids in Python's ``str`` order
  (code point order = UTF-8 byte order), and a prefix of an agent id maps to a
  prefix of its key. The code: characters U+0001..U+0021 become ``!`` plus two
  hex digits, ``.`` and ``/`` become ``.2E`` and ``.2F``, everything else is
  kept. No encoded segment contains ``/``, is ``.`` or ``..``, or holds a
  control character.
"""

from __future__ import annotations

from durably.storage._errors import CorruptRecordError, InvalidRequestError
from durably.storage._spi import StreamId

SEQ_DIGITS = 20
_SEQ_SPAN: int = 10**SEQ_DIGITS
#: Highest seq a key can name (the batch header stores seqs as unsigned 64-bit ints).
MAX_SEQ = 2**64 - 2
#: S3's limit on a key's length, in UTF-8 bytes.
MAX_KEY_BYTES = 1024
_LONGEST_LEAF = 2 + 64  # "b/" + a SHA-256 hex digest is the longest name under a stream root


def encode_segment(text: str) -> str:
    """Escape ``text`` for use as one key segment, preserving sort order and prefixes."""
    out = []
    for char in text:
        code = ord(char)
        if code <= 0x21:
            out.append(f"!{code:02X}")
        elif char in "./":
            out.append(f".{code:02X}")
        else:
            out.append(char)
    return "".join(out)


def decode_segment(segment: str) -> str:
    """Invert ``encode_segment``. Raises ``ValueError`` on a malformed escape."""
    out = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char in "!.":
            escape = segment[i + 1 : i + 3]
            if len(escape) != 2:
                raise ValueError(f"truncated escape in key segment {segment!r}")
            out.append(chr(int(escape, 16)))
            i += 3
        else:
            out.append(char)
            i += 1
    return "".join(out)


def seq_name(seq: int) -> str:
    """The descending name of ``seq`` (0 <= seq <= MAX_SEQ + 1): higher seqs sort first."""
    if not 0 <= seq <= MAX_SEQ + 1:
        raise InvalidRequestError(f"seq {seq} is outside 0..{MAX_SEQ}")
    return f"{_SEQ_SPAN - 1 - seq:0{SEQ_DIGITS}d}"


def seq_from_name(name: str) -> int:
    """Invert ``seq_name`` for the last segment of a key.

    Raises ``CorruptRecordError`` for a key that no durably build wrote (a
    foreign object among a stream's batches or snapshots), so one such object
    makes that stream unreadable, never a ``ValueError`` that stops a scan.
    """
    digits = name[-SEQ_DIGITS:]
    segment = name.rpartition("/")[2]
    if len(segment) != SEQ_DIGITS or not (digits.isascii() and digits.isdigit()):
        raise CorruptRecordError(f"foreign object {name!r} among the stream's keys")
    return _SEQ_SPAN - 1 - int(digits)


class StreamKeys:
    """Every key of one stream under the store's ``prefix`` (``""`` or ending in ``/``).

    Raises ``InvalidRequestError`` when the stream's keys would exceed S3's
    1,024-byte limit or its ids cannot be encoded as UTF-8 (lone surrogates).
    """

    __slots__ = ("index", "root", "batches", "snapshots", "blobs", "compacted", "lease")

    def __init__(self, prefix: str, stream: StreamId) -> None:
        namespace = encode_segment(stream.namespace)
        agent = encode_segment(stream.agent_id)
        self.index = f"{index_prefix(prefix, stream.namespace)}{agent}"
        self.root = f"{prefix}data/{namespace}/{agent}/"
        self.batches = self.root + "r/"
        self.snapshots = self.root + "s/"
        self.blobs = self.root + "b/"
        self.compacted = self.root + "compacted"
        self.lease = self.root + "lease"  # the stream's lease object (s3_leases)
        try:
            longest = max(len(self.index.encode()), len(self.root.encode()) + _LONGEST_LEAF)
        except UnicodeEncodeError as exc:
            raise InvalidRequestError(f"{stream} cannot be encoded as UTF-8: {exc}") from None
        if longest > MAX_KEY_BYTES:
            raise InvalidRequestError(f"{stream} is too long for S3 keys ({longest} > {MAX_KEY_BYTES} bytes)")

    def batch(self, first_seq: int) -> str:
        """The key of the record batch whose first seq is ``first_seq``."""
        return self.batches + seq_name(first_seq)

    def snapshot(self, seq: int) -> str:
        """The key of the snapshot at ``seq``."""
        return self.snapshots + seq_name(seq)

    def blob(self, digest: str) -> str:
        """The key of the blob with SHA-256 hex ``digest``."""
        return self.blobs + digest


def index_prefix(prefix: str, namespace: str) -> str:
    """The key prefix under which one index object per stream of ``namespace`` lives."""
    return f"{prefix}streams/{encode_segment(namespace)}/"
