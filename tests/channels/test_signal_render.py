"""Signal rendering: Markdown to text + style ranges (UTF-16 units), split under
signal-cli's 2000-byte body limit, sent with quote and styles to the fake daemon."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from channels.models import Outbound
from channels.signal.render import (
    SIGNAL_TEXT_LIMIT,
    SignalChunk,
    render_chunks,
    to_styled,
    utf8_len,
)
from channels.split import utf16_len
from tests.channels.harness_signal import GROUP_ID, TRIGGER, signal_harness
from tests.channels.kit import keeps_words


def _styled(text: str, styles: list[str]) -> list[tuple[str, str]]:
    """(style, covered text) pairs, slicing by UTF-16 units as Signal does."""
    units = text.encode("utf-16-le")
    out = []
    for spec in styles:
        start, length, style = spec.split(":")
        a, b = int(start) * 2, (int(start) + int(length)) * 2
        out.append((style, units[a:b].decode("utf-16-le")))
    return out


def test_markdown_becomes_text_and_ranges() -> None:
    text, styles = to_styled("# Plan\n\n**Ship** it 😀 _now_, run `make` and ~~wait~~.")
    assert text == "Plan\n\nShip it 😀 now, run make and wait."
    assert sorted(_styled(text, styles)) == sorted([
        ("BOLD", "Plan"), ("BOLD", "Ship"), ("ITALIC", "now"), ("MONOSPACE", "make"),
        ("STRIKETHROUGH", "wait"),
    ])


def test_code_block_is_monospace_and_nested_styles_stay_inside() -> None:
    text, styles = to_styled("- one **two _three_**\n\n```py\nx = 1\n```\n\n[docs](https://e.x)")
    assert "• one two three" in text and "docs (https://e.x)" in text
    pairs = _styled(text, styles)
    assert ("MONOSPACE", "x = 1") in pairs
    assert ("BOLD", "two three") in pairs and ("ITALIC", "three") in pairs


def test_plain_text_has_no_styles() -> None:
    [chunk] = render_chunks("just words")
    assert isinstance(chunk, SignalChunk)
    assert chunk.styles == () and not chunk.formatted and chunk.text == chunk.plain


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["word ", "**bold** ", "_it_ ", "`c` ", "😀 ", "жж ", "\n\n",
                                 "- x\n", "```\ncode\n```\n"]), min_size=1, max_size=1200))
def test_chunks_fit_and_ranges_stay_inside(parts: list[str]) -> None:
    markdown = "".join(parts)
    chunks = render_chunks(markdown)
    assert chunks == render_chunks(markdown)  # pure
    for chunk in chunks:
        assert isinstance(chunk, SignalChunk)
        assert 0 < utf8_len(chunk.text) <= SIGNAL_TEXT_LIMIT
        size = utf16_len(chunk.text)
        for spec in chunk.styles:
            start, length, _ = spec.split(":")
            assert int(start) >= 0 and int(length) > 0 and int(start) + int(length) <= size
    assert keeps_words(markdown, [c.plain for c in chunks])


async def test_long_reply_is_sent_styled_quoting_only_with_the_first_chunk() -> None:
    long = "**Summary** first.\n\n" + "\n\n".join("ключ " * 60 + "😀" for _ in range(12))
    async with signal_harness() as h:
        out = Outbound(channel="signal", chat_id=f"group.{GROUP_ID}", reply_to_id=TRIGGER,
                       text=long, reply_id="r-1")
        chunks = h.channel.render(out.text)
        assert len(chunks) >= 3
        ids = [await h.channel.send_chunk(out, c, i) for i, c in enumerate(chunks)]
        assert len(set(ids)) == len(ids)
        sent = h.fake.sent
        assert [s["message"] for s in sent] == [c.text for c in chunks]
        assert all(s["groupId"] == GROUP_ID and not s["long_text"] for s in sent)
        assert sent[0]["textStyle"] == ["0:7:BOLD"]
        author, stamp = TRIGGER.rsplit(":", 1)
        assert (sent[0]["quoteAuthor"], sent[0]["quoteTimestamp"]) == (author, int(stamp))
        assert all("quoteTimestamp" not in s for s in sent[1:])


async def test_dm_reply_goes_to_the_person_and_typing_is_sent() -> None:
    async with signal_harness() as h:
        person = "a11ce000-0000-4000-8000-000000000002"
        out = Outbound(channel="signal", chat_id=person, text="hi", reply_id="r-2")
        await h.channel.typing(person)
        await h.channel.send_chunk(out, h.channel.render("hi")[0], 0)
        assert h.fake.sent[0]["recipient"] == [person]
        assert h.fake.typing == [{"recipient": [person]}]


async def test_sends_still_work_after_stop() -> None:
    # the gateway stops receiving first and lets the outbox finish afterwards
    async with signal_harness() as h:
        await h.channel.stop()
        out = Outbound(channel="signal", chat_id=f"group.{GROUP_ID}", text="late", reply_id="r-3")
        assert await h.channel.send_chunk(out, h.channel.render("late")[0], 0)
        assert [s["message"] for s in h.fake.sent] == ["late"]
