"""The MCP tests' server: ``[tools.mcp.t]`` over stdio or streamable HTTP (a
``tests.sandbox.mcp_server`` process on a free port), and its secret."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.pipeline.conftest import ROOT
from tests.sandbox.mcp_server import SECRET_ENV

#: the server's timeout in the tests: what the hanging tool is cut at
TIMEOUT = 2
#: run by path: a stdio server gets no PYTHONPATH and the host's working directory
SERVER_SCRIPT = ROOT / "tests" / "sandbox" / "mcp_server.py"


def new_secret() -> str:
    return f"mcp-secret-{secrets.token_hex(16)}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def mcp_server(transport: str, secret: str) -> Iterator[str]:
    """The ``[tools.mcp.t]`` table of a running server (stdio: started by the host)."""
    if transport == "stdio":
        yield (f'[tools.mcp.t]\ncommand = "{sys.executable}"\n'
               f'args = ["{SERVER_SCRIPT}", "stdio"]\n'
               f'env = ["{SECRET_ENV}"]\ntimeout = {TIMEOUT}\n')
        return
    port = _free_port()
    # its stderr is the remote server's own (its ``leak`` prints the secret there), not
    # a log of ours: kept out of the output the tests search for the secret
    proc = subprocess.Popen([sys.executable, "-m", "tests.sandbox.mcp_server", "http",
                             str(port)], cwd=ROOT, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT), SECRET_ENV: secret})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no MCP server"
                time.sleep(0.05)
        yield (f'[tools.mcp.t]\nurl = "http://127.0.0.1:{port}/mcp"\n'
               f'env = ["{SECRET_ENV}"]\ntimeout = {TIMEOUT}\n'
               f'headers = {{ Authorization = "Bearer ${{{SECRET_ENV}}}" }}\n')
    finally:
        proc.terminate()
        proc.wait(timeout=20)
