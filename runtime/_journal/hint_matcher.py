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

    __slots__ = ("_always", "_automaton", "_hints")

    def __init__(self, hints: Iterable[str]) -> None:
        unique = sorted(set(hints))
        self._always = "" in unique
        self._hints = tuple(h for h in unique if h)
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
        return bool(automaton.find_matches_as_indexes(text.encode("utf-8", "surrogatepass")))

    def found(self, text: str) -> frozenset[str]:
        """The hints ``text`` contains (``{h for h in hints if h in text}``), overlapping ones included."""
        held = {""} if self._always else set()
        if self._automaton is not None:
            hints = self._hints
            held.update(hints[i] for i, _, _ in self._automaton.find_matches_as_indexes(_utf8(text), overlapping=True))
        return frozenset(held)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")
