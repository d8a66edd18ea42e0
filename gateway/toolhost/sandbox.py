"""Run one command for a group under bubblewrap, with limits.

What a command gets (and promises, each tested in ``tests/sandbox/``):

- its own user namespace with a non-root uid (1000) inside; when the host runs as root
  the sandbox runs as ``[tools] sandbox_uid`` outside, so RLIMIT_NPROC binds (the
  kernel exempts root's processes from it);
- the group's ``workspace/`` as the only writable mount, at ``/workspace`` (its cwd);
  ``/usr`` (and the ``/bin``, ``/lib`` links) read-only; a minimal ``/etc`` written
  here (no host accounts, no host secrets); a private ``/tmp`` (a tmpfs with a size);
  its own ``/proc`` (new pid namespace: no process of the project is visible) and
  ``/dev``; operator mounts read-only under ``/mnt``;
- no network (a new empty network namespace) unless the group allows it, and then
  slirp4netns with ``--disable-host-loopback``: the host's 127.0.0.1 (Redis, the
  webhook port, the tool host) stays unreachable;
- limits: CPU time, address space, processes, file size (RLIMIT_FSIZE), stdout/stderr
  bytes kept (past the cap the command is stopped), wall-clock time (the whole pid
  namespace is killed: killing its init kills every process in it);
- the workspace quota: measured before and after each command; while over it the
  command runs with RLIMIT_FSIZE 0 (no file can grow, removing files works). One
  command can overshoot by what it writes before it ends: each file at most
  ``file_mb``, in all at most what it writes within its timeout.
- an environment built from nothing (PATH, HOME, LANG): no secret of the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gateway.config.tools import SandboxLimits
from gateway.toolhost.netns import NetworkSetupFailed, attach_network, child_pid
from gateway.toolhost.reach import grant_traverse
from gateway.toolhost.workspace import INSIDE, Mount, usage_bytes

#: the uid and gid inside the sandbox's user namespace
INSIDE_UID = 1000
MIB = 1024 * 1024
#: seconds a killed sandbox gets to be reaped before bwrap's group is killed too
STOP_WAIT = 5.0
#: the sandbox's private /tmp (a tmpfs inside its own mount namespace)
TMP = "/tmp"  # noqa: S108
#: the environment of every sandboxed command: nothing inherited
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": INSIDE, "LANG": "C.UTF-8",
       "USER": "sandbox", "TMPDIR": TMP}
_ETC = {
    "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
              f"sandbox:x:{INSIDE_UID}:{INSIDE_UID}:sandbox:{INSIDE}:/bin/sh\n"
              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": f"root:x:0:\nsandbox:x:{INSIDE_UID}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    "resolv.conf": "nameserver 10.0.2.3\n",  # slirp4netns' DNS forwarder
}
#: host /etc entries a shell and TLS need, none of them a secret
_ETC_FROM_HOST = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl",
                  "ca-certificates", "localtime", "mime.types")


@dataclass(frozen=True)
class SandboxSpec:
    """Where and how one group's command runs."""

    workspace: Path
    limits: SandboxLimits
    network: bool = False
    mounts: tuple[Mount, ...] = ()


@dataclass
class RunResult:
    """What one command did. ``exit_code`` is None when it was stopped (timeout or
    output cap); a negative code is the signal that ended it."""

    exit_code: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    truncated: bool = False
    #: the workspace was over its quota before the command (it ran unable to write)
    read_only: bool = False
    workspace_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SandboxUnavailable(RuntimeError):
    """bubblewrap or user namespaces are missing; the message says which."""


class Sandbox:
    """Runs commands under bwrap. ``unavailable()`` says why it cannot (None: it can)."""

    def __init__(self, *, host_uid: int = 59999) -> None:
        self.as_root = os.geteuid() == 0
        #: the uid bwrap runs as outside, which workspaces must belong to (None: this
        #: process's own; workspaces are left as they are)
        self.host_uid = host_uid if self.as_root else None
        self._etc = Path(tempfile.mkdtemp(prefix="pnc-sandbox-etc-"))
        self._etc.chmod(0o755)
        for name, text in _ETC.items():
            (self._etc / name).write_text(text, encoding="utf-8")
            (self._etc / name).chmod(0o644)
        self._reason: str | None = None
        self._probed = False

    def close(self) -> None:
        shutil.rmtree(self._etc, ignore_errors=True)

    def unavailable(self) -> str | None:
        """One line saying why sandboxed tools are off here, or None when they work.
        Probed once (a real ``true`` in a sandbox); never raises."""
        if not self._probed:
            # its own thread (and event loop): callable from inside a running loop too
            found: list[str | None] = []
            probe = threading.Thread(target=lambda: found.append(self._probe()),
                                     name="sandbox probe")
            probe.start()
            probe.join()
            self._reason, self._probed = found[0] if found else "sandbox: probe failed", True
        return self._reason

    def _probe(self) -> str | None:
        if not sys.platform.startswith("linux"):
            return f"sandbox: needs Linux user namespaces (this is {sys.platform})"
        if shutil.which("bwrap") is None:
            return "sandbox: bubblewrap is not installed (apt-get install bubblewrap)"
        with tempfile.TemporaryDirectory() as ws:
            os.chmod(ws, 0o777)  # noqa: S103 (an empty probe directory)
            spec = SandboxSpec(Path(ws), SandboxLimits(timeout=10))
            try:
                result = asyncio.run(self.run(spec, ["true"], probe=True))
            except (OSError, SandboxUnavailable) as err:
                return f"sandbox: bwrap could not start: {err}"
        if result.exit_code != 0:
            why = result.stderr.decode(errors="replace").strip().splitlines()
            return ("sandbox: bwrap failed (user namespaces disabled?): "
                    f"{why[-1] if why else f'exit {result.exit_code}'}")
        return None

    def _bwrap(self, spec: SandboxSpec, ws_fd: int, mount_fds: list[int],
               block_fd: int | None, info_fd: int | None) -> list[str]:
        args = ["bwrap", "--unshare-user", "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID),
                # the command is the namespace's pid 1: bwrap reaps it, so no zombie is
                # left counting against the process limit, and its end ends them all
                "--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--unshare-net", "--die-with-parent", "--new-session",
                "--hostname", "sandbox", "--clearenv"]
        for key, value in ENV.items():
            args += ["--setenv", key, value]
        args += ["--ro-bind", "/usr", "/usr"]
        for link in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / link
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{link}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{link}"]
        args += ["--dir", "/etc"]
        for name in _ETC:
            args += ["--ro-bind", str(self._etc / name), f"/etc/{name}"]
        for name in _ETC_FROM_HOST:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev",
                 "--size", str(spec.limits.tmp_mb * MIB), "--tmpfs", TMP,
                 "--bind-fd", str(ws_fd), INSIDE]
        for fd, mount in zip(mount_fds, spec.mounts, strict=True):
            args += ["--ro-bind-fd", str(fd), mount.target]
        # bwrap's root is a tmpfs without a size: read-only, so only /tmp (sized) and the
        # workspace (under quota) take writes
        args += ["--remount-ro", "/", "--chdir", INSIDE, "--cap-drop", "ALL"]
        if info_fd is not None:
            args += ["--info-fd", str(info_fd)]
        if block_fd is not None:
            args += ["--block-fd", str(block_fd)]
        return args

    def _prlimit(self, limits: SandboxLimits, *, read_only: bool) -> list[str]:
        fsize = 0 if read_only else limits.file_mb * MIB
        return ["prlimit", f"--cpu={limits.cpu_seconds}", f"--as={limits.memory_mb * MIB}",
                f"--nproc={self._nproc(limits.processes)}", f"--fsize={fsize}",
                "--core=0", "--"]

    def _nproc(self, limit: int) -> int:
        # RLIMIT_NPROC counts every process of the real uid; as an ordinary user (not
        # root) that is the user's own processes too, so the sandbox gets ``limit`` more
        if self.as_root:
            return limit
        mine = sum(1 for p in Path("/proc").iterdir()
                   if p.name.isdigit() and _owner(p) == os.getuid())
        return mine + limit

    async def run(self, spec: SandboxSpec, argv: Sequence[str], *, stdin: bytes = b"",
                  timeout: float | None = None, probe: bool = False) -> RunResult:
        """Run ``argv`` in the group's sandbox and wait (at most ``timeout`` seconds,
        default the limits' own). Raises ``SandboxUnavailable`` when it is."""
        if not probe and (reason := self.unavailable()):
            raise SandboxUnavailable(reason)
        limits = spec.limits
        wall = min(timeout or limits.timeout, limits.timeout)
        if self.host_uid is not None:
            for mount in spec.mounts:  # bwrap resolves bind sources by path, as that uid
                grant_traverse(mount.source, self.host_uid)
        before = usage_bytes(spec.workspace)
        read_only = before > limits.workspace_mb * MIB
        fds: list[int] = []
        block_r = block_w = None
        try:
            ws_fd = _open_dir(spec.workspace, fds)
            mount_fds = [_open_dir(m.source, fds) for m in spec.mounts]
            info_r, info_w = _pipe(fds)
            if spec.network:
                block_r, block_w = _pipe(fds)
            cmd = [*self._prlimit(limits, read_only=read_only),
                   *self._bwrap(spec, ws_fd, mount_fds, block_r, info_w), "--", *argv]
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"},
                pass_fds=[fd for fd in (ws_fd, *mount_fds, block_r, info_w) if fd is not None],
                start_new_session=True,
                user=self.host_uid, group=self.host_uid,
                extra_groups=[] if self.host_uid is not None else None)
        finally:
            for fd in fds:
                if fd not in (info_r, block_w):
                    os.close(fd)
        result = RunResult(exit_code=None, read_only=read_only)
        helper: subprocess.Popen[bytes] | None = None
        init: int | None = None
        try:
            try:
                pid = await child_pid(info_r)
                # a pidfd: the namespace's init is killed without any pid-reuse race
                init = os.pidfd_open(pid)
            except (OSError, NetworkSetupFailed):
                init = None  # bwrap failed before its clone; its exit status says why
            if block_w is not None and init is not None:
                helper = await attach_network(pid, block_w)
            await asyncio.wait_for(self._collect(proc, stdin, limits.output_bytes, result,
                                                 init), wall)
        except TimeoutError:
            result.timed_out = True
            result.notes.append(f"stopped after {wall:.0f}s (the wall-clock limit)")
        finally:
            await _stop(proc, init)
            if helper is not None:
                helper.kill()
                helper.wait()
            for ours in (info_r, block_w, init):
                if ours is not None:
                    with contextlib.suppress(OSError):
                        os.close(ours)
        if result.exit_code is not None and result.exit_code < 0 and \
                -result.exit_code == signal.SIGXFSZ:
            result.notes.append("a file reached the size limit")
        result.workspace_bytes = usage_bytes(spec.workspace)
        if result.workspace_bytes > limits.workspace_mb * MIB:
            result.notes.append(f"the workspace is over its quota ({limits.workspace_mb} "
                                "MiB): files can be removed, nothing can be written")
        return result

    async def _collect(self, proc: asyncio.subprocess.Process, stdin: bytes, cap: int,
                       result: RunResult, init: int | None) -> None:
        assert proc.stdin and proc.stdout and proc.stderr
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if stdin:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()
        def over_cap() -> None:  # the other stream may never end: stop the command now
            _signal(proc, init)

        out, err = await asyncio.gather(_capped(proc.stdout, cap, over_cap),
                                        _capped(proc.stderr, cap, over_cap))
        (result.stdout, cut_out), (result.stderr, cut_err) = out, err
        if cut_out or cut_err:
            result.truncated = True
            result.notes.append(f"output cut at {cap} bytes; the command was stopped")
            await proc.wait()
            return
        result.exit_code = await proc.wait()


async def _capped(stream: asyncio.StreamReader, cap: int, over: Callable[[], None]
                  ) -> tuple[bytes, bool]:
    """At most ``cap`` bytes of ``stream``, and whether it had more (then ``over()`` was
    called, and the rest read to its end and dropped)."""
    data = bytearray()
    while chunk := await stream.read(65536):
        if len(data) <= cap:
            data += chunk
            if len(data) > cap:
                over()
    return bytes(data[:cap]), len(data) > cap


async def _stop(proc: asyncio.subprocess.Process, init: int | None) -> None:
    """Kill the sandbox's pid-namespace init (its pidfd): the kernel kills every process
    in the namespace, and the init's exit completes only once they are all gone; bwrap,
    its parent, then exits. bwrap's process group is killed too, in case it never got
    to the clone (its init would die with it anyway: ``--die-with-parent``)."""
    _signal(proc, init, group=False)
    if init is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), STOP_WAIT)
    _signal(proc, None)  # bwrap's process group
    # to the pipes' end (every writer is dead), so the transport closes with the loop
    with contextlib.suppress(OSError, ValueError):
        await proc.communicate()



def _signal(proc: asyncio.subprocess.Process, init: int | None, *, group: bool = True
            ) -> None:
    """SIGKILL the namespace's init (by pidfd), else (or also) bwrap's process group."""
    if init is not None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(init, signal.SIGKILL)
    if group or init is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _open_dir(path: Path, fds: list[int]) -> int:
    # O_NOFOLLOW: a workspace (or a resolved mount) swapped for a symlink is refused
    fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    fds.append(fd)
    return fd


def _pipe(fds: list[int]) -> tuple[int, int]:
    r, w = os.pipe()
    fds += [r, w]
    return r, w


def _owner(p: Path) -> int | None:
    try:
        return p.stat().st_uid
    except OSError:
        return None
