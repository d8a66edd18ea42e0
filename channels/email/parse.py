"""One raw RFC 5322 message to the parts the adapter needs, or ``BadMail``.

Text extraction: the plain part is preferred, HTML is converted to text, and the
quoted history and signature are cut with mail-parser-reply (which knows the "On ...
wrote:" headers of common clients in a dozen languages). Quoted lines ("> ") are never
the sender's words wherever they stand: a trailing block is history and dropped, the
rest (a quote on top, quotes between answers) is kept apart as ``quoted``, which the
adapter passes as quoted data (``Inbound.reply_to_text``). A body longer than
``max_text`` characters is cut before any of this (mail-parser-reply takes tens of
seconds on megabytes) and says so at its end. Attachments are metadata only.
"""

from __future__ import annotations

import email.policy
import re
from dataclasses import dataclass, field
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import getaddresses

from mailparser_reply import EmailMessage as ReplyText

from channels.email.htmltext import html_to_text
from channels.models import Attachment, attachment_type

_MSGID = re.compile(r"<([^<>\s]+)>")
#: mail-parser-reply languages tried for "On ... wrote:" headers and signatures
REPLY_LANGUAGES = ["en", "de", "fr", "es", "it", "nl", "pl", "sv", "da", "cs"]
_AUTO_PRECEDENCE = frozenset({"bulk", "list", "junk", "auto_reply"})


class BadMail(ValueError):
    """A message that cannot be turned into text: malformed MIME, unknown charset,
    too big. It is logged and dead-lettered, never retried forever."""


@dataclass(frozen=True)
class ParsedMail:
    """What the adapter reads from one message (addresses lower-cased)."""

    message_id: str  # without angle brackets
    subject: str
    from_name: str
    from_address: str
    to: list[str]
    cc: list[str]
    in_reply_to: str | None
    references: list[str]
    text: str
    attachments: list[Attachment] = field(default_factory=list)
    #: quoted lines that stood among the sender's own (one "> " level removed)
    quoted: str = ""
    auth_results: list[str] = field(default_factory=list)
    list_id: str | None = None
    automated: bool = False  # Auto-Submitted or Precedence: bulk/list/junk


#: the id a mail without a usable Message-ID goes by: where it is (UIDVALIDITY and
#: UID of the watched folder), which is how a reply finds it again (``outgoing``). It
#: has a space, so no mail's Message-ID (``<...>`` without spaces) can claim it.
_STAND_IN = re.compile(r"^no-message-id uid (\d+)-(\d+)$")


def stand_in_id(uidvalidity: int, uid: int) -> str:
    return f"no-message-id uid {uidvalidity}-{uid}"


def stand_in_uid(message_id: str) -> tuple[int, int] | None:
    """(UIDVALIDITY, UID) of a stand-in id; None for a real Message-ID."""
    found = _STAND_IN.match(message_id)
    return (int(found.group(1)), int(found.group(2))) if found else None


def message_ids(value: str | None) -> list[str]:
    """The ``<id>`` tokens of a Message-ID/In-Reply-To/References value, unbracketed."""
    return _MSGID.findall(value or "")


def named_addresses(msg: Message, *names: str) -> list[tuple[str, str]]:
    """(display name, lower-cased address) of each mail address in the ``names`` headers."""
    values = [str(v) for name in names for v in msg.get_all(name, [])]
    return [(n, a.lower()) for n, a in getaddresses(values) if "@" in a]


def addresses(msg: Message, *names: str) -> list[str]:
    """The mail addresses in the ``names`` headers, lower-cased."""
    return [a for _, a in named_addresses(msg, *names)]


def imap_sections(msg: Message, number: str = "") -> list[tuple[str, Message]]:
    """Every leaf part with its IMAP section number (RFC 3501 6.4.5 FETCH BODY[<section>]):
    a multipart's children are 1, 2, ... (nested: 2.1), a single-part message's body is 1.
    A ``message/rfc822`` part is one leaf (a forwarded mail, fetched whole)."""
    if msg.get_content_maintype() == "multipart" and isinstance(msg.get_payload(), list):
        out: list[tuple[str, Message]] = []
        for index, child in enumerate(msg.get_payload(), 1):
            if isinstance(child, Message):
                out += imap_sections(child, f"{number}.{index}" if number else str(index))
        return out
    return [(number or "1", msg)]


def _attachments(msg: EmailMessage, part_prefix: str) -> list[Attachment]:
    """Each attachment's metadata; its id is ``part_prefix`` + its IMAP section, so the
    adapter fetches it from the server when it is needed (``channels.email.attachments``)."""
    found: list[Attachment] = []
    for section, part in imap_sections(msg):
        disposition = part.get_content_disposition()
        filename = part.get_filename()
        named = disposition == "attachment" or filename is not None
        if not named or (disposition != "attachment" and part.get_content_maintype() == "text"):
            continue  # a body part, not an attachment
        payload = part.get_payload(decode=True)
        mime = part.get_content_type()
        found.append(
            Attachment(
                id=f"{part_prefix}{section}",
                type=attachment_type(mime),
                name=filename,
                size=len(payload) if isinstance(payload, bytes) else None,
                mime=mime,
            )
        )
    return found


def _text_of(part: EmailMessage) -> str:
    try:
        content = part.get_content()
    except LookupError as err:  # an unknown charset name
        raise BadMail(f"unknown charset {part.get_content_charset()!r}") from err
    except (ValueError, AssertionError) as err:
        raise BadMail(f"undecodable {part.get_content_type()} part: {err}") from err
    if not isinstance(content, str):
        raise BadMail(f"{part.get_content_type()} part is not text")
    return content


def _drop_trailing_quote(text: str) -> str:
    """Remove a "> ..." block that ends the text (a reply above a quote, without the
    "On ... wrote:" line that mail-parser-reply keys on). Interleaved quotes stay."""
    lines = text.rstrip().split("\n")
    end = len(lines)
    while end > 0 and (lines[end - 1].startswith(">") or not lines[end - 1].strip()):
        end -= 1
    return "\n".join(lines[:end]).rstrip() if end > 0 else text.strip()


#: an attribution line above a quote ("On Mon, ... Ada wrote:"), in the reply languages
_ATTRIBUTION = re.compile(
    r"(wrote|schrieb|a écrit|escribió|ha scritto|schreef|napisał|skrev|napsal)\s*:\s*$",
    re.IGNORECASE,
)
#: characters of HTML read per character of ``max_text`` (markup is mostly tags)
_HTML_PER_TEXT = 8
#: the default of ``max_text`` (the adapter passes ``EmailSettings.max_text_chars``)
MAX_TEXT = 32_000


def _quote_line(line: str) -> bool:
    return line.lstrip().startswith(">")


def split_quotes(text: str) -> tuple[str, str]:
    """(the sender's own lines, the quoted ones): every "> " line goes to the second,
    one level unquoted, blocks apart by a blank line; an attribution line directly
    above a quote goes with neither."""
    lines = text.split("\n")
    own: list[str] = []
    blocks: list[list[str]] = []
    for i, line in enumerate(lines):
        if _quote_line(line):
            unquoted = line.lstrip()[1:]
            unquoted = unquoted[1:] if unquoted.startswith(" ") else unquoted
            if i > 0 and _quote_line(lines[i - 1]) and blocks:
                blocks[-1].append(unquoted)
            else:
                blocks.append([unquoted])
        elif not (_ATTRIBUTION.search(line) and i + 1 < len(lines)
                  and _quote_line(lines[i + 1])):
            own.append(line)
    mine = re.sub(r"\n{3,}", "\n\n", "\n".join(own)).strip()
    return mine, "\n\n".join("\n".join(b).strip() for b in blocks).strip()


def cut_note(length: int, limit: int) -> str:
    return (f"\n\n[The mail's text was cut here: it has {length:,} characters, of which "
            f"the first {limit:,} are shown.]")


def latest_reply(text: str) -> str:
    """The newest reply in ``text``: quoted history and signature removed."""
    reply = ReplyText(text=text, languages=REPLY_LANGUAGES, keep_hyphen_lists=True).read()
    if reply.replies:
        newest = reply.replies[0]
        for candidate in (newest.body, newest.content):
            if candidate and candidate.strip():
                return _drop_trailing_quote(str(candidate))
    return _drop_trailing_quote(text)


def body_text(msg: EmailMessage, max_text: int = MAX_TEXT) -> tuple[str, str]:
    """(text, quoted): plain part preferred, else HTML as text; quoted history and
    signature cut, other quotes apart (``split_quotes``), at most ``max_text``
    characters of the body read (with a note when it was cut)."""
    for part in msg.walk():
        # a multipart whose boundary is missing or never found is left as one string
        if part.get_content_maintype() == "multipart" and not part.is_multipart():
            defect = type(part.defects[0]).__name__ if part.defects else "no parts"
            raise BadMail(f"malformed MIME ({part.get_content_type()}: {defect})")
    body = msg.get_body(preferencelist=("plain", "html"))
    if not isinstance(body, EmailMessage):
        return "", ""
    text = _text_of(body)
    if body.get_content_subtype() == "html":
        text = html_to_text(text[: max_text * _HTML_PER_TEXT])
    length = len(text)
    mine, quoted = split_quotes(latest_reply(text[:max_text]))
    if length > max_text:
        mine += cut_note(length, max_text)
    return mine, quoted


def parse(raw: bytes, fallback_id: str, max_text: int = MAX_TEXT,
          part_prefix: str = "") -> ParsedMail:
    """Parse one message; ``fallback_id`` names it when it has no Message-ID;
    ``max_text``: characters of its body that are read; ``part_prefix`` starts each
    attachment's id (the receiver's ``<uidvalidity>:<uid>/``)."""
    try:
        msg = BytesParser(policy=email.policy.default).parsebytes(raw)
    except Exception as err:  # the parser is lenient; anything it raises is bad mail
        raise BadMail(f"unparseable message: {type(err).__name__}") from err
    assert isinstance(msg, EmailMessage)
    senders = named_addresses(msg, "From")
    if not senders:
        raise BadMail("no sender address in From")
    from_name, from_address = senders[0]
    ids = message_ids(str(msg.get("Message-ID", "")))
    message_id = ids[0] if ids else fallback_id
    in_reply_to = message_ids(str(msg.get("In-Reply-To", "")))
    auto = str(msg.get("Auto-Submitted", "no")).strip().lower()
    precedence = str(msg.get("Precedence", "")).strip().lower()
    text, quoted = body_text(msg, max_text)
    return ParsedMail(
        message_id=message_id,
        subject=str(msg.get("Subject", "")).strip(),
        from_name=from_name,
        from_address=from_address,
        to=addresses(msg, "To"),
        cc=addresses(msg, "Cc"),
        in_reply_to=in_reply_to[0] if in_reply_to else None,
        references=message_ids(str(msg.get("References", ""))),
        text=text,
        quoted=quoted,
        attachments=_attachments(msg, part_prefix),
        auth_results=[str(v) for v in msg.get_all("Authentication-Results", [])],
        list_id=str(msg["List-Id"]) if msg.get("List-Id") else None,
        automated=(auto not in ("", "no")) or precedence in _AUTO_PRECEDENCE,
    )
