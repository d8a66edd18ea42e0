"""A parsed mail to an ``Inbound`` (or a deliberate drop, with its reason).

* A conversation is a mail thread: ``chat_id`` is Gmail's X-GM-THRID when the server
  offers it, else a hash of the thread's root Message-ID (the first of References,
  else In-Reply-To, else the message's own), so it is stable for every mail in it.
* The correspondents are From, To and Cc minus the bot's own addresses: one is a DM,
  several a group.
* Engage: mail addressed To the bot mentions it; Cc-only is context unless
  ``engage_cc``. Auto-replies (Auto-Submitted, Precedence: bulk/list/junk), mailing
  lists (List-Id) and the bot's own mail are dropped: answering them loops or spams.
* Trust: the sender's address is used (as ``sender_id``, the person key that
  allowlists, operator roles and personal memory use) only when the receiving server
  authenticated it (``authresults``). An unauthenticated mail is reported as such
  (``authenticated=False``, ``sender_id`` ``unverified:<address>``, which matches no
  allowlist, pairing or admin entry; the gateway decides what it may do). Its
  conversation is nobody's DM (``is_group``: its words carry member trust at most, never
  the DM owner's or an operator's), and its References are the sender's own words, so
  they never file it into an existing thread: its ``chat_id`` is keyed by the claimed
  From as well as the root, in a namespace of its own. A mailbox with ``allow_from``
  drops such mail.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from channels.email.authresults import Verdict
from channels.email.parse import ParsedMail
from channels.email.settings import EmailSettings
from channels.models import Inbound, trim_raw

_SUBJECT_PREFIX = re.compile(r"^\s*((re|fwd?|aw|wg|sv|tr)\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)
UNVERIFIED = "unverified:"
_UNVERIFIED_THREAD = "u-"


@dataclass(frozen=True)
class Dropped:
    """A mail the adapter deliberately does not pass on; ``reason`` is logged."""

    reason: str


def thread_key(
    mail: ParsedMail, gm_thread_id: str | None = None, *, verified: bool = True
) -> str:
    """The conversation's ``chat_id``: stable for every mail of one thread.

    Unverified mail gets ``u-<hash of From and root>``: a forger who cites the root of
    someone's thread (or Gmail threads it there) lands in a conversation of its own,
    never in the thread's memory or context."""
    root = mail.references[0] if mail.references else (mail.in_reply_to or mail.message_id)
    if not verified:
        digest = hashlib.sha256(f"{mail.from_address}\0{root}".encode()).hexdigest()[:20]
        return _UNVERIFIED_THREAD + digest
    if gm_thread_id:
        return f"gm-{gm_thread_id}"
    return "t-" + hashlib.sha256(root.encode()).hexdigest()[:20]


def unverified_thread(chat_id: str) -> bool:
    """Whether ``chat_id`` is the conversation of an unauthenticated mail."""
    return chat_id.startswith(_UNVERIFIED_THREAD)


def bare_subject(subject: str) -> str:
    """The subject without its "Re:"/"Fwd:" prefixes."""
    return _SUBJECT_PREFIX.sub("", subject).strip()


def allowed_sender(address: str, allow: list[str]) -> bool:
    """Whether ``address`` matches an ``allow_from`` entry (an address or a domain)."""
    domain = address.rpartition("@")[2]
    for entry in allow:
        entry = entry.lstrip("@")
        if address == entry or domain == entry or domain.endswith("." + entry):
            return True
    return False


def correspondents(mail: ParsedMail, own: frozenset[str]) -> list[str]:
    """From, To and Cc, in that order, without duplicates or the bot's addresses."""
    return list(dict.fromkeys(a for a in [mail.from_address, *mail.to, *mail.cc]
                              if a not in own))


def normalize(
    mail: ParsedMail,
    verdict: Verdict,
    settings: EmailSettings,
    *,
    account: str,
    gm_thread_id: str | None = None,
    uid: int | None = None,
) -> Inbound | Dropped:
    own = settings.own_addresses
    if mail.from_address in own:
        return Dropped("the bot's own message")
    if mail.automated:
        return Dropped("automatic mail (Auto-Submitted or Precedence: bulk/list/junk)")
    if mail.list_id:
        return Dropped(f"mailing-list traffic (List-Id {mail.list_id})")
    if settings.allow_from:
        if not verdict.verified:
            return Dropped(f"unauthenticated sender on an allow_from mailbox ({verdict.reason})")
        if not allowed_sender(mail.from_address, settings.allow_from):
            return Dropped("sender not in allow_from")
    verified = verdict.verified
    people = correspondents(mail, own)
    to_bot = any(a in own for a in mail.to)
    cc_bot = any(a in own for a in mail.cc)
    sender = mail.from_address if verified else UNVERIFIED + mail.from_address
    raw = {
        "uid": uid,
        "subject": mail.subject,
        "from": mail.from_address,
        "to": mail.to,
        "cc": mail.cc,
        "authentication": verdict.reason,
    }
    return Inbound(
        channel="email",
        account=account,
        chat_id=thread_key(mail, gm_thread_id, verified=verified),
        chat_name=bare_subject(mail.subject) or None,
        is_group=len(people) > 1 or not verified,
        sender_id=sender,
        sender_name=mail.from_name or mail.from_address,
        # every mail is where its answers thread: an answer without ``reply_to_id``
        # (the gateway's command and pairing answers) finds the mail by this
        thread_id=mail.message_id,
        message_id=mail.message_id,
        text=mail.text or mail.subject,
        reply_to_id=mail.in_reply_to,
        # quotes among the sender's lines are someone else's words: quoted data
        reply_to_text=mail.quoted or None,
        mentions_bot=to_bot or (settings.engage_cc and cc_bot),
        is_admin=False,  # mail has no chat admins; operators come from [policy] admins
        authenticated=verified,
        attachments=mail.attachments,
        raw=trim_raw(raw),
    )
