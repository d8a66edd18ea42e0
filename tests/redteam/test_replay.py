"""The episode trust cap on a replayed turn (real Valkey, the drain job in-process).

A turn that published its reply and then crashed before writing its episode is
finished by a retry that no longer knows what memory the first attempt's model read:
the reply it records is counted at quoted trust (fix for the red-team finding "trust
laundered through recall"; see test_fixes.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import redis

from tests.pipeline.conftest import Valkey, valkey  # noqa: F401  (fixture)
from tests.pipeline.test_mechanics import K, _push, inbound, worker_env  # noqa: F401
from workers.prompt import QUOTED_TRUST
from workers.turn import turn_id_for


def _episode_trust(path: Path) -> float:
    found = re.search(r"^trust:\s*([0-9.]+)", path.read_text(encoding="utf-8"), re.M)
    assert found
    return float(found.group(1))


def test_a_replayed_reply_is_recorded_at_quoted_trust(worker_env: Path,  # noqa: F811
                                                      valkey: Valkey) -> None:  # noqa: F811
    from workers.drain import drain_group

    sync = redis.Redis.from_url(valkey.url)
    _push(sync, "c1", ["a", "b"])
    assert drain_group("local:c1", redis_url=valkey.url, lock_ttl=10, lease_ttl=10)["turns"] == 1
    turn = turn_id_for("local:c1", [inbound(m).dedupe_id for m in ("a", "b")])
    episodes = worker_env / "groups" / "local" / "c1" / "episodes"
    [episode] = episodes.rglob(f"{turn}.md")  # in its month's folder
    assert _episode_trust(episode) == 0.8  # the DM owner's words and a reply; nothing read

    # Crash after publishing, before the episode: the file and the flag are gone.
    episode.unlink()
    sync.hdel(K.turn(turn), "written")
    _push(sync, "c1", ["a", "b"])
    sync.rename(K.mailbox("local:c1"), K.processing("local:c1"))
    assert drain_group("local:c1", redis_url=valkey.url, lock_ttl=10, lease_ttl=10)["turns"] == 1
    [episode] = episodes.rglob(f"{turn}.md")
    assert _episode_trust(episode) == QUOTED_TRUST
    sync.close()
