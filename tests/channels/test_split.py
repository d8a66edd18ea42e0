"""Property and example tests for channels.split (the pure chunker every adapter uses)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from channels.split import split_spans, split_text, utf16_len

MEASURES = [len, utf16_len]

_word = st.lists(
    st.sampled_from([*"abcxyzé漢字", "😀", "👍🏽", "e\u0301", "👨\u200d💻"]),
    min_size=1,
    max_size=12,
).map("".join)
_sentence = st.lists(_word, min_size=1, max_size=8).map(" ".join).map(lambda s: s + ".")
_line = st.lists(_sentence, min_size=1, max_size=4).map(" ".join)
_paragraph = st.lists(_line, min_size=1, max_size=4).map("\n".join)
_code_line = st.text(alphabet=st.sampled_from(list("abc =(){}:;_ 0123")), max_size=30)
_fence = st.tuples(
    st.sampled_from(["```", "~~~", "````"]),
    st.sampled_from(["", "python", "js", "sh"]),
    st.lists(_code_line, min_size=0, max_size=12),
).map(lambda t: f"{t[0]}{t[1]}\n" + "".join(line + "\n" for line in t[2]) + t[0])
_block = st.one_of(_paragraph, _paragraph, _fence)
_document = st.lists(_block, min_size=1, max_size=8).map("\n\n".join)


def fences_balanced(chunk: str) -> bool:
    """Independent check: every fence opened in the chunk is closed in it."""
    open_marker: str | None = None
    for line in chunk.split("\n"):
        m = re.match(r"^ {0,3}(`{3,}|~{3,})(.*)$", line)
        if not m:
            continue
        if open_marker is None:
            open_marker = m.group(1)
        elif (
            m.group(1)[0] == open_marker[0]
            and len(m.group(1)) >= len(open_marker)
            and not m.group(2).strip()
        ):
            open_marker = None
    return open_marker is None


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(text=_document, limit=st.integers(min_value=2, max_value=300), m=st.sampled_from(MEASURES))
def test_every_chunk_fits_and_nothing_is_lost(text: str, limit: int, m: object) -> None:
    measure = m  # type: ignore[assignment]
    spans = split_spans(text, limit, measure)  # type: ignore[arg-type]
    chunks = split_text(text, limit, measure)  # type: ignore[arg-type]
    assert chunks == [s.render(text) for s in spans]
    assert all(measure(c) <= limit for c in chunks)  # type: ignore[operator]
    assert all(c for c in chunks)
    # contiguous cover of the input: nothing lost, nothing repeated
    assert spans[0].start == 0 and spans[-1].end == len(text)
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))
    assert all(s.start < s.end for s in spans)
    if not any(s.prefix or s.suffix for s in spans):
        assert "".join(chunks) == text


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(text=_document, limit=st.integers(min_value=60, max_value=400), m=st.sampled_from(MEASURES))
def test_fences_are_balanced_in_every_chunk(text: str, limit: int, m: object) -> None:
    chunks = split_text(text, limit, m)  # type: ignore[arg-type]
    assert fences_balanced(text)  # generator sanity
    for chunk in chunks:
        assert fences_balanced(chunk), chunk


@settings(max_examples=100)
@given(text=_document, limit=st.integers(min_value=60, max_value=400))
def test_repairs_add_only_fence_lines(text: str, limit: int) -> None:
    for span in split_spans(text, limit):
        if span.prefix:
            assert re.match(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n$", span.prefix)
            # reopened with the same opener line, so the same language
            assert span.prefix in text
        if span.suffix:
            assert re.fullmatch(r"\n?(`{3,}|~{3,})", span.suffix)


@given(text=_document, limit=st.integers(min_value=2, max_value=300))
def test_is_deterministic(text: str, limit: int) -> None:
    assert split_text(text, limit, utf16_len) == split_text(text, limit, utf16_len)


@given(
    pairs=st.lists(st.sampled_from(["\ud83d\ude00", "a", " ", "\n"]), min_size=1, max_size=60),
    limit=st.integers(min_value=2, max_value=20),
)
def test_never_splits_a_surrogate_pair(pairs: list[str], limit: int) -> None:
    # strings carrying surrogate pairs as two code points (as after surrogatepass decoding)
    text = "".join(pairs)
    chunks = split_text(text, limit, utf16_len)
    for chunk in chunks:
        assert not ("\ud800" <= chunk[-1] <= "\udbff")
        assert not ("\udc00" <= chunk[0] <= "\udfff")
    assert "".join(chunks) == text


def test_utf16_len_counts_astral_characters_twice() -> None:
    assert utf16_len("abc") == 3
    assert utf16_len("😀") == 2
    assert utf16_len("é") == 1
    assert utf16_len("") == 0


def test_short_text_is_one_chunk_and_empty_is_none() -> None:
    assert split_text("hello", 10) == ["hello"]
    assert split_text("", 10) == []


def test_prefers_paragraph_over_line_over_sentence_over_word() -> None:
    para = "a" * 30 + ".\n\n" + "b" * 30
    assert split_text(para, 50)[0] == "a" * 30 + ".\n\n"
    line = "a a a a a a. a\n" + "b" * 40
    assert split_text(line, 30)[0] == "a a a a a a. a\n"
    sentence = "one two three. four five six seven eight"
    assert split_text(sentence, 25)[0] == "one two three. "
    word = "alpha beta gamma delta epsilon"
    assert split_text(word, 20)[0] == "alpha beta gamma "


def test_hard_cut_when_no_boundary_fits() -> None:
    assert split_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_prefers_a_full_line_cut_to_a_tiny_paragraph_chunk() -> None:
    # a paragraph break near the start would leave a 3-char chunk; a later line break wins
    text = "hi\n\n" + "\n".join(["word " * 5] * 6)
    first = split_text(text, 60)[0]
    assert len(first) > 10 and first.endswith("\n")


def test_code_fence_is_kept_whole_when_it_fits_in_the_next_chunk() -> None:
    code = "```python\nprint(1)\nprint(2)\n```"
    text = "intro " * 8 + "\n" + code + "\nafter"
    chunks = split_text(text, len(code) + 8)
    assert any(code in c for c in chunks)
    assert "".join(chunks) == text


def test_long_fence_is_closed_and_reopened_with_its_language() -> None:
    body = "".join(f"line_{i} = {i}\n" for i in range(30))
    text = "See:\n\n```python\n" + body + "```\nDone."
    chunks = split_text(text, 120)
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk) <= 120
        assert fences_balanced(chunk)
    assert all(c.startswith("```python\n") for c in chunks[1:-1])
    # stripping the repairs gives back the input
    spans = split_spans(text, 120)
    assert "".join(text[s.start : s.end] for s in spans) == text


def test_unclosed_fence_stays_unclosed_only_in_the_last_chunk() -> None:
    text = "```sh\n" + "echo hi\n" * 40
    chunks = split_text(text, 80)
    assert all(fences_balanced(c) for c in chunks[:-1])
    assert chunks[-1].startswith("```sh\n")


def test_emoji_counted_in_utf16_units() -> None:
    chunks = split_text("😀" * 10, 5, utf16_len)
    assert chunks == ["😀😀"] * 5


def test_zwj_sequence_is_not_cut_when_avoidable() -> None:
    dev = "👨\u200d💻"
    text = "x" * 8 + dev + "y"
    for chunk in split_text(text, 10):
        assert not chunk.endswith("\u200d") and not chunk.startswith("\u200d")


@pytest.mark.parametrize("limit", [0, -5])
def test_rejects_non_positive_limit(limit: int) -> None:
    with pytest.raises(ValueError):
        split_text("abc", limit)


def test_rejects_limit_below_one_character() -> None:
    with pytest.raises(ValueError):
        split_text("😀", 1, utf16_len)


def test_crlf_fence_is_reopened_with_its_own_line_ending() -> None:
    text = "```py\r\n" + "value = 1\r\n" * 30 + "```\r\nend"
    chunks = split_text(text, 80)
    assert len(chunks) > 2
    assert all(fences_balanced(c) and len(c) <= 80 for c in chunks)
    assert all(c.startswith("```py\r\n") for c in chunks[1:-1])
