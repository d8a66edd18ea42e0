"""A real Synapse homeserver for end-to-end tests, in its own virtualenv.

Synapse is not a project dependency (it is a server, with Twisted and its own pins), so it
lives in a separate venv: ``$PNC_SYNAPSE_PYTHON`` names its interpreter, default
``<repo>/.synapse-venv/bin/python`` (what ``.ci/run`` creates). ``SynapseServer`` writes a
generated config (SQLite, one client listener on 127.0.0.1, rate limits raised so the
tests' bursts are not throttled), starts the process, waits for ``/health``, and registers
users with the shared secret (the admin API's HMAC registration, no extra process).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVER_NAME = "localhost"
#: what a test may wait for Synapse to answer /health (it takes about 5 s on 2 cores)
START_TIMEOUT = 90.0

_UNLIMITED = {"per_second": 1000, "burst_count": 1000}


def synapse_python() -> Path:
    return Path(os.environ.get("PNC_SYNAPSE_PYTHON", ROOT / ".synapse-venv" / "bin" / "python"))


def synapse_available() -> bool:
    python = synapse_python()
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import synapse.app.homeserver"], capture_output=True, timeout=60
    )
    return probe.returncode == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Account:
    user_id: str
    password: str
    access_token: str
    device_id: str


class SynapseServer:
    """One Synapse process under ``directory``; ``start()`` then ``stop()``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = directory / "homeserver.yaml"
        self.process: subprocess.Popen[bytes] | None = None
        self._secret = ""

    def _configure(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [str(synapse_python()), "-m", "synapse.app.homeserver",
             "--server-name", SERVER_NAME, "--config-path", str(self.config_path),
             "--data-directory", str(self.directory), "--report-stats=no",
             "--generate-config"],
            check=True, capture_output=True, timeout=120, cwd=self.directory,
        )  # fmt: skip
        config: dict[str, Any] = yaml.safe_load(self.config_path.read_text(encoding="utf-8"))
        config["listeners"] = [
            {
                "port": self.port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ]
        config["trusted_key_servers"] = []
        config["suppress_key_server_warning"] = True
        config["enable_registration"] = False
        config["presence"] = {"enabled": False}
        for limit in ("rc_message", "rc_registration", "rc_joins", "rc_invites", "rc_login"):
            config[limit] = (
                {"local": _UNLIMITED, "remote": _UNLIMITED}
                if limit == "rc_joins"
                else {"address": _UNLIMITED, "account": _UNLIMITED, "failed_attempts": _UNLIMITED}
                if limit == "rc_login"
                else {"per_room": _UNLIMITED, "per_user": _UNLIMITED, "per_issuer": _UNLIMITED}
                if limit == "rc_invites"
                else _UNLIMITED
            )
        self._secret = str(config["registration_shared_secret"])
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")

    def start(self) -> None:
        self._configure()
        log = (self.directory / "stdout.log").open("wb")
        self.process = subprocess.Popen(
            [str(synapse_python()), "-m", "synapse.app.homeserver", "-c", str(self.config_path)],
            cwd=self.directory, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"synapse exited with {self.process.returncode}; see {self.directory}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"synapse did not answer /health in {START_TIMEOUT}s")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it may exit in between
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method=method,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())

    def register(self, localpart: str, password: str, *, admin: bool = False) -> Account:
        """Create a user through the shared-secret registration API (Synapse admin API
        ``/_synapse/admin/v1/register``: nonce, then an HMAC-SHA1 over
        nonce, user, password and admin flag, NUL-separated)."""
        nonce = self._request("GET", "/_synapse/admin/v1/register")["nonce"]
        mac = hmac.new(self._secret.encode(), digestmod=hashlib.sha1)
        for part in (nonce, localpart, password, "admin" if admin else "notadmin"):
            if part != nonce:
                mac.update(b"\x00")
            mac.update(part.encode())
        answer = self._request(
            "POST",
            "/_synapse/admin/v1/register",
            {
                "nonce": nonce,
                "username": localpart,
                "password": password,
                "admin": admin,
                "mac": mac.hexdigest(),
            },
        )
        return Account(answer["user_id"], password, answer["access_token"], answer["device_id"])
