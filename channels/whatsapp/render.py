"""The model's Markdown to WhatsApp text messages.

WhatsApp formats inside the text itself: ``*bold*``, ``_italic_``, ``~strike~``,
```` ```monospace``` ````, `` `inline code` ``, ``> quote``, ``- `` and ``1. `` lists
(faq.whatsapp.com/539178204879377). There is no escaping and no parse mode, so
a message never fails for its formatting: ``Chunk.formatted`` only says the text was
converted. Links have no markup and become ``label (url)``. A text message's body
holds at most 4096 characters (Cloud API messages reference, ``text.body``).
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from channels.base import Chunk
from channels.split import Span, split_spans

__all__ = ["WHATSAPP_TEXT_LIMIT", "render_chunks", "to_whatsapp"]

WHATSAPP_TEXT_LIMIT = 4096
#: below this budget a piece is sent as its raw Markdown instead of shrinking further
_MIN_BUDGET = 64
_MD = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["strikethrough", "table"]
)


def _inline(node: SyntaxTreeNode) -> str:
    parts: list[str] = []
    for child in node.children:
        kind = child.type
        if kind in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif kind == "strong":
            parts.append(f"*{_inline(child)}*")
        elif kind == "em":
            parts.append(f"_{_inline(child)}_")
        elif kind == "s":
            parts.append(f"~{_inline(child)}~")
        elif kind == "code_inline":
            parts.append(f"`{child.content}`")
        elif kind == "link":
            href = str(child.attrs.get("href", ""))
            label = _inline(child)
            parts.append(href if label in ("", href) else f"{label} ({href})")
        elif kind == "image":
            src = str(child.attrs.get("src", ""))
            parts.append(f"{child.content} ({src})" if child.content else src)
        elif child.children:
            parts.append(_inline(child))
        else:
            parts.append(child.content)
    return "".join(parts)


def _prefix_lines(text: str, first: str, rest: str) -> str:
    lines = text.split("\n")
    tail = [(rest + line) if line else line for line in lines[1:]]
    return "\n".join([first + lines[0], *tail])


def _list(node: SyntaxTreeNode) -> str:
    ordered = node.type == "ordered_list"
    number = int(str(node.attrs.get("start", 1))) if ordered else 0
    items: list[str] = []
    for item in node.children:
        marker = f"{number}. " if ordered else "- "
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
        # one bold run: bold inside a heading would toggle it off
        return f"*{inner.replace('*', '')}*"
    if kind in ("fence", "code_block"):
        content = node.content if node.content.endswith("\n") else node.content + "\n"
        return f"```\n{content}```"
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
    return node.content


def to_whatsapp(markdown: str) -> str:
    """Convert CommonMark (plus strikethrough and tables) to WhatsApp's formatting.
    Pure; blocks are separated by one blank line; unknown constructs keep their text."""
    root = SyntaxTreeNode(_MD.parse(markdown))
    blocks = [_block(child) for child in root.children]
    return "\n\n".join(block for block in blocks if block)


def _chunk(text: str, span: Span) -> Chunk | None:
    plain = text[span.start : span.end]
    if not plain.strip():
        return None
    formatted = to_whatsapp(span.render(text))
    if not formatted.strip():
        # nothing visible after conversion (e.g. only a link definition): keep the words
        return Chunk(text=plain, plain=plain, formatted=False)
    return Chunk(text=formatted, plain=plain)


def render_chunks(text: str, limit: int = WHATSAPP_TEXT_LIMIT) -> list[Chunk]:
    """Split the Markdown to ``limit`` and convert each piece; pure.

    Splitting happens on the Markdown, so a cut code fence is closed and reopened and
    each piece converts on its own. ``Chunk.plain`` is the piece's raw slice. A piece
    that conversion grew past the limit (a bare link becoming ``label (url)``) makes
    the whole text re-split with a smaller budget; whitespace-only pieces are dropped
    (the API refuses an empty body).
    """
    budget = limit
    while budget >= _MIN_BUDGET:
        chunks = [c for span in split_spans(text, budget) if (c := _chunk(text, span))]
        if all(len(c.text) <= limit and len(c.plain) <= limit for c in chunks):
            return chunks
        budget = budget * 4 // 5
    return [
        Chunk(text=piece, plain=piece, formatted=False)
        for span in split_spans(text, limit)
        if (piece := text[span.start : span.end]).strip()
    ]
