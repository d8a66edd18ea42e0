"""The ``fetch`` tool: one HTTP GET for a group, run by the tool host (never a worker).

What a call promises (each tested in ``tests/sandbox/test_fetch.py``):

- the URL is ``http`` or ``https``, carries no credentials, and its host is on the
  group's ``fetch_hosts`` (exact, or ``*.domain`` for any subdomain);
- the name is resolved here, and every address it resolves to must be public: loopback,
  private, link-local (169.254.169.254, the cloud metadata service), multicast,
  reserved, unspecified, shared (100.64/10) and IPv4-mapped, 6to4, Teredo and NAT64 IPv6
  addresses are refused;
- the connection goes to the very address that was checked (the URL's host is replaced
  by it; the ``Host`` header, TLS SNI and the certificate check keep the name), so no
  second lookup can answer differently (DNS rebinding);
- redirects are followed by hand, at most ``[tools.fetch] max_redirects``, each hop
  checked like the first URL (scheme, list, addresses);
- the body is read up to ``max_bytes`` and no further, within the timeout; it is asked
  uncompressed and a compressed one refused (no small body inflates past the cap);
  no proxy, ``.netrc`` or environment setting is used (``trust_env=False``).

``allow_addresses`` and ``verify`` (constructor arguments; nothing in the product sets
them) let tests reach a local server's address as if it were public, and trust its
test certificate.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import httpx

from gateway.config.tools import FETCH_TOOL, FetchLimits
from gateway.toolhost.pagetext import html_text, kind_of, media_type
from gateway.toolhost.tools import Handler, ToolContext, ToolFailed, ToolOutput, ToolRegistry

#: (host, port) -> the addresses it resolves to
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
REDIRECTS = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "PyNanoClaw-fetch/0.1"
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_CHECKS = (("is_loopback", "a loopback"), ("is_link_local", "a link-local"),
           ("is_multicast", "a multicast"), ("is_private", "a private"),
           ("is_reserved", "a reserved"), ("is_unspecified", "an unspecified"))


async def system_resolver(host: str, port: int) -> list[str]:
    """The host's own resolver (``getaddrinfo``), every address of ``host``."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def host_listed(host: str, patterns: Sequence[str]) -> bool:
    """Whether ``host`` is on the list: an exact entry, or ``*.domain`` for any name
    under ``domain`` (not ``domain`` itself)."""
    host = host.lower().rstrip(".")
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                return True
        elif host == pattern:
            return True
    return False


def address_refused(address: str) -> str | None:
    """Why ``address`` may not be fetched from (None: it is a public address)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return "an IPv4-mapped address"
        if ip.sixtofour is not None or ip.teredo is not None or ip in _NAT64:
            return "an IPv4 address tunnelled in IPv6"
    for attr, what in _CHECKS:
        if getattr(ip, attr):
            return f"{what} address"
    return None if ip.is_global else "not a public address"


class Fetcher:
    """Makes checked GETs. ``resolver`` is the DNS seam (tests map names to addresses);
    ``allow_addresses`` are addresses taken as public and ``verify`` the TLS trust
    (tests' local server only; default: the system's CAs)."""

    def __init__(self, *, resolver: Resolver = system_resolver,
                 allow_addresses: Collection[str] = (),
                 verify: ssl.SSLContext | None = None) -> None:
        self._resolve = resolver
        self._allow = frozenset(allow_addresses)
        self._verify: ssl.SSLContext | bool = verify or True

    async def get(self, url: str, hosts: Sequence[str], limits: FetchLimits, *,
                  timeout: float, output_chars: int) -> ToolOutput:
        """GET ``url`` (following checked redirects) and return its text. Raises
        ``ToolFailed`` for a refused URL or address, a network error or the timeout."""
        try:
            async with asyncio.timeout(timeout):
                return await self._get(url, hosts, limits, timeout, output_chars)
        except TimeoutError:
            raise ToolFailed(f"fetch: no answer within {timeout:.0f}s") from None
        except httpx.HTTPError as err:
            raise ToolFailed(f"fetch failed: {type(err).__name__}: {err}") from None

    async def _get(self, url: str, hosts: Sequence[str], limits: FetchLimits,
                   timeout: float, output_chars: int) -> ToolOutput:
        current = url
        for _ in range(limits.max_redirects + 1):
            target, host = self._checked_url(current, hosts)
            address = await self._address(host, target.port or
                                          (443 if target.scheme == "https" else 80))
            ext: dict[str, Any] = {"sni_hostname": host} if target.scheme == "https" else {}
            async with httpx.AsyncClient(trust_env=False, follow_redirects=False,
                                         timeout=timeout, verify=self._verify) as client, \
                    client.stream("GET", target.copy_with(host=address), extensions=ext,
                                  headers={"Host": target.netloc.decode("ascii"),
                                           "User-Agent": USER_AGENT,
                                           "Accept-Encoding": "identity"}) as resp:
                location = resp.headers.get("location")
                if resp.status_code in REDIRECTS and location:
                    current = str(target.join(location))
                    continue
                return await _read(resp, str(target), limits.max_bytes, output_chars)
        raise ToolFailed(f"refused: more than {limits.max_redirects} redirects")

    def _checked_url(self, url: str, hosts: Sequence[str]) -> tuple[httpx.URL, str]:
        try:
            target = httpx.URL(url)
        except (httpx.InvalidURL, TypeError) as err:
            raise ToolFailed(f"not a URL: {url!r} ({err})") from None
        if target.scheme not in ("http", "https"):
            raise ToolFailed(f"refused: {url!r} is not an http or https URL")
        if target.userinfo:
            raise ToolFailed("refused: a URL with a user name or password")
        host = target.raw_host.decode("ascii").lower().rstrip(".")
        if not host:
            raise ToolFailed(f"refused: {url!r} names no host")
        if not host_listed(host, hosts):
            raise ToolFailed(f"refused: {host} is not on this chat's list of sites "
                             "([tools] fetch_hosts)")
        return target, host

    async def _address(self, host: str, port: int) -> str:
        """The address to connect to: every address ``host`` resolves to is checked."""
        try:
            ipaddress.ip_address(host)
            addresses: Sequence[str] = [host]
        except ValueError:
            try:
                addresses = await self._resolve(host, port)
            except OSError as err:
                raise ToolFailed(f"fetch: cannot resolve {host} ({err})") from None
        if not addresses:
            raise ToolFailed(f"fetch: {host} has no address")
        for address in addresses:
            why = None if address in self._allow else address_refused(address)
            if why:
                raise ToolFailed(f"refused: {host} resolves to {address}, {why}")
        return addresses[0]


async def _read(resp: httpx.Response, url: str, cap: int, output_chars: int) -> ToolOutput:
    """The response's text, reading at most ``cap`` bytes of its body."""
    content_type = resp.headers.get("content-type", "")
    encoding = resp.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", ""):
        # asked for none: a compressed body could inflate far past the cap in one chunk
        raise ToolFailed(f"refused: the server sent a {encoding}-compressed body unasked")
    data = bytearray()
    cut = False
    kind = ""
    async for chunk in resp.aiter_raw():
        data += chunk
        if not kind:
            kind = kind_of(content_type, bytes(data))
            if kind == "binary":
                break  # nothing to show: read no more of it
        if len(data) > cap:  # at most one chunk past the cap is ever read
            cut = True
            del data[cap:]
            break
    kind = kind or kind_of(content_type, b"")
    media = media_type(content_type) or "no type given"
    head = f"{url}: HTTP {resp.status_code}, {media}"
    if kind == "binary":
        size = resp.headers.get("content-length")
        text = f"[binary content ({media}{f', {size} bytes' if size else ''}): not shown]"
    else:
        try:
            body = bytes(data).decode(resp.charset_encoding or "utf-8", errors="replace")
        except LookupError:
            body = bytes(data).decode("utf-8", errors="replace")
        text = html_text(body) if kind == "html" else body
    notes = [f"[the page was cut at {cap} bytes]"] if cut else []
    if len(text) > output_chars:
        text = text[:output_chars]
        notes.append(f"[text cut at {output_chars} characters]")
    return ToolOutput("\n".join([head, "", text, *notes]).strip(), ok=resp.status_code < 400,
                      source=f"fetch: {url}")


def fetch_tool(fetcher: Fetcher, limits: FetchLimits) -> Handler:
    """The registry handler: the URL from the call, the hosts from the group's policy."""
    async def fetch(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        url = args.get("url")
        if not isinstance(url, str) or not url.strip():
            raise ToolFailed("'url' must be an http(s) URL")
        hosts = ctx.policy.fetch_hosts if ctx.policy is not None else ()
        if not hosts:
            raise ToolFailed("refused: no site is allowed for fetch in this chat")
        return await fetcher.get(url.strip(), hosts, limits,
                                 timeout=min(limits.timeout, ctx.timeout),
                                 output_chars=ctx.spec.limits.output_bytes)
    return fetch


def with_fetch(registry: ToolRegistry, fetcher: Fetcher, limits: FetchLimits
               ) -> ToolRegistry:
    """``registry`` with ``fetch`` added."""
    registry.register(FETCH_TOOL, fetch_tool(fetcher, limits))
    return registry
