"""A reply mail: thread headers, reply-all recipients, text + HTML alternatives.

The Message-ID is derived from the reply id and chunk index, so a retried send
produces the very same Message-ID, and the bot's own copy of it (in the watched folder
or Sent) reveals that the mail went out before a crash or a dropped connection (see
``outgoing``). The envelope adds the bot's own address to the recipients for that copy;
the headers never name it.
"""

from __future__ import annotations

import hashlib
import re
from email.message import EmailMessage, Message
from email.utils import formataddr, formatdate

from channels.base import Chunk
from channels.email.normalize import bare_subject
from channels.email.parse import addresses, message_ids
from channels.email.settings import EmailSettings
from channels.outfiles import mime_of

#: References grows with every mail; keep the root and the newest ones (RFC 5322
#: section 3.6.4 allows trimming, and some servers refuse very long headers)
MAX_REFERENCES = 20


def reply_message_id(reply_id: str, index: int, address: str) -> str:
    """``<hash>@<bot domain>`` for chunk ``index`` of reply ``reply_id`` (no brackets)."""
    digest = hashlib.sha256(f"{reply_id}\x00{index}".encode()).hexdigest()[:32]
    return f"pnc.{digest}@{address.rpartition('@')[2]}"


_REPLY_ID = re.compile(r"pnc\.[0-9a-f]{32}@(.+)")


def is_reply_message_id(message_id: str, address: str) -> bool:
    """Whether ``message_id`` has the form ``reply_message_id`` gives the bot's replies."""
    found = _REPLY_ID.fullmatch(message_id)
    return found is not None and found.group(1) == address.rpartition("@")[2]


def envelope(mail: EmailMessage, settings: EmailSettings, *, self_copy: bool) -> list[str]:
    """The SMTP recipients of ``mail``: its To and Cc, plus the bot's own address when
    ``self_copy``. The server accepts a transaction's message for all its accepted
    recipients at once (one answer to the DATA, RFC 5321 section 4.1.1.4), so the copy
    that reaches the bot's mailbox proves the others' was accepted too. Empty when the
    mail has no recipient but the bot."""
    others = addresses(mail, "To", "Cc")
    if not others:
        return []
    return [*others, settings.address] if self_copy else others


def recipients(
    original: Message, own: frozenset[str], verified: bool = True
) -> tuple[list[str], list[str]]:
    """Reply-all: (To, Cc). To is Reply-To or From; Cc the other correspondents.

    An unverified original is answered to its From alone: its Reply-To, To and Cc
    are the sender's claims (a forger Cc'ing itself on someone else's name), and the
    From is the one address the answer may go to without leaking to the forger."""
    if not verified:
        return [a for a in addresses(original, "From") if a not in own][:1], []
    to = [a for a in addresses(original, "Reply-To") or addresses(original, "From")
          if a not in own]
    if not to:  # the bot wrote the original itself: answer its recipients
        to = [a for a in addresses(original, "To") if a not in own]
    cc = dict.fromkeys(a for a in addresses(original, "To", "Cc") if a not in own and a not in to)
    return to, list(cc)


def compose(
    original: Message, settings: EmailSettings, chunk: Chunk, message_id: str,
    *, verified: bool = True, attachment: tuple[bytes, str] | None = None,
) -> EmailMessage:
    """The reply to ``original`` (its headers suffice) carrying ``chunk``;
    ``verified``: whether the receiving server authenticated the original's From;
    ``attachment``: a file (bytes, name) attached, typed by its name."""
    to, cc = recipients(original, settings.own_addresses, verified)
    original_id = message_ids(str(original.get("Message-ID", "")))
    references = message_ids(str(original.get("References", ""))) + original_id
    if len(references) > MAX_REFERENCES:
        references = references[:1] + references[-(MAX_REFERENCES - 1) :]
    mail = EmailMessage()
    mail["From"] = formataddr((settings.display_name, settings.address))
    mail["To"] = ", ".join(to)
    if cc:
        mail["Cc"] = ", ".join(cc)
    mail["Subject"] = "Re: " + (bare_subject(str(original.get("Subject", ""))) or "(no subject)")
    mail["Date"] = formatdate(usegmt=True)
    mail["Message-ID"] = f"<{message_id}>"
    if original_id:
        mail["In-Reply-To"] = f"<{original_id[0]}>"
    if references:
        mail["References"] = " ".join(f"<{r}>" for r in references)
    # RFC 3834: a machine's answer, so other responders do not answer it in turn
    mail["Auto-Submitted"] = "auto-replied"
    mail.set_content(chunk.plain)
    if chunk.formatted:
        mail.add_alternative(chunk.text, subtype="html")
    if attachment is not None:
        data, name = attachment
        maintype, _, subtype = mime_of(name).partition("/")
        mail.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return mail
