"""Markdown to Slack mrkdwn, and splitting to Slack's per-message limit."""

from __future__ import annotations

import html
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from channels.slack.mrkdwn import escape, to_mrkdwn
from channels.slack.render import SLACK_SECTION_LIMIT, render_chunks


def test_inline_formatting() -> None:
    assert to_mrkdwn("**bold** _it_ *it2* ~~gone~~ `a<b`") == "*bold* _it_ _it2_ ~gone~ `a&lt;b`"


def test_links_images_and_autolinks() -> None:
    assert to_mrkdwn("[doc](https://e.com/x?a=1)") == "<https://e.com/x?a=1|doc>"
    assert to_mrkdwn("<https://e.com>") == "<https://e.com>"
    assert to_mrkdwn("![cat](https://e.com/c.png)") == "<https://e.com/c.png|cat>"
    # a '|' in the URL would end it early inside <url|label>
    assert to_mrkdwn("[x](https://e.com/a|b)") == "<https://e.com/a%7Cb|x>"


def test_headings_lists_quotes_and_code() -> None:
    md = (
        "# Plan **now**\n\n- one\n- two\n  - nested\n\n3. three\n4. four\n\n> a\n> b\n\n"
        "```py\nx = 1 < 2\n```"
    )
    assert to_mrkdwn(md) == (
        "*Plan now*\n\n• one\n• two\n  • nested\n\n3. three\n4. four\n\n> a\n> b\n\n"
        "```\nx = 1 &lt; 2\n```"
    )


def test_escaping_keeps_user_mentions_but_not_broadcasts() -> None:
    assert escape("a & b <@U0ALICE01> <!channel> <x>") == (
        "a &amp; b <@U0ALICE01> &lt;!channel&gt; &lt;x&gt;"
    )
    assert to_mrkdwn("ping <@U0ALICE01> and <!everyone>") == (
        "ping <@U0ALICE01> and &lt;!everyone&gt;"
    )


def test_short_text_is_one_chunk_with_plain_fallback() -> None:
    chunks = render_chunks("Hello **world** & co")
    assert len(chunks) == 1
    assert chunks[0].text == "Hello *world* &amp; co"
    assert chunks[0].plain == "Hello **world** & co"  # escaped only when sent
    assert chunks[0].formatted


def test_plain_chunks_join_back_to_the_input_even_across_a_cut_fence() -> None:
    text = "intro\n\n```python\n" + "".join(f"line_{i} = {i}\n" for i in range(600)) + "```\n"
    chunks = render_chunks(text)
    assert len(chunks) >= 3
    assert "".join(c.plain for c in chunks) == text
    for chunk in chunks:
        assert chunk.text.count("```") % 2 == 0  # each formatted chunk closes its fence


def test_empty_and_blank_text_give_no_chunks() -> None:
    assert render_chunks("") == []
    assert render_chunks("   \n\n  ") == []


def test_escaping_growth_is_resplit_under_the_limit() -> None:
    text = "&" * 2900 + "\n\n" + "<>" * 700
    chunks = render_chunks(text)
    assert chunks and all(len(c.text) <= SLACK_SECTION_LIMIT for c in chunks)
    decoded = "".join(c.text for c in chunks).replace("&amp;", "&").replace("&lt;", "<")
    assert decoded.replace("&gt;", ">").count("&") == 2900


def test_render_is_deterministic() -> None:
    text = "para one\n\n" * 400 + "```\n" + "code line\n" * 400 + "```"
    assert render_chunks(text) == render_chunks(text)


# Links are left out: "[b](b)" rightly renders as one "<b>", which breaks letter counting.
words = st.text(alphabet=st.sampled_from(list("abc &<>*_`~\n#->")), min_size=0, max_size=40)


@settings(max_examples=60, deadline=None)
@given(st.lists(words, min_size=1, max_size=200), st.integers(min_value=200, max_value=3000))
def test_every_chunk_fits_and_nothing_visible_is_lost(parts: list[str], limit: int) -> None:
    text = " ".join(parts)
    chunks = render_chunks(text, limit)
    assert all(len(c.text) <= limit for c in chunks)
    # every letter of the input survives formatting (markup characters may not)
    # a fence's info string (its language) is dropped on purpose: Slack has none
    visible = re.sub(r"(?m)^( {0,3})(`{3,}|~{3,})(.*)$", r"\1\2", text)
    at_least = [ch for ch in visible if ch in "abc"]
    rendered = html.unescape("".join(c.text for c in chunks))
    got = [ch for ch in rendered if ch in "abc"]
    assert len(got) >= len(at_least)
    remaining = iter([ch for ch in text if ch in "abc"])
    assert all(ch in remaining for ch in got)  # in order, nothing invented
