"""The event-stream parser behind the Signal adapter (WHATWG ``text/event-stream``)."""

from __future__ import annotations

import pytest

from channels.signal.sse import SseEvent, SseParser


def test_signal_cli_framing_comments_and_split_reads() -> None:
    parser = SseParser()
    wire = b':\nevent:receive\ndata:{"a":1}\n\n:\nevent:receive\ndata:{"b":\xc3\xa9}\n\n'
    events = []
    for i in range(len(wire)):  # one byte at a time: reads split anywhere
        events += parser.feed(wire[i : i + 1])
    assert events == [SseEvent("receive", '{"a":1}'), SseEvent("receive", '{"b":é}')]


def test_spec_details() -> None:
    parser = SseParser()
    events = parser.feed(b"data: one\r\ndata:two\r\nid: 7\r\n\r\ndata\n\nevent:x\n\n")
    # CRLF line ends, one optional space after the colon, multi-line data joined with
    # newlines, other fields (an id) ignored, "data" without a colon is an empty value,
    # an event with no data is not dispatched, the default type is "message"
    assert events == [SseEvent("message", "one\ntwo"), SseEvent("message", "")]


def test_an_endless_line_is_refused() -> None:
    parser = SseParser()
    with pytest.raises(ValueError, match="too long"):
        parser.feed(b"data:" + b"x" * (9 * 1024 * 1024))
