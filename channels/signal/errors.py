"""signal-cli's JSON-RPC errors mapped onto ``channels.errors``.

Codes from signal-cli's ``SignalJsonRpcCommandHandler``: -1 user error, -3 I/O error,
-4 untrusted key, -5 rate limit, -6 captcha rejected, and the JSON-RPC ones (-32700 ..
-32603; -32603 also wraps "Failed to send message: ... (IOException)"). A failed
``send`` carries its per-recipient results in ``data.response.results``; each has a
``type`` (SUCCESS, NETWORK_FAILURE, UNREGISTERED_FAILURE, IDENTITY_FAILURE,
RATE_LIMIT_FAILURE, INVALID_PRE_KEY_FAILURE), and a rate-limit failure that Signal
wants a captcha for (a "proof required" challenge) also has the challenge ``token``.

Three failures need the operator, not a retry loop: a captcha (proof) challenge, a
rate limit, and an untrusted (changed) safety number. ``classify`` names them as a
``Problem`` so the adapter can log one line and show it in ``/healthz``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from channels.errors import ChannelError, NetworkError, PermanentError, RateLimited
from channels.signal.rpc import RpcError

USER_ERROR = -1
IO_ERROR = -3
UNTRUSTED_KEY_ERROR = -4
RATELIMIT_ERROR = -5
CAPTCHA_REJECTED_ERROR = -6
INTERNAL_ERROR = -32603

#: when signal-cli gives no retry-after for a rate limit, wait this long (seconds)
DEFAULT_RETRY_AFTER = 60.0

RATE_LIMITED = "rate_limited"
CAPTCHA_REQUIRED = "captcha_required"
UNTRUSTED_IDENTITY = "untrusted_identity"


@dataclass(frozen=True)
class Problem:
    """An operator-facing condition: ``state`` for /healthz, ``advice`` for the log."""

    state: str
    advice: str


def _results(error: RpcError) -> list[dict[str, Any]]:
    data = error.data if isinstance(error.data, dict) else {}
    response = data.get("response")
    results = response.get("results") if isinstance(response, dict) else None
    return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []


def _retry_after(results: list[dict[str, Any]]) -> float:
    waits = [float(r["retryAfterSeconds"]) for r in results
             if isinstance(r.get("retryAfterSeconds"), int | float)]
    return max(waits) if waits else DEFAULT_RETRY_AFTER


def _who(result: dict[str, Any]) -> str:
    address = result.get("recipientAddress")
    if isinstance(address, dict):
        return str(address.get("number") or address.get("uuid") or "?")
    return "?"


def classify(error: RpcError, account: str) -> tuple[ChannelError, Problem | None]:
    """The channel error to raise for ``error``, and the operator problem it shows."""
    results = _results(error)
    failures = {str(r.get("type")) for r in results if r.get("type") != "SUCCESS"}
    if error.code == RATELIMIT_ERROR or (failures and failures <= {"RATE_LIMIT_FAILURE"}):
        wait = _retry_after(results)
        tokens = [str(r["token"]) for r in results if r.get("token")]
        if tokens:
            return RateLimited(wait, "signal: captcha required"), Problem(
                CAPTCHA_REQUIRED,
                f"Signal wants a captcha before this account sends more (or a wait of "
                f"{wait:.0f}s). Solve one at https://signalcaptchas.org/challenge/generate.html "
                f"and run: signal-cli -a {account} submitRateLimitChallenge --challenge "
                f"{tokens[0]} --captcha <the signalcaptcha:// link>",
            )
        return RateLimited(wait, "signal: rate limited"), Problem(
            RATE_LIMITED, f"Signal rate-limits this account; sends resume after {wait:.0f}s"
        )
    if error.code == UNTRUSTED_KEY_ERROR or "IDENTITY_FAILURE" in failures:
        who = ", ".join(sorted({_who(r) for r in results
                                if r.get("type") == "IDENTITY_FAILURE"})) or "a recipient"
        return PermanentError("untrusted_identity", error.message), Problem(
            UNTRUSTED_IDENTITY,
            f"the safety number of {who} changed; verify it, then run: "
            f"signal-cli -a {account} trust --verified-safety-number <number> <recipient> "
            "(or trust --trust-all-known-keys)",
        )
    if error.code == CAPTCHA_REJECTED_ERROR:
        return PermanentError("captcha_rejected", error.message), Problem(
            CAPTCHA_REQUIRED, "Signal rejected the submitted captcha; solve a new one"
        )
    if error.code in (IO_ERROR, INTERNAL_ERROR) or (failures and failures <= {"NETWORK_FAILURE"}):
        return NetworkError(f"signal-cli could not send ({error.message})"), None
    if "UNREGISTERED_FAILURE" in failures:
        return PermanentError("recipient_unregistered", error.message), None
    if error.code == USER_ERROR:
        return PermanentError("refused", error.message), None
    return PermanentError("bad_request", error.message), None
