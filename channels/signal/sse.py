"""A server-sent events parser, as the WHATWG spec reads the ``text/event-stream``
format, fed raw bytes.

Kept here rather than taken from an SSE client library because the libraries at hand
(httpx-sse, aiohttp-sse-client) hide comments, and the keep-alives (signal-cli's ``:``
lines, which the adapter reads as bytes like any others) are the liveness signal its
gap detection needs. Event ids are not kept: signal-cli sends none.
"""

from __future__ import annotations

from dataclasses import dataclass

#: a single unterminated line longer than this is not an event stream (bytes)
MAX_LINE = 8 * 1024 * 1024


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: str


class SseParser:
    """Incremental: ``feed(bytes)`` returns the events completed by those bytes."""

    def __init__(self) -> None:
        self._buffer = b""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self._buffer += chunk
        # "\n" or "\r\n" line ends (signal-cli writes "\n"; a lone "\r" is not used)
        lines = self._buffer.split(b"\n")
        self._buffer = lines.pop()
        if len(self._buffer) > MAX_LINE:
            raise ValueError("event stream line too long")
        events = (self._line(raw.removesuffix(b"\r").decode("utf-8", "replace")) for raw in lines)
        return [event for event in events if event is not None]

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):  # a comment
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> SseEvent | None:
        event, data = self._event or "message", self._data
        self._event, self._data = "", []
        if not data:
            return None
        return SseEvent(event, "\n".join(data))
