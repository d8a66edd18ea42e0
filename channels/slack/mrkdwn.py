"""Markdown (what the model writes) to Slack ``mrkdwn`` (what Slack renders).

Slack's format differs from Markdown: ``*bold*``, ``_italic_``, ``~strike~``, links as
``<url|label>``, no headings, no lists, no tables, and ``&``, ``<``, ``>`` must be
escaped everywhere, code included (https://docs.slack.dev/messaging/formatting-message-text).
A small renderer over markdown-it-py's syntax tree does the conversion; the
``slackify-markdown`` package was tried and left out because it neither escapes code
nor keeps multi-line block quotes quoted.

The one Slack control sequence the model may emit on purpose is a user mention
``<@U123>``; it passes through unescaped so the mention notifies. ``<!channel>`` and
friends are escaped: a model must not be able to ping a whole channel.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

__all__ = ["escape", "to_mrkdwn"]

_USER_MENTION = re.compile(r"<@[UW][A-Z0-9]{2,}>")
_MD = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["strikethrough", "table"]
)


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


def _inline(node: SyntaxTreeNode) -> str:
    parts: list[str] = []
    for child in node.children:
        kind = child.type
        if kind == "text":
            parts.append(escape(child.content))
        elif kind in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif kind == "strong":
            parts.append(f"*{_inline(child)}*")
        elif kind == "em":
            parts.append(f"_{_inline(child)}_")
        elif kind == "s":
            parts.append(f"~{_inline(child)}~")
        elif kind == "code_inline":
            parts.append(f"`{_escape_plain(child.content)}`")
        elif kind == "link":
            href = _safe_url(str(child.attrs.get("href", "")))
            label = _inline(child)
            plain_label = label.replace("&amp;", "&")
            parts.append(f"<{href}>" if plain_label in ("", href) else f"<{href}|{label}>")
        elif kind == "image":
            src = _safe_url(str(child.attrs.get("src", "")))
            alt = escape(child.content)
            parts.append(f"<{src}|{alt}>" if alt else f"<{src}>")
        elif child.children:
            parts.append(_inline(child))
        else:
            parts.append(escape(child.content))
    return "".join(parts)


def _strip_emphasis(text: str) -> str:
    # A heading becomes one bold run; bold inside it would toggle bold off.
    return text.replace("*", "")


def _prefix_lines(text: str, first: str, rest: str) -> str:
    lines = text.split("\n")
    head = first + lines[0]
    tail = [(rest + line) if line else line for line in lines[1:]]
    return "\n".join([head, *tail])


def _list(node: SyntaxTreeNode) -> str:
    ordered = node.type == "ordered_list"
    number = int(str(node.attrs.get("start", 1))) if ordered else 0
    items: list[str] = []
    for item in node.children:
        marker = f"{number}. " if ordered else "• "
        number += 1
        body = "\n".join(_block(child) for child in item.children)
        items.append(_prefix_lines(body, marker, " " * len(marker)))
    return "\n".join(items)


def _table(node: SyntaxTreeNode) -> str:
    rows: list[str] = []
    for section in node.children:
        for row in section.children:
            rows.append(" | ".join(_inline(cell.children[0]) if cell.children else ""
                                   for cell in row.children))
    return "\n".join(rows)


def _block(node: SyntaxTreeNode) -> str:
    kind = node.type
    if kind == "paragraph":
        return _inline(node.children[0]) if node.children else ""
    if kind == "heading":
        inner = _inline(node.children[0]) if node.children else ""
        return f"*{_strip_emphasis(inner)}*"
    if kind in ("fence", "code_block"):
        content = node.content if node.content.endswith("\n") else node.content + "\n"
        return f"```\n{_escape_plain(content)}```"
    if kind == "blockquote":
        inner = "\n".join(_block(child) for child in node.children)
        return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))
    if kind in ("bullet_list", "ordered_list"):
        return _list(node)
    if kind == "table":
        return _table(node)
    if kind == "hr":
        return "───"
    if kind == "inline":
        return _inline(node)
    return escape(node.content)


def to_mrkdwn(markdown: str) -> str:
    """Convert CommonMark (plus strikethrough and tables) to Slack mrkdwn.

    Pure and deterministic. Blocks are separated by one blank line; the result has no
    trailing newline. Unknown constructs degrade to their escaped text, never raise.
    """
    root = SyntaxTreeNode(_MD.parse(markdown))
    blocks = [_block(child) for child in root.children]
    return "\n\n".join(block for block in blocks if block)
