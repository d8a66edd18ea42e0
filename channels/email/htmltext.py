"""HTML mail bodies as plain text, without the quoted thread.

A small ``html.parser`` walk is enough here: mail HTML is shown to the model as plain
words, so only block structure (line breaks), list bullets and link targets matter.
Quoted history is dropped where clients mark it: Gmail's ``div.gmail_quote``, Apple
Mail's and Thunderbird's ``blockquote type="cite"``, Outlook's ``div#divRplyFwdMsg``
and ``div#appendonsend`` (everything after it is the quoted mail).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "footer",
        "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "ol", "p", "pre",
        "section", "table", "tr", "ul",
    }
)
_SKIP = frozenset({"script", "style", "head", "title", "template"})
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
     "track", "wbr"}
)
_QUOTE_CLASSES = ("gmail_quote", "yahoo_quoted", "moz-cite-prefix")
_QUOTE_IDS = ("divrplyfwdmsg", "appendonsend")


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.stack: list[str] = []  # open non-void tags
        self.hidden_depth: int | None = None  # stack depth where hidden content began
        self.stopped = False  # after an Outlook reply separator: the rest is quoted

    def _newline(self) -> None:
        if self.out and not self.out[-1].endswith("\n"):
            self.out.append("\n")

    def _hidden(self) -> bool:
        return self.stopped or self.hidden_depth is not None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k.lower(): (v or "") for k, v in attrs}
        if tag not in _VOID:
            self.stack.append(tag)
        if self._hidden():
            return
        classes = a.get("class", "").lower()
        element_id = a.get("id", "").lower()
        if element_id in _QUOTE_IDS:
            self.stopped = True
            return
        quoted = (tag == "blockquote" and a.get("type", "").lower() == "cite") or any(
            c in classes for c in _QUOTE_CLASSES
        )
        if tag in _SKIP or quoted:
            if tag not in _VOID:
                self.hidden_depth = len(self.stack) - 1
            return
        if tag in _BLOCK:
            self._newline()
        if tag == "li":
            self.out.append("- ")
        if tag == "a" and a.get("href", "").startswith(("http://", "https://")):
            self.stack[-1] = "a:" + a["href"]

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            if tag in _BLOCK and not self._hidden():
                self._newline()
            return
        # pop up to the matching open tag (mail HTML is often not well nested)
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i].split(":", 1)[0] == tag:
                href = self.stack[i][2:] if self.stack[i].startswith("a:") else ""
                del self.stack[i:]
                if self.hidden_depth is not None and i <= self.hidden_depth:
                    self.hidden_depth = None
                    return
                if not self._hidden():
                    # show the target unless the link text already is the target
                    if href and href not in self.out[-1:]:
                        self.out.append(f" ({href})")
                    if tag in _BLOCK:
                        self._newline()
                return

    def handle_data(self, data: str) -> None:
        if not self._hidden():
            self.out.append(data if "pre" in self.stack else re.sub(r"\s+", " ", data))


def html_to_text(html: str) -> str:
    """The visible text of ``html``, quoted history removed, blank lines collapsed."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = [line.strip() for line in "".join(parser.out).split("\n")]
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()
