"""XOAUTH2: the gateway refreshes the access token before it expires, logs in to IMAP
(a real dovecot checking tokens against the local introspection endpoint) and SMTP
(the aiosmtpd fake checking them likewise) with it, and a revoked refresh token is
reported clearly, without secrets."""

from __future__ import annotations

import asyncio
import base64
import logging
import traceback
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from channels.email import EmailChannel
from channels.email.oauth import TokenManager
from channels.errors import PermanentError
from channels.models import Outbound
from tests.channels.harness_email import TRIGGER, TRIGGER_ID, append, eml, imap_client
from tests.channels.kit import WAIT, MemoryCursorStore, RecordingSink
from tests.fakes import dovecot
from tests.fakes.oauth_server import CLIENT_ID, CLIENT_SECRET, REFRESH_TOKEN, TokenEndpoint
from tests.fakes.smtp_server import AUTHSERV_ID, SmtpServer

SECRETS = (CLIENT_SECRET, REFRESH_TOKEN)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def endpoint() -> AsyncIterator[TokenEndpoint]:
    server = TokenEndpoint(username="bot@pool.test")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def manager(endpoint: TokenEndpoint, clock: Clock, margin: float = 120) -> TokenManager:
    return TokenManager(endpoint.token_url, CLIENT_ID, SecretStr(CLIENT_SECRET),
                        SecretStr(REFRESH_TOKEN), margin=margin, clock=clock)


async def test_access_token_is_refreshed_before_it_expires(endpoint: TokenEndpoint) -> None:
    clock = Clock()
    tokens = manager(endpoint, clock, margin=120)
    first = await tokens.token()
    assert endpoint.valid(first) and endpoint.grants == 1
    clock.now += 3600 - 121  # still outside the margin: reused
    assert await tokens.token() == first
    assert endpoint.grants == 1
    clock.now += 2  # inside the margin, before expiry: a new token
    second = await tokens.token()
    assert second != first and endpoint.grants == 2
    assert endpoint.valid(second)


async def test_revoked_refresh_token_is_reported_clearly(endpoint: TokenEndpoint) -> None:
    endpoint.revoked = True
    tokens = manager(endpoint, Clock())
    with pytest.raises(PermanentError) as caught:
        await tokens.token()
    assert caught.value.reason == "oauth_revoked"
    assert "revoked" in str(caught.value) and "refresh token" in str(caught.value)
    shown = "".join(traceback.format_exception(caught.value)) + repr(tokens)
    assert not any(secret in shown for secret in SECRETS)


slow = pytest.mark.slow
needs_dovecot = pytest.mark.skipif(dovecot.should_skip(), reason=dovecot.SKIP_REASON)


@pytest.fixture
async def oauth_dovecot(endpoint: TokenEndpoint) -> AsyncIterator[dovecot.Dovecot]:
    server = dovecot.Dovecot(introspection_url=endpoint.introspection_url)
    server.start()
    try:
        yield server
    finally:
        server.close()


def _block(server: dovecot.Dovecot, endpoint: TokenEndpoint, login: str, smtp_port: int
           ) -> dict[str, object]:
    return {
        "address": "claw@example.net", "username": login, "auth": "oauth2",
        "client_id": CLIENT_ID, "token_url": endpoint.token_url,
        "imap_host": "127.0.0.1", "imap_port": server.imap_port, "imap_security": "none",
        "smtp_host": "127.0.0.1", "smtp_port": smtp_port, "smtp_security": "none",
        "trusted_authserv_ids": [AUTHSERV_ID], "backoff_initial": 0.02, "idle_timeout": 5,
    }


ENV = {"EMAIL_OAUTH_CLIENT_SECRET": CLIENT_SECRET, "EMAIL_OAUTH_REFRESH_TOKEN": REFRESH_TOKEN}


@slow
@needs_dovecot
async def test_channel_receives_and_sends_with_xoauth2(
    endpoint: TokenEndpoint, oauth_dovecot: dovecot.Dovecot, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    login, password = oauth_dovecot.claim_user()
    endpoint.username = login
    smtp = SmtpServer({}, token_ok=lambda user, token: user == login and endpoint.valid(token))
    smtp.start()
    admin = await imap_client(oauth_dovecot.imap_port, login, password)
    channel = EmailChannel.from_config("default", _block(oauth_dovecot, endpoint, login,
                                                         smtp.port), ENV)
    sink = RecordingSink()
    channel.bind(MemoryCursorStore())
    try:
        await append(admin, TRIGGER.replace("\n", "\r\n").encode())
        await channel.start(sink)  # IMAP login with XOAUTH2, checked by dovecot
        assert endpoint.introspections and endpoint.valid(endpoint.introspections[0])
        receiver = channel.receiver
        assert receiver is not None
        await asyncio.wait_for(receiver.idling.wait(), WAIT)  # mail from now on is new
        await append(admin, eml("direct_to_bot"))
        [got] = await sink.wait_for(1)
        assert got.message_id == "dm-1@example.org"
        out = Outbound(channel="email", chat_id=got.chat_id, reply_to_id=TRIGGER_ID,
                       text="On it.", reply_id="turn-oauth")
        await channel.send_chunk(out, channel.render(out.text)[0], 0)
        assert smtp.xoauth2_logins == [login]
        assert len(smtp.messages()) == 1
        assert endpoint.grants == 1  # one token served IMAP and SMTP
        [access] = endpoint.issued
        sasl = base64.b64encode(f"user={login}\1auth=Bearer {access}\1\1".encode()).decode()
        assert "AUTHENTICATE" in caplog.text  # aioimaplib logged the command...
        for secret in (*SECRETS, access, sasl):  # ...but no credential
            assert secret not in caplog.text
    finally:
        await channel.stop()
        smtp.stop()
        await admin.logout()


@slow
@needs_dovecot
async def test_start_with_a_revoked_token_fails_clearly(
    endpoint: TokenEndpoint, oauth_dovecot: dovecot.Dovecot
) -> None:
    login, _ = oauth_dovecot.claim_user()
    endpoint.revoked = True
    channel = EmailChannel.from_config("default", _block(oauth_dovecot, endpoint, login, 1), ENV)
    with pytest.raises(PermanentError) as caught:
        await channel.start(RecordingSink())
    assert caught.value.reason == "oauth_revoked"
    shown = "".join(traceback.format_exception(caught.value)) + repr(channel)
    assert not any(secret in shown for secret in SECRETS)
    await channel.stop()
