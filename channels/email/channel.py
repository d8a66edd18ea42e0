"""``EmailChannel``: one mailbox. IMAP (IDLE or polling) in, SMTP (aiosmtplib) out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from channels.base import (
    NO_CONTEXT,
    Channel,
    ChannelContext,
    ChannelLimits,
    Chunk,
    InboundSink,
)
from channels.email.attachments import fetch as fetch_email_attachment
from channels.email.imap import ImapSession
from channels.email.oauth import TokenManager
from channels.email.outgoing import Outgoing
from channels.email.receiver import Receiver
from channels.email.redact import protect
from channels.email.render import EMAIL_TEXT_LIMIT, render_chunks
from channels.email.settings import EmailSettings
from channels.envsecret import read_secret
from channels.models import Attachment, Outbound
from channels.tasks import cancel_task, start_task

if TYPE_CHECKING:
    from typing import Self

log = logging.getLogger(__name__)

#: One mail per second per thread is plenty for a conversation and stays far below
#: Gmail's sending limits (about 2,000 messages a day for Workspace, 500 for
#: consumer accounts: https://support.google.com/a/answer/166852).
EMAIL_LIMITS = ChannelLimits(max_message_len=EMAIL_TEXT_LIMIT, per_chat_interval=1.0, burst=1)


class EmailChannel(Channel):
    """A mailbox as a channel: each mail thread is a conversation."""

    name = "email"
    limits = EMAIL_LIMITS

    def __init__(
        self,
        settings: EmailSettings,
        *,
        password: SecretStr | None = None,
        oauth: TokenManager | None = None,
        account: str = "default",
    ) -> None:
        if (password is None) == (oauth is None):
            raise ValueError("email: give exactly one of password or oauth")
        self.settings = settings
        self.account = account
        self._password = password
        self._token = oauth.token if oauth is not None else None
        protect(*([password.get_secret_value()] if password is not None else []))
        self._outgoing = Outgoing(settings, self._session, password=password, token=self._token)
        self.receiver: Receiver | None = None
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"EmailChannel(account={self.account!r}, address={self.settings.address!r})"

    @classmethod
    def from_config(cls, account: str, block: dict[str, Any], env: Mapping[str, str],
                    context: ChannelContext = NO_CONTEXT) -> Self:
        settings = EmailSettings.model_validate(block)
        if settings.auth == "oauth2":
            secret = env.get(settings.client_secret_env, "").strip()
            refresh = env.get(settings.refresh_token_env, "").strip()
            missing = [n for n, v in ((settings.client_secret_env, secret),
                                      (settings.refresh_token_env, refresh)) if not v]
            if missing:
                raise ValueError(
                    f"channels.email: auth = 'oauth2' needs the environment variable(s) "
                    f"{', '.join(missing)} (the OAuth client secret and the refresh token "
                    "from the consent step)"
                )
            assert settings.client_id is not None  # the settings validator checked it
            oauth = TokenManager(
                settings.token_url, settings.client_id, SecretStr(secret), SecretStr(refresh),
                margin=settings.refresh_margin, timeout=settings.timeout,
            )
            return cls(settings, oauth=oauth, account=account)
        password = read_secret(env, settings.password_env, "the mailbox password (Gmail: an "
                               "app password), or set auth = 'oauth2'")
        return cls(settings, password=password, account=account)

    def _session(self) -> ImapSession:
        password = self._password.get_secret_value() if self._password is not None else None
        return ImapSession(self.settings, password=password, token=self._token)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The part of the mail on the IMAP server, over a connection of its own."""
        return await fetch_email_attachment(self._session, self.settings.folder, attachment,
                                            max_bytes)

    async def start(self, sink: InboundSink) -> None:
        """Log in (a refused login or revoked token raises ``PermanentError`` here),
        then receive in the background."""
        first = self._session()
        await first.connect()
        self.receiver = Receiver(self.settings, self._session, sink, self.cursor_store,
                                 self.account)
        self._task = start_task(self.receiver.run(first), name=f"email-{self.account}",
                                log=log, what="email: receive loop")

    async def stop(self) -> None:
        await cancel_task(self._task)
        self._task = None
        await self._outgoing.close()

    def health(self) -> dict[str, Any]:
        """The mails skipped for good (too big, unreadable): how many, and the last."""
        skipped = self.receiver.skipped if self.receiver is not None else []
        if not skipped:
            return {"skipped": 0}
        last = skipped[-1]
        return {"skipped": len(skipped),
                "last_skipped": f"uid {last.get('uid')} in {last.get('folder')}: "
                                f"{last.get('reason')} ({last.get('at')})"}

    def render(self, text: str) -> list[Chunk]:
        return render_chunks(text, self.limits.max_message_len)

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        """Send one chunk as its own mail in the thread (reply-all to ``reply_to_id``);
        returns its Message-ID. A chunk whose copy is in the folder or Sent already is
        not sent again."""
        return await self._outgoing.send(message, chunk, index)

    async def send_file(self, message: Outbound, data: bytes, name: str, caption: str = ""
                        ) -> str:
        """One mail in the thread (a reply like a chunk's: reply-all, In-Reply-To and
        References) with the file attached and the caption as its text; returns its
        Message-ID. The Message-ID of (reply id, 0) and the own copy make a re-send
        after a lost answer find the first mail instead of going again (``outgoing``)."""
        chunks = self.render(caption)
        # the text find_sent compares a copy with is the caption's first chunk
        chunk = chunks[0] if chunks else Chunk(text=name, plain=name, formatted=False)
        return await self._outgoing.send(message, chunk, 0, attachment=(data, name))

    async def find_sent(self, message: Outbound, index: int) -> str | None:
        """After an ambiguous SMTP failure: the chunk's Message-ID once its own copy
        (Gmail: its Sent copy) turns up within ``sent_wait`` seconds (``outgoing``)."""
        chunks = self.render(message.text)  # pure: the chunks that were sent
        if index >= len(chunks):
            return None
        return await self._outgoing.find_sent(message, chunks[index], index)
