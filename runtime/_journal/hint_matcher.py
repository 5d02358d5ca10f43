"""Literal hints found in one pass over a text, whatever their number.

Redaction checks every string of every record for the hints of its token
patterns (``sk-``, ``ghp_``, ``bearer``...). A substring search per hint scans
the text once per hint; an Aho-Corasick automaton (``ahocorasick_rs``, a DFA)
scans it once for all of them. The text is searched as UTF-8 bytes, where a
hint occurs exactly when it occurs in the text (UTF-8 is self-synchronizing);
lone surrogates are encoded too (``surrogatepass``), so any ``str`` works.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import ahocorasick_rs


class HintMatcher:
    """Which of a fixed set of literal ``hints`` a text holds, in one scan.

    ``HintMatcher(hints)``: ``hints`` is any iterable of ``str`` (duplicates
    allowed; ``""`` is held by every text, as ``"" in text`` says). Matching is
    exact (case-sensitive): pass lowercased text for lowercase hints.
    Immutable after construction; safe to share.
    """

    __slots__ = ("_always", "_automaton", "_encoded", "_hints", "_overlap")

    def __init__(self, hints: Iterable[str]) -> None:
        unique = sorted(set(hints))
        self._always = "" in unique
        self._hints = tuple(h for h in unique if h)
        self._encoded = tuple(_utf8(h) for h in self._hints)
        # A hint that straddles two windows lies whole in the later one when
        # windows overlap by the longest hint's bytes less one.
        self._overlap = max(map(len, self._encoded), default=1) - 1
        self._automaton = (
            ahocorasick_rs.BytesAhoCorasick(list(self._encoded), implementation=ahocorasick_rs.Implementation.DFA)
            if self._hints
            else None
        )

    def holds_any(self, text: str) -> bool:
        """True when ``text`` contains at least one hint (``any(h in text for h in hints)``)."""
        automaton = self._automaton
        if automaton is None or self._always:
            return self._always
        data = _utf8(text)
        if len(data) <= _WINDOW:  # the common case, with no window machinery
            return bool(automaton.find_matches_as_indexes(data))
        return any(hits for _, hits in self._windows(data, overlapping=False))

    def found(self, text: str) -> frozenset[str]:
        """The hints ``text`` contains (``{h for h in hints if h in text}``), overlapping ones included."""
        held = {""} if self._always else set()
        automaton = self._automaton
        if automaton is None:
            return frozenset(held)
        hints, data = self._hints, _utf8(text)
        if len(data) <= _WINDOW:  # the common case, with no window machinery
            hits = automaton.find_matches_as_indexes(data, overlapping=True)
            if len(hits) <= _DENSE:
                held.update(hints[i] for i, _, _ in hits)
                return frozenset(held)
        seen = set[int]()
        for at, hits in self._windows(data, overlapping=True):
            seen.update(i for i, _, _ in hits)
            if len(seen) == len(hints):
                break
            if len(hits) > _DENSE:
                # A stretch dense with hints: one substring search per hint not seen yet
                # costs nothing per hit, where the automaton makes a tuple of each.
                seen.update(i for i, hint in enumerate(self._encoded) if i not in seen and data.find(hint, at) >= 0)
                break
        held.update(hints[i] for i in seen)
        return frozenset(held)

    def _windows(self, data: bytes, *, overlapping: bool) -> Iterator[tuple[int, list[tuple[int, int, int]]]]:
        """``(offset, hits)`` for each window of ``data`` in turn, lazily: the automaton
        reports every hit of what it is given at once, so a text dense with hints is
        given a window at a time and its reader may stop early."""
        automaton = self._automaton
        assert automaton is not None
        if len(data) <= _WINDOW:
            yield 0, automaton.find_matches_as_indexes(data, overlapping=overlapping)
            return
        view = memoryview(data)
        for at in range(0, len(data), _WINDOW - self._overlap):
            yield at, automaton.find_matches_as_indexes(view[at : at + _WINDOW], overlapping=overlapping)


#: Bytes given to the automaton at a time: large enough that the call overhead is
#: noise, small enough that a window's hits are few.
_WINDOW = 64 * 1024

#: Hits in one window from which ``found`` searches the rest per hint (one hit every
#: 16 bytes: far denser than any text but a list of tokens).
_DENSE = _WINDOW // 16


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")
