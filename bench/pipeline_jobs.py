"""Pieces the pipeline benchmark runs inside worker processes (importable by RQ).

``model``: the instant scripted model (answers "ok" at once, as an async function).
``plain_turn``: the naive design's job, one per message, no mailbox, no lock, no batching.
``instant_turn``: the work of one turn without any queue (what the baselines do per
message).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import redis
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from rq import get_current_job

from channels.models import Inbound, Outbound
from workers.agent import TurnRequest, build_agent
from workers.context import WorkerContext, current
from workers.turn import Batch, episode_text, turn_id_for


async def _instant(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    # async, like a real provider's client: pydantic-ai runs a sync model function in a
    # worker thread, a hop (~1 ms on a busy machine) no real model pays
    return ModelResponse(parts=[TextPart("ok")])


model = FunctionModel(_instant, model_name="instant")


async def instant_turn(ctx: WorkerContext, msgs: list[Inbound],
                       publish: Callable[[str], Awaitable[None]]) -> None:
    """A turn minus the queue, in the drain job's order: core memory, agent with the
    instant model, ``publish(reply)``, then the episode write."""
    group = msgs[0].group
    turn_id = turn_id_for(group, [m.dedupe_id for m in msgs])
    gd, memory = ctx.group_memory(group)
    reply = await build_agent(ctx.settings).run(TurnRequest(
        group=group, turn_id=turn_id, messages=msgs, core=gd.core_memory(), memory=memory,
        now=datetime.now(UTC), engaged_ids=[m.message_id for m in msgs]))
    await publish(reply.text or "ok")
    batch = Batch(group=group, messages=msgs, engaged_ids=[m.message_id for m in msgs], raw=[])
    await memory.write(episode_text(batch, reply.text), kind="episode",
                       metadata={"id": turn_id, "message_ids": [m.message_id for m in msgs]})


def plain_turn(msg: str, outbox: str = "pnc:outbox") -> None:
    """One message, one job: run the turn and publish reply + done to the outbox."""
    job = get_current_job()
    assert job is not None
    conn: redis.Redis = job.connection
    m = Inbound.model_validate_json(msg)
    ctx = current()
    turn_id = turn_id_for(m.group, [m.dedupe_id])

    async def publish(text: str) -> None:
        out = Outbound(channel=m.channel, account=m.account, chat_id=m.chat_id, text=text,
                       reply_to_id=m.message_id, reply_id=turn_id)
        done = {"channel": m.channel, "account": m.account, "chat_id": m.chat_id,
                "thread_id": None, "message_ids": [m.message_id], "reply_id": turn_id}
        pipe = conn.pipeline()
        pipe.xadd(outbox, {"type": "reply", "data": out.model_dump_json()})
        pipe.xadd(outbox, {"type": "done", "data": json.dumps(done)})
        pipe.execute()

    ctx.run(instant_turn(ctx, [m], publish))
