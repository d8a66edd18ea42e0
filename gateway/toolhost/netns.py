"""Network for a sandbox whose group allows it: slirp4netns on the sandbox's own network
namespace, with the host's loopback unreachable.

bubblewrap alone offers the host's network or none. The sandbox always gets a new, empty
network namespace; when the network is allowed, slirp4netns (a user-mode TCP/IP stack)
gives it a ``tap0`` with NAT to the outside, started before the command runs (bwrap waits
on ``--block-fd``). ``--disable-host-loopback`` refuses 10.0.2.2, slirp's alias of the
host's 127.0.0.1, so Redis, the webhook port and the tool host stay out of reach; inside,
127.0.0.1 is the namespace's own loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess

#: seconds bwrap and slirp4netns get to come up before the command is given up
SETUP_TIMEOUT = 10.0


class NetworkSetupFailed(RuntimeError):
    """slirp4netns did not come up for the sandbox."""


def _read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    return data


async def child_pid(info_r: int) -> int:
    """The sandbox init's pid (in the host's pid namespace), from bwrap's ``--info-fd``."""
    info = await asyncio.wait_for(asyncio.to_thread(_read_all, info_r), SETUP_TIMEOUT)
    try:
        return int(json.loads(info)["child-pid"])
    except (ValueError, KeyError) as err:
        raise NetworkSetupFailed(f"bwrap gave no sandbox pid ({err})") from None


async def attach_network(pid: int, block_w: int) -> subprocess.Popen[bytes]:
    """Start slirp4netns on the network namespace of the sandbox whose init is ``pid``,
    wait until it is ready, then let the command start. Returns the slirp4netns process
    (the caller kills it when the command ends)."""
    # as root, slirp4netns enters the namespace with root's rights and then confines
    # itself (--enable-sandbox: its own mount namespace, no capabilities; seccomp); as
    # an ordinary user it must join the sandbox's user namespace to enter its network
    userns = [] if os.geteuid() == 0 else [f"--userns-path=/proc/{pid}/ns/user"]
    ready_r, ready_w = os.pipe()
    try:
        helper = subprocess.Popen(
            ["slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
             "--enable-sandbox", "--enable-seccomp", f"--ready-fd={ready_w}",
             *userns, "--netns-type=path", f"/proc/{pid}/ns/net", "tap0"],
            pass_fds=[ready_w], env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            )
    finally:
        os.close(ready_w)
    try:
        ready = await asyncio.wait_for(asyncio.to_thread(os.read, ready_r, 1), SETUP_TIMEOUT)
    finally:
        os.close(ready_r)
    if ready != b"1":
        helper.kill()
        _, said = helper.communicate()
        raise NetworkSetupFailed(f"slirp4netns failed: {said.decode(errors='replace')[-300:]}")
    with contextlib.suppress(BrokenPipeError):
        os.write(block_w, b"1")
    return helper
