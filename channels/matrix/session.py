"""The bot's Matrix session (device id and access token), kept under the store dir.

Homeservers deduplicate a retried send by transaction id per device (spec "Transaction
identifiers": scoped to the access token's device), so the device must outlive a
restart: a fresh login per start would mint a new device, lose that dedupe, and leave the
E2E key store behind. The file is written atomically with mode 0600 in a 0700 directory;
its token is a ``SecretStr`` so it never reaches a log or a repr.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

SESSION_FILE = "session.json"


@dataclass(frozen=True)
class Session:
    homeserver: str
    user_id: str
    device_id: str
    access_token: SecretStr


def load_session(store_dir: Path, homeserver: str, user_id: str) -> Session | None:
    """The stored session for this account, or None (absent, unreadable, or another
    account's)."""
    path = store_dir / SESSION_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("homeserver") != homeserver or data.get("user_id") != user_id:
        return None
    device, token = data.get("device_id"), data.get("access_token")
    if not (isinstance(device, str) and isinstance(token, str) and device and token):
        return None
    return Session(homeserver, user_id, device, SecretStr(token))


def save_session(store_dir: Path, session: Session) -> None:
    """Write the session crash-safe (temp file, fsync, rename), readable by us only."""
    store_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = {
        "homeserver": session.homeserver,
        "user_id": session.user_id,
        "device_id": session.device_id,
        "access_token": session.access_token.get_secret_value(),
    }
    fd, tmp = tempfile.mkstemp(dir=store_dir, prefix=".session-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), 0o600)
            json.dump(data, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, store_dir / SESSION_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
