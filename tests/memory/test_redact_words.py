"""The words of a deleted message (memory_store.maintenance._words): what counts, and both sides of
the line: its long tokens and anchored runs are found in other text, common short
words it shares with unrelated text are not."""

from __future__ import annotations

from memory_store.maintenance import REDACTED_MARKER, message_words, scrub_value, words_matcher

DELETED = "hello MARK-mx1, meet me at the Frobisher station near gate nine"


def _scrub(text: str, deleted: str = DELETED) -> str:
    pat = words_matcher([deleted])
    assert pat is not None
    out: str = scrub_value(text, pat)
    return out


def test_the_words_are_long_tokens_and_anchored_runs() -> None:
    words = message_words(DELETED)
    assert words.tokens == ("MARK-mx1", "Frobisher")  # 8+ characters, not stop words
    # each run of 3 consecutive tokens holding a non-stop token of 5+ characters
    assert ("at", "the", "Frobisher") in words.runs
    assert ("station", "near", "gate") in words.runs
    assert ("near", "gate", "nine") not in words.runs  # no token of 5+ characters
    assert ("hello", "MARK-mx1", "meet") in words.runs  # MARK-mx1 anchors it
    # a text of short and stop words only has none: nothing of it is hunted elsewhere
    assert not message_words("ok see you at the mall")
    assert not message_words("thanks everyone, see you tomorrow")  # long stop words
    assert words_matcher(["ok see you at the mall"]) is None


def test_quoted_words_are_found_in_any_case_and_overlapping_runs_merge() -> None:
    assert _scrub("SEEN: mark-MX1") == f"SEEN: {REDACTED_MARKER}"
    # five consecutive tokens: overlapping runs make one span, one marker
    assert _scrub("you said: the Frobisher station near gate. OK") == \
        f"you said: {REDACTED_MARKER}. OK"
    # a run across other punctuation and line breaks is still the run
    assert _scrub("Station -- near\ngate") == REDACTED_MARKER
    # the whole message quoted whole goes whole, short words included
    assert _scrub(f"> {DELETED}") == f"> {REDACTED_MARKER}"


def test_unrelated_text_sharing_common_short_words_is_unchanged() -> None:
    for text in ("meet me at the cafe near gate two",  # 3-token runs, no anchor
                 "hello everyone, see you at the station later",  # station, not as run
                 "Frobishers and MARK-mx10 are other tokens",  # whole tokens only
                 "nine gate near"):  # the tokens, not in their order
        assert _scrub(text) == text


def test_forget_phrases_are_found_anywhere_and_the_marker_is_never_hunted() -> None:
    pat = words_matcher([], ["door code"])
    assert pat is not None
    assert scrub_value("my DOOR CODE, doorcode", pat) == f"my {REDACTED_MARKER}, doorcode"
    # a deleted text holding the marker's word: a second pass changes nothing
    once = _scrub("the redacted Frobisher files", "redacted Frobisher files archive")
    assert _scrub(once, "redacted Frobisher files archive") == once
