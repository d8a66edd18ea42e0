"""Network escapes from a group's sandbox: the host's loopback (where Redis, the webhook
port and the tool host listen) with the group's network off and on, and any connection
at all with it off."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.sandbox.conftest import Box


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP port on the host's 127.0.0.1, as Redis or the webhook server has."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    try:
        yield s
    finally:
        s.close()


def _tries(port: int) -> str:
    # bash's /dev/tcp: one connect each, reported either way
    return "; ".join(
        f"(timeout 3 bash -c 'echo hi > /dev/tcp/{host}/{port}') 2>/dev/null "
        f"&& echo CONNECTED {host} || echo refused {host}"
        for host in ("127.0.0.1", "10.0.2.2", "localhost"))


def _accepted(s: socket.socket) -> bool:
    try:
        s.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.mark.parametrize("network", [False, True], ids=["network-off", "network-on"])
def test_the_hosts_loopback_is_unreachable(box: Box, listener: socket.socket,
                                           network: bool) -> None:
    port = listener.getsockname()[1]
    r = box.run(_tries(port) + "; ip -o -4 addr | grep -c tap0 || true", network=network)
    assert b"CONNECTED" not in r.stdout, r
    assert r.stdout.count(b"refused") == 3
    assert not _accepted(listener)
    # the network really is on (or off): the tap0 device slirp4netns gives it
    assert r.stdout.split()[-1] == (b"1" if network else b"0")


def test_with_the_network_off_no_socket_connects(box: Box) -> None:
    # an abstract unix socket is per network namespace: the host's is out of reach too
    host = socket.socket(socket.AF_UNIX)
    host.bind("\0pnc-sandbox-test")
    host.listen(1)
    try:
        script = (
            "import socket\n"
            "for fam, addr in ((socket.AF_INET, ('1.1.1.1', 53)), (socket.AF_INET, "
            "('10.0.2.2', 53)), (socket.AF_INET6, ('::1', 22)), (socket.AF_UNIX, "
            "'\\0pnc-sandbox-test')):\n"
            "    s = socket.socket(fam); s.settimeout(3)\n"
            "    try:\n"
            "        s.connect(addr); print('CONNECTED', addr)\n"
            "    except OSError as e:\n"
            "        print('refused', e.errno)\n")
        (box.workspace / "net.py").write_text(script)
        r = box.run("python3 net.py")
        assert r.ok, r
        assert b"CONNECTED" not in r.stdout
        assert r.stdout.count(b"refused") == 4
    finally:
        host.close()
