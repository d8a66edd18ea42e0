"""A thin JSON-RPC 2.0 client for ``signal-cli daemon --http`` (``POST /api/v1/rpc``).

Wire format (signal-cli's ``man/signal-cli-jsonrpc.5`` and ``HttpServerHandler``): one
request object per POST with ``Content-Type: application/json``; the answer is HTTP 200
with ``{"jsonrpc": "2.0", "result": ..., "id": ...}`` or ``{"jsonrpc": "2.0", "error":
{"code", "message", "data"}, "id": ...}``. Command parameters are the CLI options in
camelCase (``--quote-timestamp`` -> ``quoteTimestamp``).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import aiohttp

from channels.download import read_capped
from channels.errors import MaybeSent, NetworkError, PermanentError

RPC_PATH = "/api/v1/rpc"


class RpcError(Exception):
    """A JSON-RPC error object from signal-cli. ``data`` is signal-cli's
    ``{"response": <the command's partial result>}`` when it has one."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"signal-cli error {code}: {message}")
        self.code = code
        self.message = message
        self.data = data


class SignalRpc:
    """Calls methods on one daemon. ``account`` is added to every call's params: the
    multi-account daemon needs it to pick the account, and the single-account daemon
    hands the methods used here (``send``, ``sendTyping``, ``version``) a plain map in
    which an extra key is ignored."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        *,
        account: str,
        timeout: float,
    ) -> None:
        self._session = session
        self._url = base_url + RPC_PATH
        self._account = account
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"SignalRpc(url={self._url!r})"

    async def call(self, method: str, params: dict[str, Any], *,
                   max_answer: int | None = None) -> Any:
        """Call ``method``; return its ``result``. Raises ``RpcError`` for a JSON-RPC
        error, ``NetworkError`` when the daemon cannot be reached, ``MaybeSent`` when it
        failed after the request was written (dropped, timed out, 5xx), and
        ``PermanentError`` when it refuses the request itself (4xx: wrong Host, path).
        With ``max_answer``, an answer longer than that many bytes is not read to its
        end: ``AttachmentTooLarge`` (the only such call fetches a file)."""
        body = {"jsonrpc": "2.0", "method": method, "id": str(next(self._ids)),
                "params": {"account": self._account, **params}}
        try:
            async with self._session.post(self._url, json=body, timeout=self._timeout) as resp:
                if resp.status >= 500:
                    # the request was read: the daemon may have acted on it
                    raise MaybeSent(f"signal-cli answered HTTP {resp.status}")
                if resp.status >= 400:
                    raise PermanentError("daemon_refused",
                                         f"signal-cli answered HTTP {resp.status}")
                if resp.status == 201:  # a notification: no answer by design
                    return None
                if max_answer is None:
                    answer = await resp.json(content_type=None)
                else:
                    answer = json.loads(await read_capped(
                        resp.content.iter_chunked(64 * 1024), max_answer))
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as error:
            # never connected: nothing was sent
            raise NetworkError(f"signal-cli unreachable ({type(error).__name__})") from None
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            # connected: the request may have been written and acted on
            raise MaybeSent(f"signal-cli failed mid-request ({type(error).__name__})") from None
        except ValueError:
            raise MaybeSent("signal-cli sent an answer that is not JSON") from None
        if not isinstance(answer, dict):
            raise NetworkError("signal-cli sent an answer that is not a JSON-RPC object")
        failure = answer.get("error")
        if isinstance(failure, dict):
            raise RpcError(
                int(failure.get("code", 0)), str(failure.get("message", "")), failure.get("data")
            )
        return answer.get("result")
