"""A commit's frames finished off the event loop when a payload is large.

A record's frame is made in two halves: ``RecordCodec.record_payload`` reads the
record's values into CBOR and stays on the loop (it raises the typed encoding
errors, before anything is written); ``RecordCodec.record_frame`` compresses,
encrypts and checksums those bytes. zstd, AES-GCM and CRC-32 release the GIL on
large inputs, so for a large payload the second half runs in a worker thread: a
second core compresses while the loop runs the other agents' steps.

For small payloads the hop costs the loop more than the work it moves. Measured
(CPU of the loop's thread per frame, 2 loaded cores): 4 KiB, 30 us on the loop
against 106 us to hand it to a thread; 64 KiB, 147 against 132; 256 KiB, 3.4 ms
against 0.31; 1 MiB, 13 ms against 0.33. A step's usual records (a few hundred
bytes to a few KiB, 15 us of dictionary zstd each) stay on the loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio.to_thread

from durably.storage._spi import StreamId

from .records import RecordCodec

#: Payload bytes (CBOR, before compression) from which a commit's frames are finished
#: in a worker thread: past the measured break-even of the hop, with a margin.
OFFLOOP_BYTES = 64 * 1024


async def finish_frames(
    codec: RecordCodec,
    payloads: Sequence[bytes],
    seqs: Sequence[int],
    stream: StreamId,
    *,
    threshold: int = OFFLOOP_BYTES,
) -> list[bytes]:
    """The frames of ``payloads`` (``RecordCodec.record_payload``), stored at ``seqs`` in ``stream``.

    On the loop when every payload is smaller than ``threshold`` bytes, else all of
    them in one worker thread (one hop per commit) on that thread's twin of
    ``codec``, with the same settings and cipher. The bytes are the same either
    way. Raises what ``RecordCodec.record_frame`` raises, here, in the caller; a
    cancelled caller waits for the thread (nothing is written before the frames exist).
    """
    if all(len(payload) < threshold for payload in payloads):
        return [codec.record_frame(payload, seq, stream) for payload, seq in zip(payloads, seqs, strict=True)]
    return await anyio.to_thread.run_sync(_finish_here, codec, payloads, seqs, stream)


def _finish_here(codec: RecordCodec, payloads: Sequence[bytes], seqs: Sequence[int], stream: StreamId) -> list[bytes]:
    here = codec.twin_for_this_thread()
    return [here.record_frame(payload, seq, stream) for payload, seq in zip(payloads, seqs, strict=True)]
