"""Whether a mail's ``From:`` is authenticated, from the receiving server's verdict.

``From:`` is trivially forged, so the sender's address is used for allowlists, roles
and trust only when the receiving server's ``Authentication-Results`` header
(RFC 8601) says DMARC passed for the From domain, or, without a DMARC result, that DKIM
or SPF passed for a domain aligned with it (RFC 7489 section 3.1, relaxed alignment).

Only headers written by a trusted server count (its authserv-id, e.g. Gmail's
"mx.google.com"): anyone can put an ``Authentication-Results`` line in the mail they
send. A receiving server adds its own header above what it received, so the first
header with a trusted authserv-id, reading from the top, is the server's own.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

_COMMENT = re.compile(r"\([^()]*\)")
_PROP = re.compile(r"([A-Za-z0-9._-]+)\s*=\s*(\"[^\"]*\"|[^\s;]+)")


@dataclass(frozen=True)
class Verdict:
    """The outcome for one mail: ``verified`` and a short reason for logs."""

    verified: bool
    reason: str


def _strip_comments(value: str) -> str:
    previous = None
    while previous != value:  # comments nest: remove innermost first
        previous, value = value, _COMMENT.sub(" ", value)
    return value


def _results(header: str) -> tuple[str, list[dict[str, str]]]:
    """(authserv-id, [{"method": ..., "result": ..., "<ptype.property>": ...}, ...])."""
    parts = [p.strip() for p in _strip_comments(header).split(";")]
    authserv = parts[0].split()[0].lower() if parts and parts[0] else ""
    results: list[dict[str, str]] = []
    for part in parts[1:]:
        props = [(k.lower(), v.strip('"').lower()) for k, v in _PROP.findall(part)]
        if not props:
            continue
        method, result = props[0]
        entry = {"method": method, "result": result}
        entry.update(props[1:])
        results.append(entry)
    return authserv, results


def _domain(value: str) -> str:
    return value.rpartition("@")[2].strip().strip(".").lower()


def aligned(domain: str, from_domain: str) -> bool:
    """Relaxed alignment: one domain is the other or a subdomain of it."""
    if not domain or "." not in domain:
        return False
    return (
        domain == from_domain
        or from_domain.endswith("." + domain)
        or domain.endswith("." + from_domain)
    )


def verdict(headers: Sequence[str], from_address: str, trusted: Collection[str]) -> Verdict:
    """Judge ``from_address`` by the first ``Authentication-Results`` (top down) whose
    authserv-id is in ``trusted``."""
    from_domain = _domain(from_address)
    trusted_ids = {t.lower() for t in trusted}
    for header in headers:
        authserv, results = _results(header)
        if authserv not in trusted_ids:
            continue
        dmarc = [r for r in results if r["method"] == "dmarc"]
        if dmarc:
            r = dmarc[0]
            header_from = r.get("header.from", from_domain)
            if r["result"] == "pass" and _domain(header_from) == from_domain:
                return Verdict(True, f"dmarc=pass ({authserv})")
            return Verdict(False, f"dmarc={r['result']} ({authserv})")
        for r in results:
            if r["result"] != "pass":
                continue
            if r["method"] == "dkim":
                signer = r.get("header.d") or _domain(r.get("header.i", ""))
                if aligned(signer, from_domain):
                    return Verdict(True, f"dkim=pass aligned ({authserv})")
            if r["method"] == "spf":
                envelope = _domain(r.get("smtp.mailfrom", ""))
                if aligned(envelope, from_domain):
                    return Verdict(True, f"spf=pass aligned ({authserv})")
        return Verdict(False, f"no aligned pass ({authserv})")
    return Verdict(False, "no Authentication-Results from a trusted server")
