"""The block structure of the model's Markdown as plain lines: one parse and one walk
over markdown-it-py's token stream for the renderers whose output is visible text plus
formatting kept apart from the layout (Telegram's HTML tags, Signal's style ranges).

``BlockWalker`` owns the layout both share: blank lines between blocks (one inside
lists), bullets and numbers (nested lists indented), a line of dashes for a rule, raw
HTML blocks as text. A subclass says how a heading, a block quote, a code block and the
inline content look, and how text is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["BlockWalker"]

#: CommonMark plus strikethrough; raw HTML stays in the tokens, and is written as text
_PARSER = MarkdownIt("commonmark").enable("strikethrough")


class BlockWalker:
    """Walks block tokens into ``out``; ``fresh`` is true where no separator is due."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.lists: list[list[int]] = []  # per open list: [next number] or [] for bullets
        self.fresh = True  # nothing written since the last block break

    # -- what a subclass decides ----------------------------------------------------
    def esc(self, text: str) -> str:
        return text

    def heading(self, opening: bool) -> None:
        raise NotImplementedError

    def quote(self, opening: bool) -> None:
        raise NotImplementedError

    def code_block(self, token: Token) -> None:
        raise NotImplementedError

    def inline(self, children: Sequence[Token]) -> None:
        raise NotImplementedError

    # -- the shared layout ----------------------------------------------------------
    def emit(self, text: str) -> None:
        if text:
            self.out.append(text)
            self.fresh = False

    def gap(self, newlines: int) -> None:
        """End the current block with up to ``newlines`` line breaks."""
        if self.fresh:
            return
        tail = "".join(self.out[-3:])
        have = len(tail) - len(tail.rstrip("\n"))
        if have < newlines:
            self.emit("\n" * (newlines - have))

    def walk(self, markdown: str) -> None:
        for token in _PARSER.parse(markdown):
            self.block(token)

    def block(self, t: Token) -> None:
        kind = t.type
        if kind == "inline":
            self.inline(t.children or [])
        elif kind in ("paragraph_open", "paragraph_close"):
            self.gap(1 if self.lists else 2)
        elif kind == "heading_open":
            self.gap(2)
            self.heading(True)
        elif kind == "heading_close":
            self.heading(False)
            self.gap(2)
        elif kind in ("bullet_list_open", "ordered_list_open"):
            self.gap(1 if self.lists else 2)
            first = t.attrGet("start")
            self.lists.append([int(first) if first else 1] if kind == "ordered_list_open" else [])
        elif kind in ("bullet_list_close", "ordered_list_close"):
            self.lists.pop()
            self.gap(1 if self.lists else 2)
        elif kind == "list_item_open":
            self.gap(1)
            numbering = self.lists[-1] if self.lists else []
            self.emit("  " * (len(self.lists) - 1) + (_number(t, numbering[0]) if numbering
                                                      else "• "))
            if numbering:
                numbering[0] += 1
            self.fresh = True
        elif kind == "list_item_close":
            self.fresh = False
            self.gap(1)
        elif kind == "blockquote_open":
            self.gap(2)
            self.quote(True)
        elif kind == "blockquote_close":
            self.quote(False)
            self.gap(2)
        elif kind in ("fence", "code_block"):
            self.gap(2)
            self.code_block(t)
            self.gap(2)
        elif kind == "hr":
            self.gap(2)
            self.emit("———")
            self.gap(2)
        elif kind == "html_block":
            self.gap(2)
            self.emit(self.esc(t.content.rstrip("\n")))
            self.gap(2)


def _number(item: Token, count: int) -> str:
    """An ordered item's marker: as written when it says ``count`` (a fragment of a
    split reply such as ``0042) ...`` keeps its zeros and bracket: no character is
    lost), else ``count`` (a list numbered ``1. 1. 1.`` shows 1, 2, 3)."""
    as_written = item.info.isdigit() and int(item.info) == count
    return f"{item.info}{item.markup} " if as_written else f"{count}. "
