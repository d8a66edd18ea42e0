"""A private Debian dovecot instance for tests: IMAP and LMTP on loopback ports,
passwd-file users, Maildir under its own temporary directory.

``Dovecot.start()`` writes a self-contained config (nothing from /etc/dovecot is read)
and runs ``dovecot -F -c <config>`` in the foreground, so the test owns the process
and ends it. Started once per test run (see ``shared()``): about half a second.
"""

from __future__ import annotations

import atexit
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"
#: how long startup may take before the fixture gives up (turns a hang into an error)
START_TIMEOUT = 20.0
#: test users written at start (each test takes one: a fresh mailbox)
POOL_SIZE = 500


def available() -> bool:
    return Path(DOVECOT).exists()


def should_skip() -> bool:
    """Skip the dovecot tests where dovecot is absent, except in CI (``CI`` set), where
    ``.ci/run`` installs it: there a missing dovecot must fail, not pass silently."""
    return not available() and not os.environ.get("CI")


SKIP_REASON = "needs Debian's dovecot: apt-get install dovecot-imapd dovecot-lmtpd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mail_owner() -> pwd.struct_passwd:
    """Dovecot refuses to run mail processes as root; tests as root use ``nobody``."""
    if os.getuid() == 0:
        return pwd.getpwnam("nobody")
    return pwd.getpwuid(os.getuid())


class Dovecot:
    """One running instance with ``POOL_SIZE`` users; ``claim_user`` hands them out."""

    def __init__(self, root: Path | None = None, *, introspection_url: str | None = None) -> None:
        self.root = root or Path(tempfile.mkdtemp(prefix="pnc-dovecot-"))
        self.root.chmod(0o755)
        self.imap_port = free_port()
        self.lmtp_port = free_port()
        self.passwd = self.root / "passwd"
        self.mail = self.root / "mail"
        self.log = self.root / "dovecot.log"
        #: with an RFC 7662 introspection endpoint, XOAUTH2/OAUTHBEARER logins are
        #: checked against it (dovecot's oauth2 passdb) besides passwd-file passwords
        self.introspection_url = introspection_url
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._pool = [
            (f"user{i}@pool.test", "pw-" + secrets.token_hex(12)) for i in range(POOL_SIZE)
        ]

    def config(self) -> str:
        owner = _mail_owner()
        me = pwd.getpwuid(os.getuid()).pw_name
        login_user = "dovenull" if os.getuid() == 0 else me
        internal_user = "dovecot" if os.getuid() == 0 else me
        return f"""
base_dir = {self.root}/run
state_dir = {self.root}/state
instance_name = pnc-{self.imap_port}
protocols = imap lmtp
listen = 127.0.0.1
log_path = {self.log}
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login{" xoauth2 oauthbearer" if self.introspection_url else ""}
default_login_user = {login_user}
default_internal_user = {internal_user}
default_internal_group = {pwd.getpwnam(internal_user).pw_name}
first_valid_uid = 1
mail_location = maildir:~/Maildir
mail_uid = {owner.pw_uid}
mail_gid = {owner.pw_gid}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {self.passwd}
  mechanisms = plain login
}}
{self._oauth2_passdb()}
userdb {{
  driver = static
  args = home={self.mail}/%u allow_all_users=yes
}}
namespace inbox {{
  inbox = yes
  separator = /
  mailbox Sent {{
    special_use = \\Sent
    auto = subscribe
  }}
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.imap_port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {self.lmtp_port}
  }}
}}
protocol imap {{
  imap_idle_notify_interval = 1 secs
}}
"""

    def _oauth2_passdb(self) -> str:
        if not self.introspection_url:
            return ""
        conf = self.root / "dovecot-oauth2.conf.ext"
        conf.write_text(
            f"introspection_url = {self.introspection_url}\n"
            "introspection_mode = post\n"
            "username_attribute = username\n"
            "active_attribute = active\n"
            "active_value = true\n",
            encoding="utf-8",
        )
        return (
            "passdb {\n  driver = oauth2\n  mechanisms = xoauth2 oauthbearer\n"
            f"  args = {conf}\n}}"
        )

    def claim_user(self) -> tuple[str, str]:
        """A fresh (login, password) with an empty mailbox, from the pool written at
        start. (A pool because dovecot re-reads passwd-file at most once a second, so
        users added while it runs may not be seen at once.)"""
        with self._lock:
            if not self._pool:
                raise RuntimeError(f"all {POOL_SIZE} dovecot test users are taken")
            return self._pool.pop(0)

    def start(self) -> None:
        owner = _mail_owner()
        self.mail.mkdir(exist_ok=True)
        os.chown(self.mail, owner.pw_uid, owner.pw_gid)
        self.passwd.write_text(
            "".join(f"{name}:{{PLAIN}}{pw}::::::\n" for name, pw in self._pool), encoding="utf-8"
        )
        conf = self.root / "dovecot.conf"
        conf.write_text(self.config(), encoding="utf-8")
        self._proc = subprocess.Popen(
            [DOVECOT, "-F", "-c", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode() if self._proc.stderr else ""
                raise RuntimeError(f"dovecot exited: {err}{self.log_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.imap_port), timeout=1) as s:
                    if s.recv(100).startswith(b"* OK"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"dovecot did not start in {START_TIMEOUT}s: {self.log_text()}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()


    def close(self) -> None:
        """Stop, then remove the directory (config, Maildirs, log)."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


_SHARED: Dovecot | None = None


def shared() -> Dovecot:
    """The test run's one instance, started on first use and stopped at exit."""
    global _SHARED
    if _SHARED is None:
        instance = Dovecot()
        instance.start()
        atexit.register(instance.close)
        _SHARED = instance
    return _SHARED
