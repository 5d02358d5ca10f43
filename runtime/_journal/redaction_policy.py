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
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from durably._figures import check_bool
from durably._journal.hint_matcher import HintMatcher
from durably.errors import ArgumentTypeError, InvalidArgumentError

MARKER = "$redacted"
_MAX_DEPTH = 128  # deeper than the codec accepts: the codec rejects it with the field path

#: Field names treated as secrets (matched against the name's trailing words).
DEFAULT_SECRET_NAMES = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "secret",
        "client_secret",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "session_token",
        "api_key",
        "apikey",
        "api_token",
        "access_key",
        "secret_key",
        "private_key",
        "authorization",
        "auth",
        "credential",
        "credentials",
        "cookie",
        "set_cookie",
        "session_id",
        "cvv",
        "cvc",
        "card_number",
        "ssn",
    }
)


@dataclass(frozen=True, slots=True)
class TokenPattern:
    """A credential format: ``name`` (used in the mask), ``regex`` (Python syntax) and
    ``hints``: lowercase literals one of which every match contains. Text holding
    no hint skips the regex (one scan finds every pattern's hints at once, far
    cheaper than a regex scan that starts with ``\\b``); no hints: the regex
    always runs."""

    name: str
    regex: str
    hints: tuple[str, ...] = ()


#: Well-known credential formats (prefixes their issuers document, so few false hits).
DEFAULT_TOKEN_PATTERNS: tuple[TokenPattern, ...] = (
    TokenPattern("anthropic-key", r"\bsk-ant-[A-Za-z0-9_-]{20,}", ("sk-ant-",)),
    TokenPattern("openai-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}", ("sk-",)),
    TokenPattern("stripe-key", r"\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}", ("k_live_", "k_test_")),
    TokenPattern(
        "github-token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    TokenPattern("aws-access-key-id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", ("akia", "asia")),
    TokenPattern("slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", ("xox",)),
    TokenPattern("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}", ("aiza",)),
    TokenPattern("jwt", r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}", ("eyj",)),
    TokenPattern("bearer-token", r"\b(?i:bearer)\s+[A-Za-z0-9._~+/=-]{16,}", ("bearer",)),
    TokenPattern(
        "private-key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
        ("private key-----",),
    ),
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
    """A rule: replace the value at ``path`` with a marker giving ``reason``.

    Attributes:
        path: Starts at ``arguments`` or ``result`` and descends by dict key or
            list index, ``*`` matching any: ``"arguments.card.number"``,
            ``"arguments.headers.*"``, ``"result"`` (the whole result),
            ``"result.rows.*.email"``.
        tool: The tool whose calls the rule covers (None: every tool).
        agent: The agent definition name the rule covers (None: every agent).
        reason: What the marker says, ``{"$redacted": reason}``.

    Raises:
        InvalidArgumentError: ``path`` has another root or an empty segment, or
            ``tool`` or ``agent`` is an empty name (a ``ValueError``).
        ArgumentTypeError: ``path`` or ``reason`` is not a ``str``, or ``tool`` or
            ``agent`` neither a ``str`` nor None (a ``TypeError``).
    """

    path: str
    tool: str | None = None
    agent: str | None = None
    reason: str = "policy"

    def __post_init__(self) -> None:
        for name in ("path", "reason", "tool", "agent"):
            value = getattr(self, name)
            if not isinstance(value, str) and not (value is None and name in ("tool", "agent")):
                raise ArgumentTypeError(f"Redact: {name} must be a str, got {type(value).__name__}")
            if value == "" and name in ("tool", "agent"):
                raise InvalidArgumentError(f"Redact: {name} is a name or None (every {name}), not ''")
        segments = self.path.split(".")
        if segments[0] not in _ROOTS or not all(segments):
            raise InvalidArgumentError(
                f"redaction path {self.path!r} must start with 'arguments' or 'result' and have no empty segment"
            )

    @property
    def segments(self) -> tuple[str, ...]:
        """The path below its root."""
        return tuple(self.path.split(".")[1:])

    @property
    def root(self) -> str:
        """The path's root: ``arguments`` or ``result``."""
        return self.path.split(".", 1)[0]

    def applies(self, agent: str | None, tool: str | None) -> bool:
        """Whether the rule covers a call of ``tool`` by an agent of definition ``agent``.

        Args:
            agent: The calling agent's definition name.
            tool: The called tool's name.

        Returns:
            True when the rule's ``tool`` and ``agent`` are None or match.
        """
        return self.tool in (None, tool) and self.agent in (None, agent)


def ephemeral(tool: str, *, agent: str | None = None) -> Redact:
    """A rule keeping ``tool``'s whole result out of storage (the live model still sees it).

    Args:
        tool: The tool whose results are not stored.
        agent: The agent definition name the rule covers (None: every agent).

    Returns:
        ``Redact("result", tool=tool, agent=agent, reason="ephemeral")``.

    Raises:
        ArgumentTypeError: ``tool`` is not a ``str`` (None would cover every tool).
        InvalidArgumentError: ``tool`` is empty.
    """
    if not isinstance(tool, str):
        raise ArgumentTypeError(f"ephemeral needs a tool name, got {type(tool).__name__}")
    return Redact("result", tool=tool, agent=agent, reason="ephemeral")


@dataclass(frozen=True)
class RedactionPolicy:
    """What to redact before persistence (see the module docstring).

    The default instance is what a ``Runtime`` uses unless told otherwise.

    Attributes:
        rules: ``Redact`` rules.
        secret_names: Field names (lower snake case) that mark a secret.
        token_patterns: Credential formats (``TokenPattern``).
        mask_echoes: Also mask later occurrences of values redacted by name or
            rule in this activation.
        min_echo_length: The shortest value (characters) ``mask_echoes`` masks.

    Raises:
        ArgumentTypeError: When ``rules`` is not a tuple (or list) of ``Redact``,
            ``token_patterns`` not one of ``TokenPattern``, ``secret_names`` not a
            set of non-empty str, or ``mask_echoes`` not a bool.
        InvalidArgumentError: When ``min_echo_length`` is not an int >= 1.
    """

    rules: tuple[Redact, ...] = ()
    secret_names: frozenset[str] = DEFAULT_SECRET_NAMES
    token_patterns: tuple[TokenPattern, ...] = DEFAULT_TOKEN_PATTERNS
    mask_echoes: bool = True
    min_echo_length: int = 6

    def __post_init__(self) -> None:
        # Checked here, not at the first record: a malformed policy would otherwise fail
        # an agent mid-run, or (a str of names) silently redact by its letters.
        for name, kind in (("rules", Redact), ("token_patterns", TokenPattern)):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
                raise ArgumentTypeError(
                    f"RedactionPolicy: {name} must be a tuple of {kind.__name__}, got {type(value).__name__}"
                )
            wrong = [item for item in value if not isinstance(item, kind)]
            if wrong:
                raise ArgumentTypeError(f"RedactionPolicy: {name} must hold {kind.__name__} only, got {wrong[0]!r}")
            object.__setattr__(self, name, tuple(value))
        names = self.secret_names
        if isinstance(names, (str, bytes)) or not isinstance(names, (frozenset, set, tuple, list)):
            raise ArgumentTypeError(f"RedactionPolicy: secret_names must be a set of str, got {type(names).__name__}")
        if not all(isinstance(name, str) and name for name in names):
            raise ArgumentTypeError(
                f"RedactionPolicy: secret_names must hold non-empty str only, got {sorted(map(repr, names))}"
            )
        object.__setattr__(self, "secret_names", frozenset(names))
        check_bool("RedactionPolicy", "mask_echoes", self.mask_echoes)
        length = self.min_echo_length
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise InvalidArgumentError(f"RedactionPolicy: min_echo_length must be an int >= 1, got {length!r}")

    @classmethod
    def disabled(cls) -> RedactionPolicy:
        """A policy that redacts nothing: everything is stored as given.

        Returns:
            A ``RedactionPolicy`` with no secret names, no token patterns and
                no echo masking.
        """
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
    def _hints(self) -> HintMatcher:
        return HintMatcher(h for p in self.token_patterns for h in p.hints)

    @cached_property
    def all_hinted(self) -> bool:
        """True when every token pattern has hints, so text holding none of them
        can skip every regex (``may_hold_token``); False: the regexes must run."""
        return all(p.hints for p in self.token_patterns)

    def may_hold_token(self, lower: str) -> bool:
        """Whether some token pattern may match, by one scan for all their hints.

        Args:
            lower: The text, lowercased.

        Returns:
            False when no pattern can match (no hint in ``lower``); True when one
                may, or when some pattern has no hints.
        """
        return not self.all_hinted or self._hints.holds_any(lower)

    def _candidates(self, text: str) -> list[tuple[str, re.Pattern[str], tuple[str, ...]]]:
        """The patterns that may match ``text``: those with no hints or a hint it contains."""
        tokens = self._tokens
        if not tokens:
            return tokens
        lower = text.lower()
        if self.all_hinted and not self._hints.holds_any(lower):
            return []  # the common case: plain text holds no credential prefix at all
        found = self._hints.found(lower)
        return [t for t in tokens if not t[2] or not found.isdisjoint(t[2])]

    @cached_property
    def _name_verdicts(self) -> dict[str, bool]:
        return {}

    def is_secret_name(self, name: str) -> bool:
        """Whether a field called ``name`` holds a secret.

        The name is split at camelCase and ``-``, lowercased, and matched on its
        last ``_``-separated words against ``secret_names``.

        Args:
            name: The field name, e.g. ``apiKey``, ``X-Api-Key``, ``db_password``.

        Returns:
            True when the name marks a secret.
        """
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
        """Find the first credential in ``text``.

        Args:
            text: The text to search.

        Returns:
            ``(pattern name, matched text)`` of the first credential, or None.
        """
        for name, regex, _hints in self._candidates(text):
            match = regex.search(text)
            if match is not None:
                return name, match.group()
        return None

    def mask_tokens(self, text: str) -> str:
        """Mask every credential in ``text``.

        Args:
            text: The text to mask.

        Returns:
            ``text`` with every credential replaced by ``[REDACTED:<pattern>]``.
        """
        for name, regex, _hints in self._candidates(text):
            text = regex.sub(f"[REDACTED:{name}]", text)
        return text
