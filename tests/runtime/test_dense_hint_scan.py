"""Attack on the one-scan hint matcher: a text dense with hints (a tool result listing
thousands of JWTs or ``Bearer`` headers) must not make the "holds any hint?" verdict
collect every occurrence. The substring search it replaced stopped at the first hit;
a verdict that gathers all of them holds the loop and memory in proportion to the
hits (9 MB of ``sk-``: millions of match tuples). Measured by memory, not time."""

from __future__ import annotations

import tracemalloc

from durably._journal.hint_matcher import HintMatcher
from durably._journal.redaction_policy import DEFAULT_TOKEN_PATTERNS

HINTS = sorted({h for p in DEFAULT_TOKEN_PATTERNS for h in p.hints})


def peak_bytes_of(call: object) -> int:
    tracemalloc.start()
    try:
        assert callable(call)
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_any_hint_verdict_stops_at_the_first_hit_in_a_text_full_of_hints() -> None:
    matcher = HintMatcher(HINTS)
    dense = "sk-" * 1_000_000  # 3 MB, a million hits
    assert matcher.holds_any(dense)
    encoded = len(dense)  # the scan itself may hold the text's UTF-8 bytes once
    peak = peak_bytes_of(lambda: matcher.holds_any(dense))
    assert peak < encoded + 4 * 1024 * 1024, f"{peak} bytes held to say yes"


def test_a_hint_across_any_scan_boundary_is_still_found() -> None:
    matcher = HintMatcher(HINTS)
    for hint in ("sk-", "github_pat_", "private key-----", "bearer"):
        for at in range(65536 - len(hint), 65536 + 2):
            for pad in ("a", "\u00e9", "\U0001f600"):  # 1, 2 and 4 UTF-8 bytes a character
                text = pad * (at // len(pad.encode())) + hint + "z"
                assert matcher.holds_any(text), (hint, at, pad)
                assert hint in matcher.found(text)
        assert not matcher.holds_any("q" * 200_000 + hint[:-1])


def test_the_hints_of_a_text_full_of_hints_are_collected_without_holding_every_hit() -> None:
    matcher = HintMatcher(HINTS)
    dense = "sk-" * 1_000_000 + " ghp_x bearer "  # a million hits, then two hints at the very end
    assert matcher.found(dense) == {"sk-", "ghp_", "bearer"}
    peak = peak_bytes_of(lambda: matcher.found(dense))
    assert peak < len(dense) + 4 * 1024 * 1024, f"{peak} bytes held to name three hints"


def test_dense_and_sparse_stretches_find_exactly_the_hints_a_search_per_hint_finds() -> None:
    matcher = HintMatcher(HINTS)
    for tail in ("", "github_pat_", "xoxb-", "-----begin private key-----", "\U0001f600eyj"):
        for dense_len in (10, 70_000, 300_000):
            text = "sk-" * dense_len + "q" * 65_531 + tail + "é" * 40_000 + "aiza"
            assert matcher.found(text) == {h for h in HINTS if h in text}, (tail, dense_len)
