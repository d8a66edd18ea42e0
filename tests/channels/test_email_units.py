"""Pure parts of the email adapter: Authentication-Results judgement, SMTP reply
mapping, reply composition and config errors (no servers)."""

from __future__ import annotations

from email.parser import BytesHeaderParser

import aiosmtplib
import pytest
from pydantic import ValidationError

from channels.base import Chunk
from channels.email import EmailChannel, EmailSettings
from channels.email.authresults import verdict
from channels.email.compose import MAX_REFERENCES, compose, reply_message_id
from channels.email.normalize import thread_key
from channels.email.parse import parse
from channels.email.smtp import map_smtp_error
from channels.errors import MaybeSent, NetworkError, PermanentError, RateLimited

TRUSTED = ["mx.google.com"]


@pytest.mark.parametrize(
    ("headers", "sender", "verified"),
    [
        (["mx.google.com; dkim=pass header.i=@example.org; spf=pass smtp.mailfrom=a@example.org;"
          " dmarc=pass (p=NONE sp=NONE dis=NONE) header.from=example.org"], "a@example.org", True),
        (["mx.google.com; dmarc=fail (p=QUARANTINE) header.from=example.org"], "a@example.org",
         False),
        # dmarc passed, but for another domain than the From
        (["mx.google.com; dmarc=pass header.from=evil.test"], "a@example.org", False),
        # no DMARC result: aligned DKIM (parent domain) or aligned SPF suffices
        (["mx.google.com; dkim=pass header.d=example.org"], "a@mail.example.org", True),
        (["mx.google.com; spf=pass smtp.mailfrom=bounce@example.org"], "a@example.org", True),
        (["mx.google.com; dkim=pass header.d=evil.test"], "a@example.org", False),
        (["mx.google.com; dkim=pass header.d=org"], "a@example.org", False),
        # a header from a server we do not trust counts for nothing
        (["mail.evil.test; dmarc=pass header.from=example.org"], "a@example.org", False),
        # the trusted server's own (topmost) verdict wins over a forged one below it
        (["mx.google.com; dmarc=fail header.from=example.org",
          "mx.google.com; dmarc=pass header.from=example.org"], "a@example.org", False),
        # comments (even nested) are ignored, authserv-id is case-insensitive
        (["MX.Google.com (a (nested) comment); dmarc=pass header.from=example.org"],
         "a@example.org", True),
        ([], "a@example.org", False),
    ],
)
def test_authentication_results(headers: list[str], sender: str, verified: bool) -> None:
    assert verdict(headers, sender, TRUSTED).verified is verified


@pytest.mark.parametrize(
    ("code", "text", "kind", "wait"),
    [
        (421, "4.7.0 Try again later, closing connection.", RateLimited, 60.0),
        (450, "4.7.28 Rate limited; try again in 90 seconds", RateLimited, 90.0),
        (451, "4.7.1 Please retry in 2 minutes", RateLimited, 120.0),
        (451, "4.3.0 Mail server temporarily rejected message.", NetworkError, None),
        (552, "5.3.4 Message size exceeds fixed limit", PermanentError, None),
        (550, "5.7.1 Our system has detected an unusual rate", PermanentError, None),
    ],
)
def test_smtp_replies_map_onto_the_channel_errors(
    code: int, text: str, kind: type[Exception], wait: float | None
) -> None:
    error = map_smtp_error(aiosmtplib.SMTPDataError(code, text), throttle_wait=60.0)
    assert type(error) is kind
    if isinstance(error, RateLimited):
        assert error.retry_after == wait
    if code == 552:
        assert isinstance(error, PermanentError) and error.reason == "too_large"


def test_refused_login_and_dropped_connection() -> None:
    refused = map_smtp_error(aiosmtplib.SMTPAuthenticationError(535, "5.7.8 bad"), 60)
    assert isinstance(refused, PermanentError) and refused.reason == "auth_failed"
    gone = map_smtp_error(aiosmtplib.SMTPServerDisconnected("closed"), 60)
    assert isinstance(gone, MaybeSent)  # retried, counted: it may have been accepted


ORIGINAL = (
    b"From: Ada <ada@example.org>\r\nTo: claw@example.net, bob@example.com\r\n"
    b"Cc: Carol <carol@example.com>, claw+x@example.net\r\nSubject: Re: RE: Offsite\r\n"
    b"Message-ID: <m-30@example.org>\r\nReferences: "
    + b" ".join(f"<m-{i}@example.org>".encode() for i in range(30))
    + b"\r\n\r\n"
)


def test_reply_all_with_thread_headers_and_alternatives() -> None:
    settings = EmailSettings(address="claw@example.net", aliases=["claw+x@example.net"])
    original = BytesHeaderParser().parsebytes(ORIGINAL)
    chunk = Chunk(text="<p><b>Yes</b></p>\n", plain="**Yes**")
    mid = reply_message_id("turn-9", 1, settings.address)
    mail = compose(original, settings, chunk, mid)
    assert mail["To"] == "ada@example.org"
    assert mail["Cc"] == "bob@example.com, carol@example.com"  # the bot's aliases left out
    assert mail["Subject"] == "Re: Offsite"
    assert mail["In-Reply-To"] == "<m-30@example.org>"
    refs = str(mail["References"]).split()
    assert len(refs) == MAX_REFERENCES
    assert refs[0] == "<m-0@example.org>" and refs[-1] == "<m-30@example.org>"
    assert mail["Message-ID"] == f"<{mid}>" and mid.endswith("@example.net")
    assert mail.get_content_type() == "multipart/alternative"
    assert reply_message_id("turn-9", 1, settings.address) == mid  # stable across retries
    assert reply_message_id("turn-9", 2, settings.address) != mid


def test_thread_key_is_gmails_thread_id_or_the_root_message_id() -> None:
    root = parse(b"From: a@example.org\r\nMessage-ID: <r@x>\r\n\r\nhi\r\n", "f")
    reply = parse(
        b"From: b@example.org\r\nMessage-ID: <s@x>\r\nIn-Reply-To: <r@x>\r\n"
        b"References: <r@x>\r\n\r\nhi\r\n", "f",
    )
    assert thread_key(root) == thread_key(reply) != thread_key(reply.__class__(
        **{**reply.__dict__, "references": [], "in_reply_to": None}))
    assert thread_key(reply, "1781234567890") == "gm-1781234567890"


def test_config_errors_name_the_key_and_the_fix() -> None:
    with pytest.raises(ValueError, match="EMAIL_PASSWORD"):
        EmailChannel.from_config("default", {"address": "claw@example.net"}, {})
    with pytest.raises(ValueError, match="EMAIL_OAUTH_REFRESH_TOKEN"):
        EmailChannel.from_config(
            "default",
            {"address": "claw@example.net", "auth": "oauth2", "client_id": "c"},
            {"EMAIL_OAUTH_CLIENT_SECRET": "s"},
        )
    with pytest.raises(ValidationError, match="client_id"):
        EmailSettings(address="claw@example.net", auth="oauth2")
    with pytest.raises(ValidationError, match="address"):
        EmailSettings(address="not-an-address")
    channel = EmailChannel.from_config(
        "default", {"address": "Claw@Example.net"}, {"EMAIL_PASSWORD": "app-pw-123"}
    )
    assert channel.settings.address == "claw@example.net"
    assert "app-pw-123" not in repr(channel) + repr(vars(channel))
