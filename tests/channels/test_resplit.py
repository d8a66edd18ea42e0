"""``channels.chunks.resplit_chunks`` through the two renderers whose output can outgrow
the Markdown piece it came from: Matrix's HTML (escaping) and Signal's text (a list's
"- " becomes "• ", three bytes). Telegram's is covered by its own render tests."""

from __future__ import annotations

from channels.matrix.render import render_chunks as matrix_chunks
from channels.matrix.render import to_html
from channels.signal.render import render_chunks as signal_chunks
from channels.signal.render import to_styled
from channels.split import utf8_len
from tests.channels.kit import keeps_words

LIMIT = 200


def test_matrix_html_that_outgrew_the_limit_is_split_again() -> None:
    text = " ".join(f"a<b&c>{i}" for i in range(22))  # escaping grows it about 1.6x
    assert utf8_len(text) <= LIMIT < utf8_len(to_html(text))  # one piece, too big once HTML
    chunks = matrix_chunks(text, LIMIT)
    assert len(chunks) > 1
    assert all(utf8_len(c.text) <= LIMIT and utf8_len(c.plain) <= LIMIT for c in chunks)
    assert keeps_words(text, [c.plain for c in chunks])


def test_signal_text_that_outgrew_the_limit_is_split_again() -> None:
    text = "".join(f"- i{i}\n" for i in range(34))
    assert utf8_len(text) <= LIMIT < utf8_len(to_styled(text)[0])  # one piece, too big styled
    chunks = signal_chunks(text, LIMIT)
    assert len(chunks) > 1
    assert all(utf8_len(c.text) <= LIMIT for c in chunks)
    assert keeps_words(text.replace("- ", ""), [c.text for c in chunks])
