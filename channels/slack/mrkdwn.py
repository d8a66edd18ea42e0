"""Markdown (what the model writes) to Slack ``mrkdwn`` (what Slack renders).

Slack's format differs from Markdown: ``*bold*``, ``_italic_``, ``~strike~``, links as
``<url|label>``, no headings, no lists, no tables, and ``&``, ``<``, ``>`` must be
escaped everywhere, code included (https://docs.slack.dev/messaging/formatting-message-text).
The walk over markdown-it-py's syntax tree is ``channels.markup.StarMarkup`` (shared
with WhatsApp); this module adds Slack's escaping, links and bullet. The
``slackify-markdown`` package was tried and left out because it neither escapes code
nor keeps multi-line block quotes quoted.

The one Slack control sequence the model may emit on purpose is a user mention
``<@U123>``; it passes through unescaped so the mention notifies. ``<!channel>`` and
friends are escaped: a model must not be able to ping a whole channel.
"""

from __future__ import annotations

import re

from channels.markup import StarMarkup

__all__ = ["escape", "to_mrkdwn"]

_USER_MENTION = re.compile(r"<@[UW][A-Z0-9]{2,}>")


def _escape_plain(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape(text: str) -> str:
    """Escape ``&``, ``<``, ``>`` as Slack requires, keeping ``<@U…>`` user mentions."""
    out: list[str] = []
    pos = 0
    for match in _USER_MENTION.finditer(text):
        out.append(_escape_plain(text[pos : match.start()]))
        out.append(match.group(0))
        pos = match.end()
    out.append(_escape_plain(text[pos:]))
    return "".join(out)


def _safe_url(url: str) -> str:
    # Inside <url|label> a raw '|' or '>' would end the URL early.
    return url.replace("|", "%7C").replace(">", "%3E").replace("<", "%3C")


class _Mrkdwn(StarMarkup):
    bullet = "• "

    def text(self, content: str) -> str:
        return escape(content)

    def code(self, content: str) -> str:
        return _escape_plain(content)  # code too: Slack parses <...> everywhere

    def link(self, href: str, label: str) -> str:
        href = _safe_url(href)
        plain_label = label.replace("&amp;", "&")
        return f"<{href}>" if plain_label in ("", href) else f"<{href}|{label}>"

    def image(self, src: str, alt: str) -> str:
        src, alt = _safe_url(src), escape(alt)
        return f"<{src}|{alt}>" if alt else f"<{src}>"


_MRKDWN = _Mrkdwn()


def to_mrkdwn(markdown: str) -> str:
    """Convert CommonMark (plus strikethrough and tables) to Slack mrkdwn.

    Pure and deterministic. Blocks are separated by one blank line; the result has no
    trailing newline. Unknown constructs degrade to their escaped text, never raise.
    """
    return _MRKDWN.render(markdown)
