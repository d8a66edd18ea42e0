"""Markdown (what the model writes) to a platform's in-text "star" markup: ``*bold*``,
``_italic_``, ``~strike~``, ```` ``` ```` code blocks, ``> `` quotes, one bold run per
heading, lists as marker-prefixed lines, tables as ``a | b`` rows.

Slack's mrkdwn and WhatsApp's text formatting are this same markup and differ only in
escaping (Slack escapes ``&<>``; WhatsApp has no escaping), in how a link or image is
written and in the bullet. ``StarMarkup`` is the one walk over markdown-it-py's syntax
tree; each platform subclasses it and overrides those hooks.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

__all__ = ["MARKDOWN", "StarMarkup"]

#: The model's Markdown as the renderers that read its syntax tree or render HTML parse
#: it: CommonMark plus strikethrough and tables; raw HTML in it is text, never passed on.
MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])


#: the marker written on both sides of strong, emphasised and struck-through text
_MARKERS = {"strong": "*", "em": "_", "s": "~"}


def _prefix_lines(text: str, first: str, rest: str) -> str:
    lines = text.split("\n")
    tail = [(rest + line) if line else line for line in lines[1:]]
    return "\n".join([first + lines[0], *tail])


class StarMarkup:
    """The walk; the hooks below are the platform's. Pure: the same Markdown always
    gives the same text, and unknown constructs degrade to their (escaped) text."""

    #: the marker of an unordered list item
    bullet = "- "

    def text(self, content: str) -> str:
        """Plain text as the platform needs it (escaping)."""
        return content

    def code(self, content: str) -> str:
        """Code (inline or block) content as the platform needs it."""
        return content

    def link(self, href: str, label: str) -> str:
        raise NotImplementedError

    def image(self, src: str, alt: str) -> str:
        raise NotImplementedError

    def render(self, markdown: str) -> str:
        """CommonMark (plus strikethrough and tables) in this markup; blocks are
        separated by one blank line, no trailing newline."""
        root = SyntaxTreeNode(MARKDOWN.parse(markdown))
        blocks = [self._block(child) for child in root.children]
        return "\n\n".join(block for block in blocks if block)

    def _inline(self, node: SyntaxTreeNode) -> str:
        parts: list[str] = []
        for child in node.children:
            kind = child.type
            if kind in ("softbreak", "hardbreak"):
                parts.append("\n")
            elif kind in _MARKERS:
                parts.append(f"{_MARKERS[kind]}{self._inline(child)}{_MARKERS[kind]}")
            elif kind == "code_inline":
                parts.append(f"`{self.code(child.content)}`")
            elif kind == "link":
                parts.append(self.link(str(child.attrs.get("href", "")), self._inline(child)))
            elif kind == "image":
                parts.append(self.image(str(child.attrs.get("src", "")), child.content))
            elif child.children:
                parts.append(self._inline(child))
            else:  # text, and anything unknown
                parts.append(self.text(child.content))
        return "".join(parts)

    def _list(self, node: SyntaxTreeNode) -> str:
        ordered = node.type == "ordered_list"
        number = int(str(node.attrs.get("start", 1))) if ordered else 0
        items: list[str] = []
        for item in node.children:
            marker = f"{number}. " if ordered else self.bullet
            number += 1
            body = "\n".join(self._block(child) for child in item.children)
            items.append(_prefix_lines(body, marker, " " * len(marker)))
        return "\n".join(items)

    def _table(self, node: SyntaxTreeNode) -> str:
        rows = (row for section in node.children for row in section.children)
        return "\n".join(" | ".join(self._inline(cell.children[0]) if cell.children else ""
                                    for cell in row.children) for row in rows)

    def _block(self, node: SyntaxTreeNode) -> str:
        kind = node.type
        if kind == "paragraph":
            return self._inline(node.children[0]) if node.children else ""
        if kind == "heading":
            inner = self._inline(node.children[0]) if node.children else ""
            # one bold run: bold inside a heading would toggle it off
            return f"*{inner.replace('*', '')}*"
        if kind in ("fence", "code_block"):
            content = node.content if node.content.endswith("\n") else node.content + "\n"
            return f"```\n{self.code(content)}```"
        if kind == "blockquote":
            inner = "\n".join(self._block(child) for child in node.children)
            return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))
        if kind in ("bullet_list", "ordered_list"):
            return self._list(node)
        if kind == "table":
            return self._table(node)
        if kind == "hr":
            return "───"
        if kind == "inline":
            return self._inline(node)
        return self.text(node.content)
