"""Redaction of LangGraph values before they are stored, with durably's ``RedactionPolicy``.

The policy's two generic rules apply: a field whose name looks like a secret
(``api_key``, ``password``...) is replaced by the marker ``{"$redacted": ...}``,
and a credential inside any text (``sk-...``, ``ghp_...``, a JWT...) is masked
in place. LangChain messages are walked through their ``content``,
``tool_calls`` arguments and ``additional_kwargs``; plain dicts, lists and
tuples are walked item by item. What the live graph holds is untouched: only
the stored copy is redacted, as in the runtime's journal.
"""

from __future__ import annotations

from typing import Any

from durably._journal.redaction_policy import RedactionPolicy, marker

_MAX_DEPTH = 64


class ValueRedactor:
    """Returns a redacted copy of a value (the same object when nothing changed)."""

    def __init__(self, policy: RedactionPolicy) -> None:
        self.policy = policy
        try:
            from langchain_core.messages import BaseMessage
        except ImportError:  # pragma: no cover - langgraph depends on langchain_core
            self._message: type | None = None
        else:
            self._message = BaseMessage

    def __call__(self, value: Any) -> Any:
        return self._walk(value, 0)

    def _walk(self, value: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            return value
        if isinstance(value, str):
            return self.policy.mask_tokens(value)
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if isinstance(key, str) and self.policy.is_secret_name(key) and item not in (None, ""):
                    out[key] = marker(f"secret field {key}")
                else:
                    out[key] = self._walk(item, depth + 1)
            return out if any(out[k] is not value[k] for k in value) else value
        if isinstance(value, (list, tuple)):
            items = [self._walk(item, depth + 1) for item in value]
            if all(a is b for a, b in zip(items, value, strict=False)):
                return value
            return items if type(value) is list else type(value)(items) if type(value) is tuple else items
        if self._message is not None and isinstance(value, self._message):
            return self._message_copy(value, depth)
        return value

    def _message_copy(self, message: Any, depth: int) -> Any:
        update: dict[str, Any] = {}
        content = self._walk(message.content, depth + 1)
        if content is not message.content:
            update["content"] = content
        kwargs = self._walk(message.additional_kwargs, depth + 1)
        if kwargs is not message.additional_kwargs:
            update["additional_kwargs"] = kwargs
        calls = getattr(message, "tool_calls", None)
        if calls:
            redacted = [{**call, "args": self._walk(call.get("args", {}), depth + 2)} for call in calls]
            if any(r["args"] is not c.get("args") for r, c in zip(redacted, calls, strict=False)):
                update["tool_calls"] = redacted
        return message.model_copy(update=update) if update else message
