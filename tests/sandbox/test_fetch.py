"""The ``fetch`` tool through the tool host's own checks (the claim on a real Valkey, the
group's policy), against a real local HTTP server. Names resolve through the resolver
seam; the server's address (127.0.0.2) is the only one taken as public
(``allow_addresses``); a second listener on 127.0.0.1 counts what would have leaked."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis

from gateway.config import Settings
from gateway.config.tools import FetchLimits, GroupTools, ToolsConfig
from gateway.operations import start_valkey
from gateway.queue import Keys
from gateway.queue.toolcalls import ToolCall, ToolResult
from gateway.toolhost.fetch import Fetcher, address_refused, host_listed, with_fetch
from gateway.toolhost.host import ToolHost
from gateway.toolhost.sandbox import Sandbox
from gateway.toolhost.tools import ToolRegistry
from tests.sandbox.site import PUBLIC, Server, resolver, serve_site, tls_pair

GROUP = "local:reader"


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with serve_site() as site:
        yield site


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    valkey = start_valkey(tmp_path_factory.mktemp("fetch") / "valkey", persist=False)
    r = redis.Redis.from_url(f"redis://127.0.0.1:{valkey.port}")
    yield r
    r.close()
    valkey.stop()


class Host:
    def __init__(self, client: redis.Redis, data: Path, limits: FetchLimits,
                 verify: ssl.SSLContext | None = None) -> None:
        tools = ToolsConfig(fetch_hosts=["*.example.com", "docs.example.com"], fetch=limits,
                            groups={"local:closed": GroupTools(fetch_hosts=[])})
        self.sandbox = Sandbox()
        fetcher = Fetcher(resolver=resolver, allow_addresses={PUBLIC}, verify=verify)
        self.host = ToolHost(Settings(data_dir=data, tools=tools), client,
                             sandbox=self.sandbox,
                             registry=with_fetch(ToolRegistry(), fetcher, limits))
        self.client = client

    async def fetch(self, url: str, group: str = GROUP) -> ToolResult:
        self.client.set(Keys().lock(group), "tok", px=60_000)
        return await self.host.handle(ToolCall(group=group, turn_id="t1", lock_token="tok",
                                               tool="fetch", args={"url": url},
                                               deadline=time.time() + 30))


@pytest.fixture
def host(client: redis.Redis, tmp_path: Path) -> Iterator[Host]:
    h = Host(client, tmp_path / "data", FetchLimits(max_bytes=4096, max_redirects=3))
    yield h
    h.sandbox.close()


async def test_an_allowed_page_comes_back_as_its_text(host: Host, server: Server) -> None:
    result = await host.fetch(f"http://docs.example.com:{server.port}/page")
    assert result.ok, result
    head, _, text = result.output.partition("\n\n")
    assert head == f"http://docs.example.com:{server.port}/page: HTTP 200, text/html"
    assert text == "# Docs home\n\nHello\nWorld &\nmore"
    # a redirect within the list is followed, and checked
    hopped = await host.fetch(f"http://www.docs.example.com:{server.port}/to-page")
    assert hopped.ok and hopped.output.startswith(
        f"http://www.docs.example.com:{server.port}/page: HTTP 200")
    assert server.hits == Counter({f"{PUBLIC}/page": 2, f"{PUBLIC}/to-page": 1})


async def test_a_host_off_the_list_is_refused(host: Host, server: Server) -> None:
    off = await host.fetch(f"http://evil.test:{server.port}/page")
    assert not off.ok and "evil.test is not on this chat's list" in off.error
    closed = await host.fetch(f"http://docs.example.com:{server.port}/page",
                              group="local:closed")
    assert not closed.ok and "not allowed in this chat" in closed.error
    for url in ("file:///etc/passwd", f"http://user:pw@docs.example.com:{server.port}/",
                "gopher://docs.example.com/"):
        refused = await host.fetch(url)
        assert not refused.ok and refused.error.startswith("refused"), (url, refused)
    assert server.hits == Counter()


@pytest.mark.parametrize(("name", "address"), [
    ("loop.example.com", "127.0.0.1"), ("ten.example.com", "10.1.2.3"),
    ("six.example.com", "::1"), ("meta.example.com", "169.254.169.254"),
    ("mapped.example.com", f"::ffff:{PUBLIC}"), ("mixed.example.com", "10.0.0.1")])
async def test_a_name_resolving_inside_is_refused(host: Host, server: Server, name: str,
                                                  address: str) -> None:
    result = await host.fetch(f"http://{name}:{server.port}/page")
    assert not result.ok and f"refused: {name} resolves to {address}, " in result.error
    assert server.hits == Counter()


async def test_a_redirect_inside_is_refused(host: Host, server: Server) -> None:
    private = await host.fetch(f"http://docs.example.com:{server.port}/to-private")
    assert not private.ok
    assert "internal.example.com resolves to 10.0.0.7, a private address" in private.error
    loopback = await host.fetch(f"http://docs.example.com:{server.port}/to-loopback")
    assert not loopback.ok and "loop.example.com resolves to 127.0.0.1" in loopback.error
    looping = await host.fetch(f"http://docs.example.com:{server.port}/loop")
    assert not looping.ok and "more than 3 redirects" in looping.error
    # the 127.0.0.1 listener was never reached
    assert server.hits == Counter({f"{PUBLIC}/to-private": 1, f"{PUBLIC}/to-loopback": 1,
                                   f"{PUBLIC}/loop": 4})


async def test_reading_stops_at_the_size_cap(host: Host, server: Server) -> None:
    result = await asyncio.wait_for(
        host.fetch(f"http://docs.example.com:{server.port}/endless"), 20)
    assert result.ok, result
    rest = result.output.partition("\n\n")[2]
    assert rest == "x" * 4096 + "\n[the page was cut at 4096 bytes]"
    bomb = await host.fetch(f"http://docs.example.com:{server.port}/bomb.txt")
    assert not bomb.ok and "gzip-compressed body unasked" in bomb.error


async def test_text_types_pass_and_binary_is_described(host: Host, server: Server) -> None:
    base = f"http://docs.example.com:{server.port}"
    data = await host.fetch(f"{base}/data.json")
    assert data.ok and data.output.endswith('application/json\n\n{"answer": 42}')
    notes = await host.fetch(f"{base}/notes.txt")
    assert notes.ok and notes.output.endswith("text/plain\n\ncafé")
    logo = await host.fetch(f"{base}/logo.png")
    assert logo.ok and logo.output.endswith(
        "image/png\n\n[binary content (image/png, 1008 bytes): not shown]")
    missing = await host.fetch(f"{base}/nothing")
    assert not missing.ok and "HTTP 404" in missing.output


async def test_https_goes_to_the_checked_address_and_verifies_the_name(
        client: redis.Redis, tmp_path: Path) -> None:
    """The connection is pinned to the resolved address, while TLS (SNI and the
    certificate check) and the Host header keep the name."""
    server_tls, client_tls = tls_pair(tmp_path, "docs.example.com")
    h = Host(client, tmp_path / "data", FetchLimits(), verify=client_tls)
    try:
        async with serve_site(server_tls) as site:
            ok = await h.fetch(f"https://docs.example.com:{site.port}/page")
            assert ok.ok and "# Docs home" in ok.output, ok
            # the same address under another name: its certificate does not match
            other = await h.fetch(f"https://www.docs.example.com:{site.port}/page")
            assert not other.ok and "certificate verify failed" in other.error, other
            assert site.hits == Counter({f"{PUBLIC}/page": 1})
    finally:
        h.sandbox.close()


def test_the_address_and_host_rules() -> None:
    for address in ("127.0.0.1", "10.0.0.1", "172.16.0.1", "192.168.1.1", "169.254.169.254",
                    "100.64.0.1", "0.0.0.0", "224.0.0.1", "240.0.0.1", "::1", "fe80::1",
                    "fc00::1", "::ffff:8.8.8.8", "2002:a00:1::", "64:ff9b::a00:1", "::"):
        assert address_refused(address) is not None, address
    for address in ("8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"):
        assert address_refused(address) is None, address
    hosts = ["docs.python.org", "*.example.com"]
    assert host_listed("docs.python.org", hosts) and host_listed("a.b.example.com", hosts)
    assert host_listed("DOCS.python.org.", hosts)
    for host in ("python.org", "example.com", "evilexample.com", "docs.python.org.evil.com"):
        assert not host_listed(host, hosts), host
