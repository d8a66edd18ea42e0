"""What happens to a message before it may reach the model: the DM pairing gate and
chat commands. Both are answered here, through the outbox stream every reply takes,
and never become mailbox entries, so the model never sees them.

``triage`` returns either the ``Route`` for the inbox to carry out, or the outcome it
already handled: ``"command"`` (answered), ``"pairing"`` (a stranger's DM under
``[policy] dm = "pairing"``: answered with a pairing code, or with nothing once denied)
or ``"duplicate"``. A stranger the platform does not authenticate (``Inbound.
authenticated`` false: mail that failed DMARC) gets no code: its address is a claim,
and a code sent there would go to whoever it names. It is dropped (logged).

Exactly once: the dedupe key is checked first and set only after the answer is in the
outbox. A redelivery in between publishes the answer again under the same ``reply_id``
(derived from the message's dedupe id), and the outbox's per-chunk ``sent`` keys make
the second copy a no-op.
"""

from __future__ import annotations

import hashlib

import redis
import redis.asyncio as aioredis

import gateway.intake._commands as commands
from channels.models import Inbound, Outbound
from gateway.config import Settings
from gateway.intake._approvals import ApprovalDesk
from gateway.intake._identity import IdentityStore
from gateway.intake._memorydesk import MemoryDesk
from gateway.intake._pairing import CODE_TTL, PairingStore
from gateway.intake._router import Disposition, Route, Router
from gateway.queue import Budget, Keys, events


def pairing_text(code: str, ttl: int = CODE_TTL) -> str:
    return (f"I only talk with people my operator has approved. Your pairing code is "
            f"{code} (valid {max(1, ttl // 60)} minutes): send it to the operator, who "
            f"approves it with: pynanoclaw pair approve {code}")


#: Channels whose DMs skip the pairing gate: the local console is reachable only by
#: someone who can write to the bot's Redis, i.e. the operator.
UNGATED_CHANNELS = frozenset({"local"})


class FrontDesk:
    """The pairing gate and the command layer, in front of the router's mailbox path."""

    def __init__(self, config: Settings, client: aioredis.Redis, sync: redis.Redis,
                 keys: Keys, router: Router, memory: MemoryDesk | None = None,
                 approvals: ApprovalDesk | None = None) -> None:
        self._cfg = config
        #: ``/memory`` and ``/forget`` (None: they answer that memory is not reachable)
        self.memory = memory
        self._r = client
        self._keys = keys
        self._router = router
        self.pairing = PairingStore(client, keys.prefix)
        #: the command handlers' blocking stores (they run in a thread)
        self.identities = IdentityStore(config, sync, keys)
        #: ``/usage``: spend and caps
        self.usage = Budget(sync, keys)
        #: ``/approve`` and ``/deny`` (None: they answer that approvals are unreachable)
        self.approvals = approvals
        self.ungated = UNGATED_CHANNELS

    async def triage(self, msg: Inbound) -> Route | str:
        """The route for ``msg``, or the outcome when it was handled here (the inbox
        returns it to the adapter: the local channel tells its client)."""
        router = self._router
        paired = False
        if self._cfg.policy.dm == "pairing" and not msg.is_group and not router.allowed(msg):
            # the router alone would drop an ungated channel's DM: treat it as paired
            paired = msg.channel in self.ungated or \
                await self.pairing.is_approved(msg.sender_key)
            if msg.kind != "message":  # a stranger's edit gets no pairing code
                return router.route(msg, paired)
            if not msg.authenticated:
                return Route(msg.group, Disposition.DROP,
                             "unauthenticated sender: no pairing code")
            if not paired:
                return await self._pair(msg)
        if msg.kind != "message":
            return router.route(msg, paired)
        route = router.route(msg, paired)
        if route.disposition is Disposition.DROP:
            return route
        if commands.parse_command(msg) is None:
            return route
        reply = await commands.answer(msg, self._cfg, self.identities, self.memory,
                                      self.usage, self.approvals)
        if reply is None:
            return route
        return await self._answer(msg, reply, "command")

    async def _pair(self, msg: Inbound) -> str:
        code = await self.pairing.request(msg)
        # Recently denied: no answer at all (the "done" still tells a local client).
        text = pairing_text(code) if code is not None else None
        return await self._answer(msg, text, "pairing")

    async def _answer(self, msg: Inbound, text: str | None, outcome: str) -> str:
        dedupe = self._keys.dedupe(msg.dedupe_id)
        if await self._r.exists(dedupe):
            return "duplicate"
        reply_id = "fd-" + hashlib.sha256(msg.dedupe_id.encode()).hexdigest()[:32]
        done = events.done(msg, [msg.message_id], reply_id if text is not None else None)
        async with self._r.pipeline(transaction=True) as pipe:
            if text is not None:
                # Not a quote of the message: a slash command has no message to quote.
                out = Outbound(channel=msg.channel, account=msg.account, chat_id=msg.chat_id,
                               thread_id=msg.thread_id, text=text, reply_id=reply_id)
                pipe.xadd(self._keys.outbox, events.reply(out).fields())  # type: ignore[arg-type]
            pipe.xadd(self._keys.outbox, done.fields())  # type: ignore[arg-type]
            await pipe.execute()
        await self._r.set(dedupe, "1", ex=self._cfg.queue.dedupe_ttl)
        return outcome
