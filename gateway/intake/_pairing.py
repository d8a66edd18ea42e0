"""DM pairing (``[policy] dm = "pairing"``): strangers get a code, the operator decides.

State machine of one person (``<channel>:<user id>``), all in Redis, so it survives a
gateway restart exactly as Redis persists (AOF in the shipped config)::

    unknown --first DM--> pending (code issued, replied once) --approve CODE--> approved
                            |  \\--deny CODE--> denied (no new code for DENY_TTL) --> unknown
                            \\--CODE_TTL passes--> unknown (the next DM issues a new code)

Keys (this module is their only home, under the queue's prefix):

* ``pair:code:<CODE>``  hash of the request (user, name, channel, account, chat), TTL
* ``pair:user:<user>``  the user's pending code, same TTL (one code per person at a time)
* ``pair:denied:<user>`` a denial, ``DENY_TTL``
* ``pair:approved``     hash user -> JSON (name, code, when): the allowlist, no TTL

Codes are 8 characters of an alphabet without look-alikes (no 0/O, 1/I/L), from
``secrets``: 30^8 ~ 6.6e11 values, so guessing a live code by DMing is hopeless, and a
guess would only approve the guesser's own request anyway: the operator types the code.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.typing import EncodableT, FieldT

from channels.models import Inbound
from gateway.queue import as_str

ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH = 8
#: how long a code stays valid (one hour: long enough to reach the operator)
CODE_TTL = 3600
#: after a denial, the person gets no new code for this long (no code spam to the operator)
DENY_TTL = 24 * 3600


@dataclass(frozen=True)
class PairRequest:
    code: str
    user: str  # "<channel>:<user id>"
    name: str
    channel: str
    account: str
    chat_id: str
    created: float


def normalize_code(code: str) -> str:
    return code.strip().upper().replace("-", "").replace(" ", "")


class PairingStore:
    """Pairing codes and the approved allowlist in Redis."""

    def __init__(self, client: aioredis.Redis, prefix: str = "pnc:",
                 code_ttl: int = CODE_TTL) -> None:
        self._r = client
        self._p = f"{prefix}pair:"
        self._code_ttl = code_ttl

    def _code(self, code: str) -> str:
        return f"{self._p}code:{code}"

    def _user(self, user: str) -> str:
        return f"{self._p}user:{user}"

    def _denied(self, user: str) -> str:
        return f"{self._p}denied:{user}"

    @property
    def _approved(self) -> str:
        return f"{self._p}approved"

    async def is_approved(self, user: str) -> bool:
        return bool(await self._r.hexists(self._approved, user))

    async def request(self, msg: Inbound) -> str | None:
        """The sender's pairing code: their live one, or a new one. None when they were
        denied recently (the caller then answers nothing)."""
        user = msg.sender_key
        if await self._r.exists(self._denied(user)):
            return None
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
        # NX: of two DMs racing, one issues the code, the other gets the same one.
        if not await self._r.set(self._user(user), code, nx=True, ex=self._code_ttl):
            live = await self._r.get(self._user(user))
            if live is not None:
                return as_str(live)
            return await self.request(msg)  # it expired in between: issue a new one
        fields: dict[FieldT, EncodableT] = {
            "user": user, "name": msg.sender_name, "channel": msg.channel,
            "account": msg.account, "chat_id": msg.chat_id, "created": str(time.time()),
        }
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.hset(self._code(code), mapping=fields)
            pipe.expire(self._code(code), self._code_ttl)
            await pipe.execute()
        return code

    async def get(self, code: str) -> PairRequest | None:
        code = normalize_code(code)
        raw = await self._r.hgetall(self._code(code))
        if not raw:
            return None
        f = {as_str(k): as_str(v) for k, v in raw.items()}
        return PairRequest(code, f["user"], f["name"], f["channel"], f["account"],
                           f["chat_id"], float(f["created"]))

    async def pending(self) -> list[PairRequest]:
        found: list[PairRequest] = []
        async for key in self._r.scan_iter(match=self._code("*"), count=200):
            request = await self.get(as_str(key).rsplit(":", 1)[-1])
            if request is not None:
                found.append(request)
        return sorted(found, key=lambda r: r.created)

    async def approve(self, code: str) -> PairRequest | None:
        """Approve a live code; None (and nothing changes) for a wrong or expired one."""
        request = await self.get(code)
        if request is None:
            return None
        entry = json.dumps({"name": request.name, "code": request.code, "at": time.time()})
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.hset(self._approved, request.user, entry)
            pipe.delete(self._code(request.code), self._user(request.user))
            await pipe.execute()
        return request

    async def deny(self, code: str) -> PairRequest | None:
        request = await self.get(code)
        if request is None:
            return None
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.set(self._denied(request.user), "1", ex=DENY_TTL)
            pipe.delete(self._code(request.code), self._user(request.user))
            await pipe.execute()
        return request

    async def approved(self) -> dict[str, str]:
        """The allowlist: user -> name."""
        raw = await self._r.hgetall(self._approved)
        return {as_str(k): json.loads(as_str(v)).get("name", "") for k, v in raw.items()}
