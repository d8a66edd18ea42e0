"""A human on a real homeserver, played by a real matrix-nio client (optionally with E2E)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nio import (
    AsyncClient,
    AsyncClientConfig,
    JoinedMembersResponse,
    RoomCreateResponse,
    RoomRedactResponse,
    RoomSendResponse,
    SyncResponse,
)

from tests.channels.synapse import Account

#: bound on any wait for the bot (a turn runs through Valkey and a worker process)
WAIT = 90.0


class Human:
    """One logged-in person: creates rooms, invites, writes, and reads the bot's replies
    (decrypted when the room is encrypted)."""

    def __init__(self, homeserver: str, account: Account, store: Path, *, e2e: bool = False):
        store.mkdir(parents=True, exist_ok=True)
        self.account = account
        self.client = AsyncClient(
            homeserver, account.user_id, device_id=account.device_id, store_path=str(store),
            config=AsyncClientConfig(encryption_enabled=e2e, store_sync_tokens=False),
        )  # fmt: skip
        self.client.restore_login(account.user_id, account.device_id, account.access_token)
        #: every m.room.message seen, as (room id, event source), in order
        self.seen: list[tuple[str, dict[str, Any]]] = []
        #: ids of the events in ``seen`` that arrived encrypted and were decrypted
        self.decrypted: set[str] = set()

    async def sync(self, timeout_ms: int = 0) -> None:
        answer = await self.client.sync(timeout=timeout_ms)
        assert isinstance(answer, SyncResponse), answer
        for room_id, info in answer.rooms.join.items():
            for event in info.timeline.events:
                source = getattr(event, "source", {})
                if source.get("type") == "m.room.message":
                    self.seen.append((room_id, source))
                    if getattr(event, "decrypted", False):  # it came as m.room.encrypted
                        self.decrypted.add(str(source.get("event_id")))
        if self.client.olm is not None:
            if self.client.should_upload_keys:
                await self.client.keys_upload()
            if self.client.should_query_keys:
                await self.client.keys_query()
            if self.client.should_claim_keys:
                await self.client.keys_claim(self.client.get_users_for_key_claiming())
            await self.client.send_to_device_messages()

    async def create_room(self, invite: list[str], *, encrypted: bool = False,
                          name: str | None = None) -> str:
        state = [{"type": "m.room.encryption", "state_key": "",
                  "content": {"algorithm": "m.megolm.v1.aes-sha2"}}] if encrypted else []
        answer = await self.client.room_create(name=name, invite=invite, initial_state=state)
        assert isinstance(answer, RoomCreateResponse), answer
        await self.sync()
        return str(answer.room_id)

    async def wait_joined(self, room_id: str, user_id: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while True:
            members = await self.client.joined_members(room_id)
            if isinstance(members, JoinedMembersResponse) and any(
                m.user_id == user_id for m in members.members
            ):
                await self.sync()
                return
            assert loop.time() < deadline, f"{user_id} never joined {room_id}"
            await asyncio.sleep(0.2)

    async def say(self, room_id: str, text: str, *, mention: str | None = None,
                  thread_root: str | None = None) -> str:
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        content["m.mentions"] = {"user_ids": [mention]} if mention else {}
        if thread_root:
            content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread_root,
                                       "is_falling_back": True,
                                       "m.in_reply_to": {"event_id": thread_root}}
        answer = await self.client.room_send(room_id, "m.room.message", content,
                                             ignore_unverified_devices=True)
        assert isinstance(answer, RoomSendResponse), answer
        return str(answer.event_id)

    async def redact(self, room_id: str, event_id: str) -> None:
        """Delete (redact) one of the room's events, as a client's "remove" does."""
        answer = await self.client.room_redact(room_id, event_id)
        assert isinstance(answer, RoomRedactResponse), answer

    def messages_from(self, user_id: str, room_id: str | None = None) -> list[dict[str, Any]]:
        return [s for r, s in self.seen
                if s.get("sender") == user_id and (room_id is None or r == room_id)]

    async def wait_for_messages(self, user_id: str, count: int, room_id: str | None = None
                                ) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while len(self.messages_from(user_id, room_id)) < count:
            assert loop.time() < deadline, (
                f"expected {count} messages from {user_id}, saw "
                f"{self.messages_from(user_id, room_id)}")
            await self.sync(timeout_ms=1000)
        return self.messages_from(user_id, room_id)

    async def close(self) -> None:
        await self.client.close()
