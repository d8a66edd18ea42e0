"""Model Markdown to Discord messages.

Discord renders Markdown natively, so text is sent as written. The one thing that
must not pass through is a mass ping (``@everyone``, ``@here``, role or user pings
the model happened to write): that is stopped by ``allowed_mentions`` on the send,
not by rewriting the text, so what the model wrote still reads the same.
"""

from __future__ import annotations

from channels.base import Chunk
from channels.split import split_spans

#: Developer docs, "Create Message": content is at most 2000 characters, counted in
#: Unicode code points, i.e. Python's ``len`` (Discord staff in discord-api-docs#1315).
MAX_MESSAGE_LEN = 2000


def render(text: str, limit: int = MAX_MESSAGE_LEN) -> list[Chunk]:
    """Split ``text`` into Discord-sized chunks; pure, so retries resend identically.

    ``text`` of a chunk is what is sent: ``channels.split`` cuts at paragraph, line,
    sentence, word in that order, and a code block that must be cut is closed and
    reopened with its language. ``plain`` is the chunk's slice of the input without
    those added fence lines, so the plains joined are exactly the input; Discord
    never rejects Markdown, so ``plain`` is never needed as a fallback. Blank text
    renders to no chunk (Discord answers 400 "Cannot send an empty message").
    """
    if not text.strip():
        return []
    return [
        Chunk(text=span.render(text), plain=text[span.start : span.end])
        for span in split_spans(text, limit)
    ]
