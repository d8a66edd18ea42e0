"""Let the sandbox's host uid walk down to a workspace, and nothing more.

bubblewrap runs as the sandbox uid (``[tools] sandbox_uid``) when the tool host is root,
so that the kernel's process limit binds; it resolves every bind source by its path, as
that uid. An operator's data dir is often private (``0700``), which would stop it. Rather
than opening such a directory to every local user (``o+x``), each directory on the way
that the uid cannot traverse gets one POSIX ACL entry: that uid, ``--x`` (walk through,
not list, not read). The mask is the group bits plus ``x``, so no group gains anything.
Nothing else runs as the sandbox uid, and sandboxed commands see none of the host's
directories, so the entry opens nothing to anyone else.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import struct
from pathlib import Path

log = logging.getLogger(__name__)

_XATTR = "system.posix_acl_access"
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_UNDEFINED_ID = 0xFFFFFFFF
_ENTRY = struct.Struct("<HHI")


class Unreachable(OSError):
    """A directory on the way cannot be opened to the sandbox uid (no ACL support)."""


def _entries(path: Path, mode: int) -> list[tuple[int, int, int]]:
    try:
        raw = os.getxattr(path, _XATTR)
    except OSError as err:
        if err.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
        return [(_USER_OBJ, (mode >> 6) & 7, _UNDEFINED_ID),
                (_GROUP_OBJ, (mode >> 3) & 7, _UNDEFINED_ID),
                (_OTHER, mode & 7, _UNDEFINED_ID)]
    return [_ENTRY.unpack_from(raw, 4 + i * _ENTRY.size)
            for i in range((len(raw) - 4) // _ENTRY.size)]


def _traversable(st: os.stat_result, entries: list[tuple[int, int, int]], uid: int) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    mine = [perm for tag, perm, who in entries if tag == _USER and who == uid]
    if mine:
        mask = [perm for tag, perm, _ in entries if tag == _MASK]
        return bool(mine[0] & (mask[0] if mask else 7) & 1)
    return bool(st.st_mode & stat.S_IXOTH)


def grant_traverse(target: Path, uid: int) -> None:
    """Make every directory above ``target`` traversable by ``uid`` (one ACL entry on
    those that are not). Raises ``Unreachable`` naming the directory when one refuses."""
    for directory in reversed(target.resolve().parents):
        st = directory.stat()
        entries = _entries(directory, st.st_mode)
        if _traversable(st, entries, uid):
            continue
        kept = [e for e in entries if not (e[0] == _USER and e[2] == uid) and e[0] != _MASK]
        group = max((p for t, p, _ in kept if t in (_GROUP_OBJ, _GROUP)), default=0)
        # only the named entries need a mask; its value never adds to a group entry
        kept += [(_USER, 1, uid), (_MASK, group | 1, _UNDEFINED_ID)]
        kept.sort(key=lambda e: (e[0], e[2]))
        raw = struct.pack("<I", _VERSION) + b"".join(_ENTRY.pack(*e) for e in kept)
        try:
            os.setxattr(directory, _XATTR, raw)
        except OSError as err:
            raise Unreachable(err.errno, f"cannot let the sandbox uid {uid} walk through "
                              f"{directory} ({os.strerror(err.errno or 0)}): make it "
                              "traversable (chmod o+x) or run the tool host as an ordinary "
                              "user") from None
        log.info("sandbox: %s is now traversable by uid %d (one ACL entry, --x)",
                 directory, uid)
