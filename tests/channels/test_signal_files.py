"""The data URI a Signal file travels in, read back as signal-cli's ``DataURI`` reads
it (tests/fakes/signal_cli.py): the name survives the characters that would end or
change a URI parameter, and a file past Signal's cap is refused in words."""

from __future__ import annotations

import pytest

from channels.errors import PermanentError
from channels.signal.files import ATTACHMENT_MAX, data_uri
from tests.fakes.signal_cli import read_attachment


def test_the_name_type_and_bytes_survive_the_data_uri() -> None:
    name = "plan; v2+final, é.pdf"
    got = read_attachment(data_uri(b"%PDF-1.7\x00\xff", name))
    assert (got.filename, got.mime, got.data) == (name, "application/pdf", b"%PDF-1.7\x00\xff")


def test_a_file_over_signals_cap_is_refused_with_a_reason() -> None:
    with pytest.raises(PermanentError, match="Signal attachments may be at most 100 MB"):
        data_uri(bytes(ATTACHMENT_MAX + 1), "big.bin")  # calloc'd: no 100 MB written
