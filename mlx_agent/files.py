"""File helpers every process shares (standard library only): hashing, rechecking, atomic JSON, log tails, times.

* ``sha256_file`` reads in 4 MiB chunks into one reused buffer.
* ``changed_files`` rechecks files a plan bound by content (adapter files, a training receipt): the one
  place that decides whether a reviewed file is still what was reviewed; ``changed_links`` whether the links
  to one (a venv's interpreter) still lead there.
* ``private_dir`` / ``check_private_dir`` / ``open_private`` keep state to the user's own directories and
  files: created 0700/0600 whatever the umask, refused (``state_dir_unsafe``) when another user owns them,
  group or others can write them, or they are symbolic links (opened with ``O_NOFOLLOW``); ``closed_dir``
  also makes an existing one 0700 without following a link.
* ``write_json_atomic`` writes a private file readers see whole or not at all.
* ``log_tail`` reads the last lines of a log leniently.
* ``utc_now`` / ``utc_iso`` are the one timestamp format: ISO 8601, UTC, milliseconds, ``Z``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any

CHUNK = 4 * 1024 * 1024
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _unsafe(path: Path, why: str) -> Exception:
    from mlx_agent.errors import StateDirUnsafe

    return StateDirUnsafe(
        f"{path} {why}; mlx-agent keeps its state only where you alone can write", details={"path": str(path)}
    )


def check_private_dir(path: Path) -> Path:
    """Refuse an existing state directory that is a link, another user's, or writable by group or others."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    import stat

    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise _unsafe(path, "is not a directory (a link or another file)")
    if st.st_uid != os.getuid():
        raise _unsafe(path, f"belongs to uid {st.st_uid}, not to you (uid {os.getuid()})")
    if st.st_mode & 0o022:
        raise _unsafe(path, f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")
    return path


def private_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents as 0700 directories (whatever the umask); refuse an unsafe one."""
    missing = []
    probe = path
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass  # another process made it first; it is checked below like any existing one
        else:
            os.chmod(directory, 0o700)
    return check_private_dir(path)


def closed_dir(path: Path) -> Path:
    """Return ``private_dir(path)`` made 0700 through a descriptor opened without following a link.

    For a directory only its owner may even enter (a front's socket directory); a link planted there is
    refused before anything is changed, and one swapped in after the check is not followed by the chmod.
    """
    private_dir(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    except OSError as exc:
        raise _unsafe(path, f"cannot be opened as a directory of yours ({exc.strerror or exc})") from None
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def open_private(path: Path, flags: int) -> int:
    """Open a state file without following links; refuse one that is not a regular file of this user's.

    New files are created 0600. Returns the descriptor.
    """
    try:
        fd = os.open(path, flags | NOFOLLOW, 0o600)
    except OSError as exc:
        import errno

        if exc.errno == errno.ELOOP:
            raise _unsafe(path, "is a symbolic link") from None
        raise
    import stat

    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        os.close(fd)
        raise _unsafe(path, "is not a regular file of yours")
    return fd


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    """Return the sha256 hex of a file, read in 4 MiB chunks into one reused buffer; ``progress`` gets each count."""
    import hashlib  # imported here: loading OpenSSL costs ``serve status``, which never hashes, a few ms

    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(max(1, min(CHUNK, os.fstat(fh.fileno()).st_size)))  # small files: small buffer
        view = memoryview(buf)
        while n := fh.readinto(buf):
            digest.update(view[:n])
            if progress is not None:
                progress(n)
    return digest.hexdigest()


def changed_files(checks: Iterable[tuple[Path, str, int]]) -> list[dict[str, Any]]:
    """Return one record per ``(path, sha256, size)`` whose file is gone, a link, or not what was reviewed.

    ``reason`` is ``missing`` (absent, not a regular file, or a symbolic link), ``unreadable``,
    ``size_changed`` or ``content_changed``; the list is empty when every file is unchanged.
    """
    changed: list[dict[str, Any]] = []
    for path, digest, size in checks:
        entry: dict[str, Any] = {"path": str(path), "expected_size": size, "expected_sha256": digest}
        if path.is_symlink() or not path.is_file():
            changed.append({**entry, "reason": "missing"})
            continue
        try:
            actual_size = path.stat().st_size
            if actual_size != size:
                changed.append({**entry, "size": actual_size, "reason": "size_changed"})
                continue
            actual = sha256_file(path)
        except OSError as exc:
            changed.append({**entry, "reason": "unreadable", "error": exc.strerror or str(exc)})
            continue
        if actual != digest:
            changed.append({**entry, "sha256": actual, "reason": "content_changed"})
    return changed


def changed_links(checks: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return one record per check with a ``via`` whose links no longer lead to its ``path`` (``link_changed``).

    ``via`` is the path a worker's argv[0] gives (a venv's ``bin/python``): a link replaced by a script, or
    pointed at another interpreter, is refused even though the bound file itself is unchanged.
    """
    changed: list[dict[str, Any]] = []
    for check in checks:
        via = check.get("via")
        if via is None:
            continue
        target = os.path.realpath(via)
        if target != check["path"]:
            changed.append({"path": via, "expected_target": check["path"], "target": target, "reason": "link_changed"})
    return changed


def temp_name(path: Path) -> Path:
    """Return a fresh temporary name beside ``path``: ``.<name>.<pid>.<12 hex>.tmp`` (``stale_temps`` reads it)."""
    return path.parent / f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp"


def replace_atomically(path: Path, data: bytes, mode: int, owner: tuple[int, int] | None = None) -> None:
    """Replace ``path`` with ``data`` (file mode ``mode``): readers see the old file or the new one, never a half.

    The bytes go to a private temporary file beside it (O_EXCL on a random name, as tempfile.mkstemp does,
    without its import cost), are synced, renamed over ``path``, and the directory is synced too. With
    ``owner`` (uid, gid) the new file is given to them first, as far as this process may (root: always).
    """
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            if owner is not None:
                give(fh.fileno(), owner)
            os.fchmod(fh.fileno(), mode)  # after the owner: a change of owner may clear set-id bits
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def give(fd: int, owner: tuple[int, int]) -> None:
    """Give the open file ``fd`` to ``owner`` (uid, gid) where this process may.

    Root may give a file to anyone; another user only to a group of theirs, so a refused change is left as it
    is: the new file is theirs, as any editor's save would make it.
    """
    st = os.fstat(fd)
    uid = owner[0] if owner[0] != st.st_uid else -1
    gid = owner[1] if owner[1] != st.st_gid else -1
    if uid == -1 and gid == -1:
        return
    try:
        os.fchown(fd, uid, gid)
    except PermissionError:
        if gid != -1 and uid != -1:
            import contextlib

            with contextlib.suppress(PermissionError):
                os.fchown(fd, -1, gid)  # the group alone, where it is one of this user's


def stale_temps(directory: Path) -> list[Path]:
    """Return the temporary files of ``replace_atomically`` in ``directory`` whose writers have died.

    Only names of its own pattern (``temp_name``), regular files of this user's, whose pid is no live process:
    a writer killed between creating and renaming one (a SIGKILL during confirm) leaves it behind.
    """
    import re
    import stat

    pattern = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]+)\.[0-9a-f]{12}\.tmp")
    found: list[Path] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or _alive(int(match["pid"])):
            continue
        try:
            st = os.lstat(directory / name)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
            found.append(directory / name)
    return sorted(found)


def sweep_stale_temps(directory: Path) -> list[Path]:
    """Remove ``stale_temps(directory)`` and return those removed."""
    removed = []
    for path in stale_temps(directory):
        try:
            path.unlink()
        except FileNotFoundError:
            continue  # another sweep took it first
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    """Say whether a process ``pid`` exists (another user's too); pid 0 and the like count as alive."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process, or a pid no process can have: not ours to judge dead
    return True


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` (mode 0600) so readers see the old file or the new one, never a half."""
    private_dir(path.parent)
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    try:
        replace_atomically(path, text.encode("utf-8"), 0o600)
    except OSError as exc:  # a full disk, a read-only file system: an error of ours, never a traceback
        from mlx_agent.errors import StateWriteFailed

        raise StateWriteFailed(
            f"cannot write {path}: {exc.strerror or exc}", details={"path": str(path), "errno": exc.errno}
        ) from exc


def log_tail(log_path: Path, lines: int = 20) -> list[str]:
    """Return the last ``lines`` lines of a log (at most its last 64 KiB), decoded leniently."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


def utc_iso(timestamp: float | None) -> str | None:
    """Return a Unix timestamp as ISO 8601 UTC with milliseconds and ``Z``, or None."""
    if timestamp is None:
        return None
    from datetime import UTC, datetime  # lazily: status calls that print no time need not import it

    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_now() -> str:
    """Return the current time in the one timestamp format."""
    import time

    stamp = utc_iso(time.time())
    assert stamp is not None
    return stamp
