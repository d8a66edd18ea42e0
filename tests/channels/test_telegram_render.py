"""Markdown -> Telegram HTML: examples, and properties checked against the fake Bot API's
independent HTML validator (Telegram's tag subset, entities, balance)."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from channels.split import utf16_len
from channels.telegram.render import render_chunks, to_html, to_plain
from tests.fakes.telegram_api import parse_html


def test_inline_markup_and_escaping() -> None:
    html = to_html("**b** _i_ ~~s~~ `a<b` 1 < 2 & 3 > 2 <script>")
    assert html == (
        "<b>b</b> <i>i</i> <s>s</s> <code>a&lt;b</code> 1 &lt; 2 &amp; 3 &gt; 2 &lt;script&gt;"
    )


def test_blocks() -> None:
    md = (
        "# Title **x**\n\n- one\n- two\n  - nested\n\n> quoted\n\n"
        "```py\nif a < b:\n    pass\n```\n\n---"
    )
    assert to_html(md) == (
        "<b>Title x</b>\n\n• one\n• two\n  • nested\n\n<blockquote>quoted</blockquote>\n\n"
        '<pre><code class="language-py">if a &lt; b:\n    pass</code></pre>\n\n———'
    )
    assert (
        to_plain(md)
        == "Title x\n\n• one\n• two\n  • nested\n\nquoted\n\nif a < b:\n    pass\n\n———"
    )


def test_links_keep_safe_targets_only() -> None:
    assert to_html('[site](https://e.com/?a=1&b="2")') == (
        '<a href="https://e.com/?a=1&amp;b=%222%22">site</a>'
    )
    assert to_plain("[site](https://e.com/x)") == "site (https://e.com/x)"
    # markdown-it refuses javascript: links; they stay visible text, escaped
    assert "<a" not in to_html("[x](javascript:alert(1))")


def test_ordered_list_keeps_its_start() -> None:
    assert to_plain("3. three\n4. four") == "3. three\n4. four"


def test_ordered_list_numbers_show_as_written_when_they_count_right() -> None:
    # a hard-cut URL's tail can start a piece as "06861) ...": its zero must not go
    assert to_plain("06861) x") == "06861) x"
    assert to_plain("1. a\n1. b\n1. c") == "1. a\n2. b\n3. c"


def test_whitespace_only_text_renders_no_chunks() -> None:
    assert render_chunks("   \n\n  ") == []


_word = st.sampled_from(
    ["alpha", "beta", "gamma", "x1", "😀", "漢字", "a<b", "c>d", "r&d", "'q'", '"dq"', "e\u0301"]
)
_inline = st.one_of(
    _word,
    _word.map(lambda w: f"**{w}**"),
    _word.map(lambda w: f"_{w}_"),
    _word.map(lambda w: f"`{w}`"),
    _word.map(lambda w: f"[{w}](https://example.com/{w.encode().hex()})"),
    _word.map(lambda w: f"~~{w}~~"),
)
_para = st.lists(_inline, min_size=1, max_size=25).map(" ".join)
_bullets = st.lists(_para, min_size=1, max_size=4).map(lambda ps: "\n".join(f"- {p}" for p in ps))
_quote = _para.map(lambda p: f"> {p}")
_code = st.tuples(
    st.sampled_from(["", "python", "sh"]),
    st.lists(st.sampled_from(["x = 1 < 2", "if a & b:", "  print('<tag>')", ""]), max_size=30),
).map(lambda t: f"```{t[0]}\n" + "\n".join(t[1]) + "\n```")
_heading = _para.map(lambda p: f"## {p}")
_doc = st.lists(st.one_of(_para, _para, _bullets, _quote, _code, _heading), min_size=1, max_size=10)


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(blocks=_doc, limit=st.integers(min_value=80, max_value=600))
@example(blocks=["alpha", "alpha", "alpha", "alpha alpha alpha",  # a cut URL: "06861)"
                 "- [alpha](https://example.com/616c706861)", "> alpha", "> alpha", "> alpha"],
         limit=80)
def test_every_chunk_is_valid_telegram_html_within_the_limit(blocks: list[str], limit: int) -> None:
    md = "\n\n".join(blocks)
    chunks = render_chunks(md, limit)
    assert chunks or not to_plain(md).strip()  # an empty code block shows nothing
    for chunk in chunks:
        problem, visible = parse_html(chunk.text)
        assert problem is None, (problem, chunk.text)
        assert visible.strip()
        assert utf16_len(chunk.text) <= limit
        assert 0 < utf16_len(chunk.plain) <= limit
    # nothing lost: every letter and digit survives, in order. (Characters, not words:
    # at small limits a token longer than a chunk is hard-cut.)
    source = [ch for ch in re.sub(r"(?m)^```\w*$", "", md) if ch.isalnum()]
    shown = iter(ch for c in chunks for ch in c.plain if ch.isalnum())
    assert all(any(ch == s for s in shown) for ch in source)
