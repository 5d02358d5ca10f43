"""The newest checkpoint's values of a thread, summarised for durably's readers (``durably state``, the console).

The readers understand a thread's frames without LangGraph (``durably._reading.threads``);
its channel values are LangGraph serializer bytes, so showing them takes the
saver's strict decoder. Each value becomes one short line: a list as its length
and its last item, a message as its type and text.
"""

from __future__ import annotations

from typing import Any

from durably.errors import CheckpointValueError
from durably.storage._codec import FrameCipher
from durably.storage._spi import Store

from ._saver import DurablySaver


def clip(value: Any, limit: int = 80) -> str:
    """``value`` as one line of at most ``limit`` characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _line(value: Any) -> str:
    content = getattr(value, "content", None)
    if content is not None and isinstance(getattr(value, "type", None), str):
        return f"{value.type}: {clip(content)}"
    if isinstance(value, (str, int, float, bool)) or value is None:
        return clip(value)
    return clip(repr(value))


def summarise(value: Any) -> str:
    """One line for a channel value: a list as ``N items, last: ...``, else the value clipped."""
    if isinstance(value, list):
        return f"{len(value)} items" + (f", last: {_line(value[-1])}" if value else "")
    return _line(value)


async def latest_values(
    store: Store, namespace: str, thread_id: str, cipher: FrameCipher | None = None
) -> dict[str, str] | str:
    """Per channel, ``summarise`` of the thread's newest root checkpoint's value, or the
    reason they cannot be shown (a value that cannot be rebuilt here: ``CheckpointValueError``'s text).

    ``store`` is open and stays open (the caller owns it). Raises ``StoreUnavailableError``."""
    saver = DurablySaver(store, namespace=namespace, cipher=cipher)
    try:
        found = await saver.aget_tuple({"configurable": {"thread_id": thread_id}})
    except CheckpointValueError as exc:
        return str(exc)
    if found is None:
        return {}
    return {channel: summarise(value) for channel, value in sorted(found.checkpoint["channel_values"].items())}
