"""Literal hints found in one pass over a text, whatever their number.

Redaction checks every string of every record for the hints of its token
patterns (``sk-``, ``ghp_``, ``bearer``...). A substring search per hint scans
the text once per hint; an Aho-Corasick automaton (``ahocorasick_rs``, a DFA)
scans it once for all of them. The text is searched as UTF-8 bytes, where a
hint occurs exactly when it occurs in the text (UTF-8 is self-synchronizing);
lone surrogates are encoded too (``surrogatepass``), so any ``str`` works.
"""

from __future__ import annotations

from collections.abc import Iterable

import ahocorasick_rs


class HintMatcher:
    """Which of a fixed set of literal ``hints`` a text holds, in one scan.

    ``HintMatcher(hints)``: ``hints`` is any iterable of ``str`` (duplicates
    allowed; ``""`` is held by every text, as ``"" in text`` says). Matching is
    exact (case-sensitive): pass lowercased text for lowercase hints.
    Immutable after construction; safe to share.
    """

    __slots__ = ("_always", "_automaton", "_hints", "_overlap")

    def __init__(self, hints: Iterable[str]) -> None:
        unique = sorted(set(hints))
        self._always = "" in unique
        self._hints = tuple(h for h in unique if h)
        # A hint that straddles two windows of holds_any lies whole in the later one
        # when windows overlap by the longest hint's bytes less one.
        self._overlap = max((len(_utf8(h)) for h in self._hints), default=1) - 1
        self._automaton = (
            ahocorasick_rs.BytesAhoCorasick(
                [_utf8(h) for h in self._hints], implementation=ahocorasick_rs.Implementation.DFA
            )
            if self._hints
            else None
        )

    def holds_any(self, text: str) -> bool:
        """True when ``text`` contains at least one hint (``any(h in text for h in hints)``)."""
        automaton = self._automaton
        if automaton is None or self._always:
            return self._always
        data = _utf8(text)
        if len(data) <= _WINDOW:
            return bool(automaton.find_matches_as_indexes(data))
        # The automaton reports every hit at once: in windows, a text dense with hints
        # (thousands of tokens) is answered at its first hit, not after collecting them all.
        view, step = memoryview(data), _WINDOW - self._overlap
        return any(automaton.find_matches_as_indexes(view[at : at + _WINDOW]) for at in range(0, len(data), step))

    def found(self, text: str) -> frozenset[str]:
        """The hints ``text`` contains (``{h for h in hints if h in text}``), overlapping ones included."""
        held = {""} if self._always else set()
        if self._automaton is not None:
            hints = self._hints
            held.update(hints[i] for i, _, _ in self._automaton.find_matches_as_indexes(_utf8(text), overlapping=True))
        return frozenset(held)


#: Bytes scanned at a time by ``holds_any``: large enough that the call overhead is
#: noise, small enough that a window's hits are few.
_WINDOW = 64 * 1024


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")
