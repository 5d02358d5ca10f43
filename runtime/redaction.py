"""Redaction before persistence: what never reaches the journal or a snapshot.

A ``RedactionPolicy`` is declarative. It names:

* **secret names**: a tool argument or result field whose name looks like a
  secret (``password``, ``api_key``, ``github_token``, ``Authorization``...;
  matched on the name's last ``_``-separated words, camelCase split) is replaced;
* **token patterns**: strings holding a well-known credential format (OpenAI
  and Anthropic ``sk-...``, GitHub ``ghp_...``, AWS ``AKIA...``, Slack, Stripe,
  Google API keys, JWTs, ``Bearer ...`` headers, PEM private keys) are masked
  in every record: a whole tool argument is replaced, inside free text (task,
  messages, model text, results, errors) only the token is;
* **rules** (``Redact``): a field path of one tool's arguments or result, for
  one agent definition or all, e.g. ``Redact("arguments.card.number", tool="charge")``,
  or a whole result that must not be stored (``ephemeral("fetch_inbox")``);
* **echoes**: a value redacted by name or rule is also masked wherever it shows
  up later in the same activation (the model repeating a password in its text,
  a tool error quoting it).

A replaced value is stored as the marker ``{"$redacted": reason}``, so a reader
(and a resume) knows something is missing; inside text the token becomes
``[REDACTED:<pattern>]``. The originals stay in memory for the current
activation only (``Redactor``): the live tool call runs with the real argument
and the live model sees the real values, while the journal, the snapshots and
every later activation see the redacted form. A tool call resumed after a
restart whose arguments hold markers is not run: it gets a ``tool_result``
error saying which argument was redacted (``RedactedArgumentError``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from durably.schemas.records import Kind
from durably.storage.errors import DurablyError

MARKER = "$redacted"
_MAX_DEPTH = 128  # deeper than the codec accepts: the codec rejects it with the field path

#: Field names treated as secrets (matched against the name's trailing words).
DEFAULT_SECRET_NAMES = frozenset({
    "password", "passwd", "passphrase", "pwd", "secret", "client_secret", "token", "access_token",
    "refresh_token", "id_token", "auth_token", "session_token", "api_key", "apikey", "api_token", "access_key",
    "secret_key", "private_key", "authorization", "auth", "credential", "credentials", "cookie", "set_cookie",
    "session_id", "cvv", "cvc", "card_number", "ssn",
})


@dataclass(frozen=True, slots=True)
class TokenPattern:
    """A credential format: ``name`` (used in the mask), ``regex`` (Python syntax) and
    ``hints``: lowercase literals one of which every match contains. Text holding
    no hint skips the regex (a substring search is ~100x cheaper than a regex scan
    that starts with ``\\b``); no hints: the regex always runs."""

    name: str
    regex: str
    hints: tuple[str, ...] = ()


#: Well-known credential formats (prefixes their issuers document, so few false hits).
DEFAULT_TOKEN_PATTERNS: tuple[TokenPattern, ...] = (
    TokenPattern("anthropic-key", r"\bsk-ant-[A-Za-z0-9_-]{20,}", ("sk-ant-",)),
    TokenPattern("openai-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}", ("sk-",)),
    TokenPattern("stripe-key", r"\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}", ("k_live_", "k_test_")),
    TokenPattern("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
                 ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    TokenPattern("aws-access-key-id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", ("akia", "asia")),
    TokenPattern("slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", ("xox",)),
    TokenPattern("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}", ("aiza",)),
    TokenPattern("jwt", r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}", ("eyj",)),
    TokenPattern("bearer-token", r"\b(?i:bearer)\s+[A-Za-z0-9._~+/=-]{16,}", ("bearer",)),
    TokenPattern("private-key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
                 ("private key-----",)),
)

_ROOTS = ("arguments", "result")


def marker(reason: str) -> dict[str, str]:
    """The stored stand-in for a redacted value: ``{"$redacted": reason}``."""
    return {MARKER: reason}


def is_marker(value: Any) -> bool:
    """True when ``value`` is a redaction marker."""
    return type(value) is dict and len(value) == 1 and MARKER in value


def marker_paths(value: Any, path: str = "") -> list[str]:
    """Dotted paths (``card.number``, ``items.0``) of the markers inside ``value``."""
    found: list[str] = []
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if is_marker(item):
            found.append(where or "(the whole value)")
        elif depth < _MAX_DEPTH and type(item) is dict:
            stack.extend((v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in item.items())
        elif depth < _MAX_DEPTH and type(item) is list:
            stack.extend((v, f"{where}.{i}" if where else str(i), depth + 1) for i, v in enumerate(item))
    return sorted(found)


@dataclass(frozen=True, slots=True)
class Redact:
    """A rule: replace the value at ``path`` for ``tool`` (None: every tool) of
    ``agent`` (a definition name; None: every agent) with a marker giving ``reason``.

    ``path`` starts at ``arguments`` or ``result`` and descends by dict key or
    list index, ``*`` matching any: ``"arguments.card.number"``,
    ``"arguments.headers.*"``, ``"result"`` (the whole result), ``"result.rows.*.email"``.
    Raises ``ValueError`` for another root or an empty segment.
    """

    path: str
    tool: str | None = None
    agent: str | None = None
    reason: str = "policy"

    def __post_init__(self) -> None:
        segments = self.path.split(".")
        if segments[0] not in _ROOTS or not all(segments):
            raise ValueError(f"redaction path {self.path!r} must start with 'arguments' or 'result' and have no empty segment")

    @property
    def segments(self) -> tuple[str, ...]:
        """The path below its root."""
        return tuple(self.path.split(".")[1:])

    @property
    def root(self) -> str:
        return self.path.split(".", 1)[0]

    def applies(self, agent: str | None, tool: str | None) -> bool:
        """True for a call of ``tool`` by an agent of definition ``agent``."""
        return self.tool in (None, tool) and self.agent in (None, agent)


def ephemeral(tool: str, *, agent: str | None = None) -> Redact:
    """A rule keeping ``tool``'s whole result out of storage (the live model still sees it)."""
    return Redact("result", tool=tool, agent=agent, reason="ephemeral")


@dataclass(frozen=True)
class RedactionPolicy:
    """What to redact before persistence (see the module docstring).

    ``rules``: ``Redact`` rules; ``secret_names``: field names (lower snake
    case) that mark a secret; ``token_patterns``: credential formats;
    ``mask_echoes``: also mask later occurrences of values redacted by name or
    rule (those of at least ``min_echo_length`` characters) in this activation.
    The default instance is what a ``Runtime`` uses unless told otherwise.
    """

    rules: tuple[Redact, ...] = ()
    secret_names: frozenset[str] = DEFAULT_SECRET_NAMES
    token_patterns: tuple[TokenPattern, ...] = DEFAULT_TOKEN_PATTERNS
    mask_echoes: bool = True
    min_echo_length: int = 6

    @classmethod
    def disabled(cls) -> "RedactionPolicy":
        """A policy that redacts nothing: everything is stored as given."""
        return cls(secret_names=frozenset(), token_patterns=(), mask_echoes=False)

    @property
    def active(self) -> bool:
        """False when the policy can never change a record."""
        return bool(self.rules or self.secret_names or self.token_patterns)

    @cached_property
    def _names_re(self) -> re.Pattern[str] | None:
        if not self.secret_names:
            return None
        names = "|".join(sorted(map(re.escape, self.secret_names), key=len, reverse=True))
        return re.compile(rf"(?:^|_)(?:{names})$")

    @cached_property
    def _tokens(self) -> list[tuple[str, re.Pattern[str], tuple[str, ...]]]:
        return [(p.name, re.compile(p.regex), p.hints) for p in self.token_patterns]

    @cached_property
    def _any_hint(self) -> re.Pattern[str] | None:
        """One scan for every hint; None when some pattern has none (it must always run)."""
        if not self.token_patterns or not all(p.hints for p in self.token_patterns):
            return None
        return re.compile("|".join(re.escape(h) for p in self.token_patterns for h in p.hints))

    def _candidates(self, text: str) -> list[tuple[str, re.Pattern[str], tuple[str, ...]]]:
        """The patterns that may match ``text``: those whose hints it contains."""
        tokens = self._tokens
        if not tokens:
            return tokens
        lower = text.lower()
        if self._any_hint is not None and self._any_hint.search(lower) is None:
            return []  # the common case: plain text holds no credential prefix at all
        return [t for t in tokens if not t[2] or any(h in lower for h in t[2])]

    @cached_property
    def _name_verdicts(self) -> dict[str, bool]:
        return {}

    def is_secret_name(self, name: str) -> bool:
        """True when a field called ``name`` holds a secret (``apiKey``, ``X-Api-Key``, ``db_password``)."""
        if self._names_re is None:
            return False
        verdict = self._name_verdicts.get(name)
        if verdict is None:
            snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower().replace("-", "_").strip("_")
            verdict = self._names_re.search(snake) is not None
            if len(self._name_verdicts) < 4096:  # field names repeat; a bounded memo is enough
                self._name_verdicts[name] = verdict
        return verdict

    def find_token(self, text: str) -> tuple[str, str] | None:
        """``(pattern name, matched text)`` of the first credential in ``text``, or None."""
        for name, regex, _hints in self._candidates(text):
            match = regex.search(text)
            if match is not None:
                return name, match.group()
        return None

    def mask_tokens(self, text: str) -> str:
        """``text`` with every credential replaced by ``[REDACTED:<pattern>]``."""
        for name, regex, _hints in self._candidates(text):
            text = regex.sub(f"[REDACTED:{name}]", text)
        return text


class RedactedArgumentError(DurablyError):
    """A tool call's arguments hold redaction markers and the originals are gone
    (they lived only in the activation that received them, which ended).

    ``tool`` (str) and ``paths`` (list of dotted argument paths).
    """

    def __init__(self, tool: str, paths: list[str]) -> None:
        self.tool = tool
        self.paths = paths
        names = ", ".join(repr(p) for p in paths)
        verb = "was" if len(paths) == 1 else "were"
        noun = "argument" if len(paths) == 1 else "arguments"
        super().__init__(f"{noun} {names} of tool {tool!r} {verb} redacted and {'is' if len(paths) == 1 else 'are'} "
                         "not available after a restart; the call was not run")


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
        if policy is None or not policy.active:
            return data
        if kind == Kind.MODEL_RESPONDED:
            calls = data.get("tool_calls")
            if type(calls) is list:
                # Arguments first: the secrets they hold are then masked in the text too.
                calls = [self._call(call, agent, seq) for call in calls]
            out = self._fields({k: v for k, v in data.items() if k != "tool_calls"}, seq)
            return {**out, "tool_calls": calls} if "tool_calls" in data else out
        if kind == Kind.TOOL_RESULT:
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
        return tuple((r.segments, r.reason) for r in self.policy.rules if r.root == root and r.applies(agent, tool))

    def _tree(self, value: Any, rules: tuple[tuple[tuple[str, ...], str], ...], *, names: bool, whole: bool,
              depth: int = 0) -> Any:
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
        if kind is list:
            out_list = None
            for index, child in enumerate(value):
                sub = tuple((s[1:], r) for s, r in rules if s[0] in ("*", str(index))) if rules else ()
                new = self._tree(child, sub, names=names, whole=whole, depth=depth + 1)
                if new is not child:
                    out_list = out_list if out_list is not None else list(value)
                    out_list[index] = new
            return value if out_list is None else out_list
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
        if self._echoes(masked):
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
        arguments = call["arguments"]
        paths = marker_paths(arguments)
        if not paths:
            return arguments
        original = self._arguments.get(_call_ref(call))
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
            fresh = state.messages[before[0]:] + state.inbox[before[1]:]
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
                new = {**new, "tool_calls": [
                    {**c, "arguments": self._arguments[_call_ref(c)]}
                    if type(c) is dict and _call_ref(c) in self._arguments else c
                    for c in calls
                ]}
            view.append(new)
        return view


_RESULT = "$result"  # a tool message's content: the tool_result record's result or error


def _source_field(kind: str, message: dict[str, Any]) -> str:
    """The record field a message's content was folded from (see ``state.apply``)."""
    if kind == Kind.STARTED:
        return "instructions" if message.get("role") == "system" else "task"
    if kind == Kind.MODEL_RESPONDED:
        return "text"
    if kind == Kind.TOOL_RESULT:
        return _RESULT
    if kind == Kind.HISTORY_COMPACTED:
        return "summary"
    return "content"


def _call_ref(call: dict[str, Any]) -> str | None:
    """A tool call's own reference: its idempotency key (unique in the run; a
    provider may reuse call ids across turns), else its id (records before keys)."""
    return call.get("key") or call.get("id")


def _strings(value: Any) -> Iterable[str]:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if type(item) is str:
            yield item
        elif depth < _MAX_DEPTH and type(item) is dict and not is_marker(item):
            stack.extend((v, depth + 1) for v in item.values())
        elif depth < _MAX_DEPTH and type(item) is list:
            stack.extend((v, depth + 1) for v in item)
