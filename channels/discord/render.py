"""Model Markdown to Discord messages.

Discord renders Markdown natively, so text is sent as written. The one thing that
must not pass through is a mass ping (``@everyone``, ``@here``, role or user pings
the model happened to write): that is stopped by ``allowed_mentions`` on the send,
not by rewriting the text, so what the model wrote still reads the same.
"""

from __future__ import annotations

from channels.base import Chunk
from channels.split import split_text

#: Developer docs, "Create Message": content is at most 2000 characters.
MAX_MESSAGE_LEN = 2000


def render(text: str, limit: int = MAX_MESSAGE_LEN) -> list[Chunk]:
    """Split ``text`` into Discord-sized chunks; pure, so retries resend identically.

    Discord never rejects Markdown, so ``plain`` equals ``text`` and no chunk will
    ever need the plain-text fallback. Blank text renders to no chunk at all (Discord
    answers 400 "Cannot send an empty message").
    """
    if not text.strip():
        return []
    return [Chunk(text=part, plain=part) for part in split_text(text, limit) if part]
