"""The ``Redactor``: one activation's redaction, and the originals it keeps in memory.

It applies a ``RedactionPolicy`` (``durably._journal.redaction_policy``) to every
record an activation writes and keeps what it took out, keyed by where it was
taken from (record seq and field, tool call key), never by content, so the
live tool call and the live model get the real values back while the journal,
the snapshots and every later activation see the redacted form.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from durably._journal.redaction_policy import _MAX_DEPTH, RedactionPolicy, is_marker, marker, marker_paths
from durably.errors import RedactedArgumentError
from durably.schemas._records import Kind


@dataclass
class Redactor:
    """Applies a ``RedactionPolicy`` to one activation's records and keeps, in memory
    only, what it took out, keyed by where it was taken from, never by content:
    original tool arguments by the call's idempotency key, original results by
    the seq of their ``tool_result`` record, the original of every masked text by
    its record's seq and field, and the secret values seen (for echo masking).
    Two messages whose secrets mask to the same text keep their own originals.

    ``policy`` None: redacts nothing. One per ``AgentJournal``; not thread-safe.
    """

    policy: RedactionPolicy | None = None
    _arguments: dict[str, dict[str, Any]] = field(default_factory=dict)  # call key -> original arguments
    _contents: dict[int, Any] = field(default_factory=dict)  # tool_result seq -> original result or error
    _texts: dict[tuple[int, str], str] = field(default_factory=dict)  # (seq, field) -> original text
    _redacted: set[int] = field(default_factory=set)  # seqs of the records something was taken out of
    _origins: dict[int, tuple[dict[str, Any], int, str]] = field(default_factory=dict)  # id(message) -> it, seq, field
    _secrets: set[str] = field(default_factory=set)
    _echo_re: re.Pattern[str] | None = None

    # -- writing: records in, redacted records out ------------------------------

    def redact(self, kind: str, data: dict[str, Any], agent: str | None, seq: int = 0) -> dict[str, Any]:
        """The data to store for a ``kind`` record at ``seq`` of an agent of definition ``agent``.

        Never mutates ``data``; returns it unchanged when nothing applies.
        """
        policy = self.policy
        if policy is None or not policy.active or self._untouched(kind, data, agent):
            return data
        if kind == Kind.MODEL_RESPONDED:
            calls = data.get("tool_calls")
            if type(calls) is list:
                # Arguments first: the secrets they hold are then masked in the text too.
                calls = [self._call(call, agent, seq) for call in calls]
            out = self._fields({k: v for k, v in data.items() if k != "tool_calls"}, seq)
            return {**out, "tool_calls": calls} if "tool_calls" in data else out
        if kind in _RESULT_KINDS:
            tool, result, error = data.get("tool"), data.get("result"), data.get("error")
            rules = self._rules("result", agent, tool)
            new_result = self._tree(result, rules, names=True, whole=False)
            new_error = self._tree(error, (), names=False, whole=False)
            if new_result is not result or new_error is not error:
                self._contents[seq] = error if error is not None else result
                self._redacted.add(seq)
            out = self._fields({k: v for k, v in data.items() if k not in ("result", "error")}, seq)
            return {**out, "result": new_result, "error": new_error}
        if kind == Kind.APPROVAL_REQUESTED and type(data.get("arguments")) is dict:
            rules = self._rules("arguments", agent, data.get("tool"))
            arguments = self._tree(data["arguments"], rules, names=True, whole=True)
            out = self._fields({k: v for k, v in data.items() if k != "arguments"}, seq)
            return {**out, "arguments": arguments}
        return self._fields(data, seq)

    def _untouched(self, kind: str, data: dict[str, Any], agent: str | None) -> bool:
        """True when nothing of the policy can apply to this record: no rule for its
        tool, no secret-named field where names count, and no token hint nor
        remembered secret in any of its strings (one scan of them all, instead of
        a walk with a regex per string). False means: take the full path, which
        may still find nothing."""
        policy = self.policy
        assert policy is not None
        if not policy.all_hinted:
            return False  # a pattern without hints must always run
        named: list[Any] = []  # the values whose field names are checked for secrets
        if kind == Kind.MODEL_RESPONDED:
            calls = data.get("tool_calls")
            if type(calls) is list:
                for call in calls:
                    if type(call) is dict and type(call.get("arguments")) is dict:
                        if self._rules("arguments", agent, call.get("name")):
                            return False
                        named.append(call["arguments"])
        elif kind in _RESULT_KINDS:
            if self._rules("result", agent, data.get("tool")):
                return False
            named.append(data.get("result"))
        elif kind == Kind.APPROVAL_REQUESTED and type(data.get("arguments")) is dict:
            if self._rules("arguments", agent, data.get("tool")):
                return False
            named.append(data["arguments"])
        if named and policy.secret_names and _has_secret_name(named, policy):
            return False
        texts = _texts(data)
        if texts is None:
            return False
        text = "\x00".join(texts)
        if self._secrets and any(secret in text for secret in self._secrets):
            return False
        return not policy.may_hold_token(text.lower())

    def _fields(self, data: dict[str, Any], seq: int) -> dict[str, Any]:
        """``data`` with tokens masked; the original of a masked top-level text (the
        ones that become messages) is kept under ``(seq, field)``."""
        out = None
        for key, child in data.items():
            if type(child) is str:
                new = self._string(child, False)
                if new is not child:
                    self._texts[(seq, key)] = child
                    self._redacted.add(seq)
            else:
                new = self._tree(child, (), names=False, whole=False, depth=1)
            if new is not child:
                out = out if out is not None else dict(data)
                out[key] = new
        return data if out is None else out

    def _call(self, call: Any, agent: str | None, seq: int) -> Any:
        if type(call) is not dict or type(call.get("arguments")) is not dict:
            return call
        arguments = call["arguments"]
        rules = self._rules("arguments", agent, call.get("name"))
        redacted = self._tree(arguments, rules, names=True, whole=True)
        if redacted is arguments:
            return call
        if (ref := _call_ref(call)) is not None:
            self._arguments[ref] = arguments
            self._redacted.add(seq)
        return {**call, "arguments": redacted}

    def _rules(self, root: str, agent: str | None, tool: Any) -> tuple[tuple[tuple[str, ...], str], ...]:
        assert self.policy is not None
        if not self.policy.rules:
            return ()
        return tuple((r.segments, r.reason) for r in self.policy.rules if r.root == root and r.applies(agent, tool))

    def _tree(
        self, value: Any, rules: tuple[tuple[tuple[str, ...], str], ...], *, names: bool, whole: bool, depth: int = 0
    ) -> Any:
        """``value`` with rules, secret names (``names``) and tokens applied; the same
        object when nothing changed. ``whole``: a string holding a token becomes a
        marker (tool arguments) instead of being masked inside (free text)."""
        for segments, reason in rules:
            if not segments:
                if reason != "ephemeral":
                    self._learn(value)
                return marker(reason)
        kind = type(value)
        if kind is str:
            return self._string(value, whole)
        if depth >= _MAX_DEPTH or is_marker(value):
            return value
        if kind is dict:
            assert self.policy is not None  # only a policy's records get here (redact)
            out = None
            for key, child in value.items():
                sub = tuple((s[1:], r) for s, r in rules if s[0] in ("*", key)) if rules else ()
                ruled = bool(sub) and any(not s for s, _ in sub)  # an explicit rule's reason wins over the name's
                if names and not ruled and type(key) is str and self.policy.is_secret_name(key):
                    self._learn(child)
                    new = child if is_marker(child) else marker("secret-name")
                else:
                    new = self._tree(child, sub, names=names, whole=whole, depth=depth + 1)
                if new is not child:
                    out = out if out is not None else dict(value)
                    out[key] = new
            return value if out is None else out
        if kind is list or kind is tuple:
            out_list = None
            for index, child in enumerate(value):
                sub = tuple((s[1:], r) for s, r in rules if s[0] in ("*", str(index))) if rules else ()
                new = self._tree(child, sub, names=names, whole=whole, depth=depth + 1)
                if new is not child:
                    out_list = out_list if out_list is not None else list(value)
                    out_list[index] = new
            if out_list is None:
                return value
            return out_list if kind is list else tuple(out_list)
        if kind is set or kind is frozenset:
            # Members have no index: only "*" rules reach them. A member that became a
            # marker (a dict) cannot be a member any more: the redacted set is then a list.
            members = list(value)
            redacted = self._tree(members, rules, names=names, whole=whole, depth=depth)
            if redacted is members:
                return value
            try:
                return kind(redacted)
            except TypeError:
                return redacted
        return value

    def _string(self, text: str, whole: bool) -> Any:
        assert self.policy is not None
        if whole:
            token = self.policy.find_token(text)
            if token is not None:
                self._learn(text)
                return marker(f"pattern:{token[0]}")
            if self._echoes(text):
                self._learn(text)
                return marker("echo")
            return text
        masked = self.policy.mask_tokens(text)
        if self._echo_re is not None and self._echoes(masked):  # (_echoes tests it too)
            masked = self._echo_re.sub("[REDACTED]", masked)
        return text if masked == text else masked

    def _echoes(self, text: str) -> bool:
        # Substring tests first: far cheaper than scanning with the alternation.
        return self._echo_re is not None and any(secret in text for secret in self._secrets)

    def _learn(self, value: Any) -> None:
        """Remember the string leaves of a redacted value, to mask their echoes."""
        assert self.policy is not None
        if not self.policy.mask_echoes:
            return
        before = len(self._secrets)
        self._secrets.update(s for s in _strings(value) if len(s) >= self.policy.min_echo_length)
        if len(self._secrets) != before:
            # Longest first, so a secret containing another is masked whole.
            alternatives = sorted(self._secrets, key=len, reverse=True)
            self._echo_re = re.compile("|".join(map(re.escape, alternatives)))

    # -- the live activation: originals back --------------------------------------

    def arguments_for(self, call: dict[str, Any]) -> dict[str, Any]:
        """The arguments to run ``call`` (a pending call: ``id``, ``name``, ``arguments``) with.

        Its stored arguments when they hold no marker, else the originals this
        activation received. Raises ``RedactedArgumentError`` when those are gone.
        """
        arguments: dict[str, Any] = call["arguments"]
        paths = marker_paths(arguments)
        if not paths:
            return arguments
        ref = _call_ref(call)
        original = self._arguments.get(ref) if ref is not None else None
        if original is None:
            raise RedactedArgumentError(call["name"], paths)
        return original

    def placed(self, record: Any, state: Any, before: tuple[int, int]) -> None:
        """Note which messages ``record`` (just folded into ``state``) put in the
        conversation, so ``model_view`` gives each its own original back.

        ``before``: the lengths of ``state.messages`` and ``state.inbox`` before the fold.
        """
        if record.seq not in self._redacted:
            return
        if record.kind == Kind.HISTORY_COMPACTED:  # the summary lands inside the conversation
            fresh = list(state.messages)
        else:
            fresh = state.messages_from(before[0]) + state.inbox[before[1] :]
        for message in fresh:
            if id(message) not in self._origins:
                self._origins[id(message)] = (message, record.seq, _source_field(record.kind, message))

    def model_view(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` as the live model should see them: redacted values put back.

        Returns ``messages`` itself when this activation redacted nothing; never
        mutates it (the state, and so the snapshots, keep the redacted form).
        """
        if not (self._arguments or self._origins):
            return messages
        view = []
        for message in messages:
            new = message
            origin = self._origins.get(id(message))
            if origin is not None and origin[0] is message:
                _, seq, source = origin
                if source == _RESULT and seq in self._contents:
                    new = {**message, "content": self._contents[seq]}
                elif (seq, source) in self._texts:
                    new = {**message, "content": self._texts[(seq, source)]}
            calls = message.get("tool_calls")
            if calls and any(type(c) is dict and _call_ref(c) in self._arguments for c in calls):
                new = {
                    **new,
                    "tool_calls": [
                        {**c, "arguments": self._arguments[cast(str, _call_ref(c))]}  # a key of it: a str
                        if type(c) is dict and _call_ref(c) in self._arguments
                        else c
                        for c in calls
                    ],
                }
            view.append(new)
        return view


_RESULT = "$result"  # a tool message's content: the tool_result record's result or error
#: The kinds whose result or error becomes a tool message (a child agent's end is its call's result).
_RESULT_KINDS = frozenset({Kind.TOOL_RESULT, Kind.CHILD_ENDED})
#: The containers a record's values may hold strings in (the codec stores tuples and sets as such).
_SEQUENCES = frozenset({list, tuple, set, frozenset})
_CONTAINERS = _SEQUENCES | {dict}


def _source_field(kind: str, message: dict[str, Any]) -> str:
    """The record field a message's content was folded from (see ``state.apply``)."""
    if kind == Kind.STARTED:
        return "instructions" if message.get("role") == "system" else "task"
    if kind == Kind.MODEL_RESPONDED:
        return "text"
    if kind in _RESULT_KINDS:
        return _RESULT
    if kind == Kind.HISTORY_COMPACTED:
        return "summary"
    return "content"


def _call_ref(call: dict[str, Any]) -> str | None:
    """A tool call's own reference: its idempotency key (unique in the run; a
    provider may reuse call ids across turns), else its id (records before keys)."""
    return call.get("key") or call.get("id")


def _has_secret_name(values: list[Any], policy: RedactionPolicy) -> bool:
    """True when a dict inside ``values`` has a key ``policy`` calls a secret."""
    stack: list[tuple[Any, int]] = [(v, 0) for v in values]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if depth >= _MAX_DEPTH:
            continue
        if kind is dict:
            for key, child in item.items():
                if type(key) is str and policy.is_secret_name(key):
                    return True
                if type(child) in _CONTAINERS:
                    stack.append((child, depth + 1))
        elif kind in _CONTAINERS:
            stack.extend((v, depth + 1) for v in item if type(v) in _CONTAINERS)
    return False


def _texts(data: dict[str, Any]) -> list[str] | None:
    """Every str value inside ``data`` (keys aside), or None past ``_MAX_DEPTH``
    levels (the full path handles those)."""
    out: list[str] = []
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        if depth >= _MAX_DEPTH:
            return None
        for child in item.values() if type(item) is dict else item:
            kind = type(child)
            if kind is str:
                out.append(child)
            elif kind in _CONTAINERS:
                stack.append((child, depth + 1))
    return out


def _strings(value: Any) -> Iterable[str]:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if type(item) is str:
            yield item
        elif depth < _MAX_DEPTH and type(item) is dict and not is_marker(item):
            stack.extend((v, depth + 1) for v in item.values())
        elif depth < _MAX_DEPTH and type(item) in _SEQUENCES:
            stack.extend((v, depth + 1) for v in item)
