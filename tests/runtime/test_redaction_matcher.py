"""The one-scan hint matcher finds exactly what a substring search per hint found,
and the redactor's quick "nothing to redact here" verdict never hides a secret:
generated records (secrets in nested dicts and lists, case variants, hints as
substrings of longer words, tokens, non-ASCII text and lone surrogates) come out
of the gated redactor exactly as out of one that always takes the full path."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durably._journal.hint_matcher import HintMatcher
from durably._journal.redaction_policy import (
    DEFAULT_TOKEN_PATTERNS,
    Redact,
    RedactionPolicy,
    TokenPattern,
)
from durably._journal.redactor import Redactor
from durably.schemas._records import Kind

HINTS = sorted({h for p in DEFAULT_TOKEN_PATTERNS for h in p.hints})

#: Text that is, or nearly is, a credential: real tokens, hints in every case, near misses.
TOKENS = [
    "sk-" + "a1B2" * 6,
    "sk-ant-" + "x9" * 12,
    "sk_live_" + "Q" * 20,
    "rk_test_" + "7" * 16,
    "ghp_" + "A" * 36,
    "github_pat_" + "b" * 22,
    "AKIA" + "ABCDEFGHIJKLMNOP",
    "xoxb-1234567890-abc",
    "AIza" + "0" * 35,
    "eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJlMTIz",
    "Bearer abcdefghijklmnopqrstu",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
    "caucasian",  # holds "asia"
    "task-runner",  # holds "sk-"
    "gho_",
    "S\u212a-",  # KELVIN SIGN lowercases to "k": "sk-" in the lowered text, no token in the text
    "\u0130",  # lowercases to two characters
    "\ud800",  # a lone surrogate, as JSON may carry
]

fragments = st.one_of(
    st.sampled_from(HINTS + TOKENS),
    st.sampled_from(HINTS).map(str.upper),
    st.sampled_from(HINTS).map(str.title),
    st.text(max_size=12),
    st.text(alphabet="akisxo_-ghpeyjzbr ", max_size=12),
)
texts = st.lists(fragments, max_size=8).map("".join)
secret_keys = st.sampled_from(
    ["password", "apiKey", "X-Api-Key", "DB_PASSWORD", "session_id", "notes", "path", "token_count", "tokens"]
)
keys = st.one_of(secret_keys, st.text(max_size=8))
values = st.recursive(
    st.one_of(texts, st.integers(), st.none(), st.booleans()),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)),
    max_leaves=12,
)
arguments = st.dictionaries(keys, values, max_size=4)
tool_names = st.sampled_from(["read_file", "charge", "fetch"])


@st.composite
def records(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(st.sampled_from([Kind.MODEL_RESPONDED, Kind.TOOL_RESULT, Kind.APPROVAL_REQUESTED, Kind.STARTED]))
    if kind == Kind.MODEL_RESPONDED:
        calls = draw(
            st.lists(
                st.builds(
                    lambda i, name, args: {"id": f"c{i}", "key": f"k{i}", "name": name, "arguments": args},
                    st.integers(0, 99),
                    tool_names,
                    arguments,
                ),
                max_size=3,
            )
        )
        return kind, {"text": draw(texts), "tool_calls": calls}
    if kind == Kind.TOOL_RESULT:
        return kind, {
            "tool": draw(tool_names),
            "call_id": "c1",
            "result": draw(values),
            "error": draw(st.none() | texts),
        }
    if kind == Kind.APPROVAL_REQUESTED:
        return kind, {"tool": draw(tool_names), "arguments": draw(arguments), "reason": draw(texts)}
    return kind, {"task": draw(texts), "instructions": draw(texts)}


def old_may_hold_token(patterns: tuple[TokenPattern, ...], lower: str) -> bool:
    """The check as a search per hint did it: grouped by a gate character, contained hints dropped."""
    if not all(p.hints for p in patterns):
        return True
    hints = {h for p in patterns for h in p.hints}
    hints = {h for h in hints if not any(o != h and o in h for o in hints)}
    groups: dict[str, list[str]] = {}
    for hint in sorted(hints):
        groups.setdefault(next((c for c in "_-" if c in hint), ""), []).append(hint)
    return any((not gate or gate in lower) and any(h in lower for h in group) for gate, group in groups.items())


def old_candidates(patterns: tuple[TokenPattern, ...], text: str) -> list[str]:
    """The names of the patterns whose regex ran on ``text``, as a search per hint chose them."""
    lower = text.lower()
    return [p.name for p in patterns if not p.hints or any(h in lower for h in p.hints)]


hint_sets = st.lists(st.one_of(st.sampled_from(HINTS), st.text(max_size=4)), max_size=10)


@settings(max_examples=400, deadline=None)
@given(hints=hint_sets, text=st.one_of(texts, st.text()))
def test_the_matcher_finds_exactly_the_hints_a_substring_search_finds(hints, text):
    matcher = HintMatcher(hints)
    assert matcher.found(text) == {h for h in hints if h in text}
    assert matcher.holds_any(text) == any(h in text for h in hints)


@settings(max_examples=300, deadline=None)
@given(text=texts, extra=st.lists(st.sampled_from(HINTS + ["", "ß", "\ud800x"]), max_size=3), unhinted=st.booleans())
def test_the_policy_gate_and_candidates_match_the_search_per_hint(text, extra, unhinted):
    patterns = DEFAULT_TOKEN_PATTERNS + (TokenPattern("custom", r"zz+", tuple(extra)),)
    if unhinted:
        patterns += (TokenPattern("always", r"qq+"),)
    policy = RedactionPolicy(token_patterns=patterns)
    assert policy.may_hold_token(text.lower()) == old_may_hold_token(patterns, text.lower())
    assert [name for name, _, _ in policy._candidates(text)] == old_candidates(patterns, text)


class FullPath(Redactor):
    """A redactor without the quick verdict: every record takes the full walk."""

    def _untouched(self, kind: str, data: dict[str, Any], agent: str | None) -> bool:
        return False


POLICIES = [
    RedactionPolicy(),
    RedactionPolicy(rules=(Redact("arguments.card", tool="charge"),), min_echo_length=3),
    RedactionPolicy(token_patterns=DEFAULT_TOKEN_PATTERNS + (TokenPattern("zed", r"zz+", ("zz",)),)),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(records(), min_size=1, max_size=6), which=st.sampled_from(range(len(POLICIES))))
def test_the_quick_verdict_never_changes_what_is_stored(batch, which):
    gated, full = Redactor(POLICIES[which]), FullPath(POLICIES[which])
    for seq, (kind, data) in enumerate(batch, start=1):
        assert gated.redact(kind, data, "coder", seq) == full.redact(kind, data, "coder", seq)
    # What each kept in memory (originals, learned secrets) is the same too.
    for name in ("_arguments", "_contents", "_texts", "_redacted", "_secrets"):
        assert getattr(gated, name) == getattr(full, name), name


def test_a_token_in_generated_text_is_masked():
    """A control: the generated records do hold secrets the redactor takes out."""
    stored = Redactor(RedactionPolicy()).redact(Kind.STARTED, {"task": "use ghp_" + "A" * 36}, "coder", 1)
    assert re.fullmatch(r"use \[REDACTED:github-token\]", stored["task"])
