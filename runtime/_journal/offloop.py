"""A commit's frames finished off the event loop when a payload is large.

A record's frame is made in two halves: ``RecordCodec.record_payload`` reads the
record's values into CBOR and stays on the loop (it raises the typed encoding
errors, before anything is written); ``RecordCodec.record_frame`` compresses,
encrypts and checksums those bytes. zstd, AES-GCM and CRC-32 release the GIL on
large inputs, so for a large payload the second half runs in a worker thread: a
second core compresses while the loop runs the other agents' steps.

For small payloads the hop costs more than the work it moves, and the work costs more
CPU in all off the loop (measured; the cause is not isolated). Measured on Python
source text, per frame, on 2 loaded cores (loop-thread CPU, then the process's, on the
loop against in a worker thread): 64 KiB, 0.37 / 0.38 ms against 0.29 / 0.90; 256 KiB,
1.39 / 1.39 ms against 0.35 / 2.19; 1 MiB, 5.5 / 5.5 ms against 0.38 / 6.8. A step's
usual records (a few hundred bytes to a few KiB, 15 us of dictionary zstd each) stay on
the loop; from 256 KiB a frame gives the loop back a millisecond or more.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio.to_thread

from durably.storage._errors import InvalidRequestError
from durably.storage._spi import StreamId

from .records import RecordCodec

#: Payload bytes (CBOR, before compression) from which a commit's frames are finished
#: in a worker thread: where the loop's saving (1 ms) first outweighs the CPU it adds (0.8 ms).
OFFLOOP_BYTES = 256 * 1024


async def finish_frames(
    codec: RecordCodec,
    payloads: Sequence[bytes],
    seqs: Sequence[int],
    stream: StreamId,
    *,
    threshold: int = OFFLOOP_BYTES,
) -> list[bytes]:
    """The stored rows of one commit's ``payloads`` (``RecordCodec.record_payload``), stored at
    ``seqs`` (consecutive) in ``stream``: ``RecordCodec.commit_frames``.

    On the loop when the payloads hold fewer than ``threshold`` bytes in all, else in
    one worker thread (one hop per commit) on that thread's twin of ``codec``, with
    the same settings and cipher. The bytes are the same either way. Raises
    ``InvalidRequestError`` for seqs that do not follow each other and what
    ``RecordCodec.commit_frames`` raises, here, in the caller; a cancelled caller
    waits for the thread (nothing is written before the frames exist).
    """
    first = seqs[0]
    if list(seqs) != list(range(first, first + len(payloads))):
        raise InvalidRequestError(f"a commit's records take consecutive seqs, not {list(seqs)}")
    if sum(map(len, payloads)) < threshold:
        return codec.commit_frames(payloads, first, stream)
    return await anyio.to_thread.run_sync(_finish_here, codec, payloads, first, stream)


def _finish_here(codec: RecordCodec, payloads: Sequence[bytes], first: int, stream: StreamId) -> list[bytes]:
    return codec.twin_for_this_thread().commit_frames(payloads, first, stream)
