"""A local SMTP submission server (aiosmtpd) for the email adapter's tests.

Two roles, one class:

* the kit's fake: records every submitted mail and answers the next one with a
  chosen SMTP error (``fail_next``), as Gmail's submission server would;
* the e2e relay: plays the receiving provider. It stamps an ``Authentication-Results``
  header (authserv-id ``AUTHSERV_ID``) the way a real MX does after checking DKIM and
  DMARC, then delivers to dovecot over LMTP. "DMARC passes" here when the From domain
  is the domain of the account that authenticated the submission: what a provider's
  DKIM signing plus the receiver's DMARC check amount to. A forger who logs in as
  mallory@evil.test and writes ``From: ada@example.org`` gets ``dmarc=fail``.

AUTH (PLAIN/LOGIN against ``users``, XOAUTH2 against ``token_ok``) is required, over
plain TCP on loopback (``auth_require_tls=False``).

Two ambiguous endings of a submission (issue 30), each for the next DATA: ``drop_next``
accepts the mail (recorded, delivered from a queue a moment later, as an MTA does) and
closes the connection before its 250; ``answer_late`` accepts and delivers it, then
answers only after a delay (past the client's read timeout).
"""

from __future__ import annotations

import asyncio
import base64
import smtplib
import threading
from collections.abc import Callable
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.fakes.dovecot import free_port

AUTHSERV_ID = "mx.pnc.test"


class _Handler:
    def __init__(self, owner: SmtpServer) -> None:
        self.owner = owner

    async def auth_XOAUTH2(self, server: SMTP, args: list[str]) -> AuthResult:
        """RFC-less but documented by Google: base64("user=U\\1auth=Bearer T\\1\\1")."""
        if len(args) < 2:
            return AuthResult(success=False)
        try:
            fields = base64.b64decode(args[1]).decode().split("\x01")
        except (ValueError, UnicodeDecodeError):
            return AuthResult(success=False)
        user = next((f[5:] for f in fields if f.startswith("user=")), "")
        token = next((f[12:] for f in fields if f.startswith("auth=Bearer ")), "")
        check = self.owner.token_ok
        if check is not None and check(user, token):
            self.owner.xoauth2_logins.append(user)
            return AuthResult(success=True, auth_data=LoginPassword(user.encode(), b""))
        return AuthResult(success=False, handled=False)

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if not session.authenticated:
            return "530 5.7.0 Authentication required"
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with self.owner.lock:
            failure, self.owner.next_failure = self.owner.next_failure, None
            ending, self.owner.next_ending = self.owner.next_ending, None
        if failure is not None:
            return failure
        raw = envelope.original_content or b""
        login = session.auth_data.login.decode() if session.auth_data else None
        if self.owner.lmtp_port is not None:
            raw = self.owner.stamp(raw, login)
            args = (envelope.mail_from, list(envelope.rcpt_tos), raw)
            if ending is not None and ending[0] == "drop":
                self.owner.deliver_later(ending[1], *args)
            else:
                await asyncio.get_running_loop().run_in_executor(
                    None, self.owner.deliver, *args
                )
        with self.owner.lock:
            self.owner.received.append((raw, list(envelope.rcpt_tos), login))
        if ending is not None and ending[0] == "drop":
            server.transport.close()  # accepted, but the client never hears the 250
        elif ending is not None:
            await asyncio.sleep(ending[1])
        return "250 2.0.0 OK queued"


class SmtpServer:
    """``start()``/``stop()`` an aiosmtpd controller on 127.0.0.1 (its own thread)."""

    def __init__(
        self,
        users: dict[str, str],
        *,
        lmtp_port: int | None = None,
        token_ok: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.users = users
        self.lmtp_port = lmtp_port
        self.token_ok = token_ok
        self.port = free_port()
        self.lock = threading.Lock()
        self.received: list[tuple[bytes, list[str], str | None]] = []
        self.next_failure: str | None = None
        #: ("drop", delivery delay) or ("late", answer delay) for the next DATA
        self.next_ending: tuple[str, float] | None = None
        self._timers: list[threading.Timer] = []
        self.xoauth2_logins: list[str] = []
        self._controller = Controller(
            _Handler(self),
            hostname="127.0.0.1",
            port=self.port,
            authenticator=self._authenticate,
            auth_require_tls=False,  # loopback only, no certificates
            # AUTH is required by handle_MAIL below: aiosmtpd's own auth_required warns
            # on every connection when TLS is not required as well
        )

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        if isinstance(data, LoginPassword):
            user, password = data.login.decode(), data.password.decode()
            if self.users.get(user) == password:
                return AuthResult(success=True, auth_data=data)
        return AuthResult(success=False, handled=False)

    def start(self) -> SmtpServer:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()
        for timer in self._timers:
            timer.cancel()
            timer.join()

    def fail_next(self, reply: str) -> None:
        """Answer the next DATA with ``reply`` (e.g. "421 4.7.0 try again in 7 seconds")."""
        with self.lock:
            self.next_failure = reply

    def drop_next(self, deliver_after: float) -> None:
        """Accept the next DATA, close the connection before the 250, and deliver the
        mail ``deliver_after`` seconds later (from the queue, as an MTA does)."""
        with self.lock:
            self.next_ending = ("drop", deliver_after)

    def answer_late(self, delay: float) -> None:
        """Accept and deliver the next DATA, and answer it only after ``delay`` s."""
        with self.lock:
            self.next_ending = ("late", delay)

    def deliver_later(self, delay: float, sender: str, recipients: list[str],
                      raw: bytes) -> None:
        timer = threading.Timer(delay, self.deliver, (sender, recipients, raw))
        self._timers.append(timer)
        timer.start()

    def messages(self) -> list[EmailMessage]:
        with self.lock:
            raws = [raw for raw, _, _ in self.received]
        parsed = [message_from_bytes(raw, policy=policy.default) for raw in raws]
        return [m for m in parsed if isinstance(m, EmailMessage)]

    def stamp(self, raw: bytes, login: str | None) -> bytes:
        """Prepend this server's Authentication-Results verdict to ``raw``."""
        msg = message_from_bytes(raw, policy=policy.default)
        from_domain = str(msg.get("From", "")).rpartition("@")[2].strip(" >").lower()
        if login is None:
            result = f"dmarc=none header.from={from_domain}"
        elif login.rpartition("@")[2].lower() == from_domain:
            result = f"dkim=pass header.d={from_domain}; dmarc=pass header.from={from_domain}"
        else:
            signer = login.rpartition("@")[2].lower()
            result = f"dkim=pass header.d={signer}; dmarc=fail header.from={from_domain}"
        header = f"Authentication-Results: {AUTHSERV_ID};\r\n {result}\r\n".encode()
        return header + raw

    def deliver(self, sender: str, recipients: list[str], raw: bytes) -> list[str]:
        """LMTP to dovecot; returns the recipients it took. An address dovecot does not
        host (``mallory@evil.test``) is refused at RCPT: a real relay would send it on
        to that domain's server, so it is recorded in ``received`` and skipped here.

        LMTP answers DATA once per accepted recipient (RFC 2033 section 4.2), which
        ``smtplib.LMTP.sendmail`` does not read (it reads one answer, as SMTP has), so
        its QUIT then reads the second answer and fails: the transaction is spoken
        here step by step."""
        assert self.lmtp_port is not None
        with smtplib.LMTP("127.0.0.1", self.lmtp_port) as lmtp:
            lmtp.ehlo_or_helo_if_needed()
            code, answer = lmtp.mail(sender)
            if code != 250:
                raise smtplib.SMTPSenderRefused(code, answer, sender)
            taken = [r for r in recipients if lmtp.rcpt(r)[0] in (250, 251)]
            if not taken:
                lmtp.rset()
                return []
            code, answer = lmtp.data(raw)  # the first recipient's answer
            answers = [(code, answer)] + [lmtp.getreply() for _ in taken[1:]]
            failed = [(r, a) for r, a in zip(taken, answers, strict=True) if a[0] != 250]
            if failed:
                raise smtplib.SMTPDataError(failed[0][1][0], failed[0][1][1])
            return taken
