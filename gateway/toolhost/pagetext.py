"""A fetched body as text for the model: HTML to its readable text, text types as they
are, anything else described and not shown.

HTML goes through BeautifulSoup with the standard library's parser (no C extension):
scripts, styles and other non-text elements are dropped, block elements end lines, and
runs of blank lines are folded. What comes out is data (the caller renders it as quoted
tool output), so no markup is kept.
"""

from __future__ import annotations

import re

from bs4 import BeautifulSoup

#: elements whose content is never page text
_DROP = ("script", "style", "noscript", "template", "svg", "canvas", "iframe", "object",
         "head")
_HTML = ("text/html", "application/xhtml+xml")
#: application types that are text (besides ``text/*`` and ``+json``/``+xml`` suffixes)
_TEXT_APP = ("application/json", "application/xml", "application/javascript",
             "application/x-yaml", "application/yaml", "application/toml",
             "application/ld+json", "application/rss+xml", "application/atom+xml")


def media_type(content_type: str) -> str:
    """``text/html; charset=utf-8`` -> ``text/html``."""
    return content_type.split(";", 1)[0].strip().lower()


def kind_of(content_type: str, head: bytes) -> str:
    """"html", "text" or "binary" for a body of ``content_type`` starting with ``head``
    (sniffed when the server named no type)."""
    media = media_type(content_type)
    if media in _HTML:
        return "html"
    if media.startswith("text/") or media in _TEXT_APP or media.endswith(("+json", "+xml")):
        return "text"
    if media:
        return "binary"
    if b"\0" in head[:1024]:
        return "binary"
    start = head[:512].lstrip().lower()
    return "html" if start.startswith((b"<!doctype html", b"<html")) else "text"


def html_text(html: str) -> str:
    """The readable text of an HTML page: its title, then its body's text."""
    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup(list(_DROP)):
        tag.decompose()
    text = soup.get_text("\n")
    lines = [" ".join(line.split()) for line in text.splitlines()]
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return f"# {title}\n\n{body}" if title else body
