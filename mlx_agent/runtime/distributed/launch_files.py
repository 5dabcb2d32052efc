"""The files mlx.launch's ring script makes on each host, which it leaves behind.

For every rank the script writes a pid file and a hosts file with ``mktemp`` (``tmp.XXXXXXXXXX`` in the temp
folder). Its kill script removes the pid file, but only for a rank mlx.launch stops; nothing removes the
hosts file. Our launcher writes a local rank's files itself (``write_launch_files``) and removes them, with its
pid file, once that rank has ended, however it ended (a refusal, a stop, a signal): ``launcher.rank_process_class``.
A remote rank's files are on its own host: our ranks remove their hosts file once the ring has formed
(``handshake.verify_group``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path


def remove_mktemp_file(path: str | None) -> None:
    """Remove ``path`` if it is a regular file of this user with mktemp's name: never a file a person named."""
    if not path or not os.path.basename(path).startswith("tmp."):
        return
    with contextlib.suppress(OSError):  # already gone, or not ours to remove: it only ever costs a small file
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid():
            os.unlink(path)


def write_launch_files(files: Mapping[str, str]) -> dict[str, str]:
    """Write each of a rank's files (its environment variable's name: the content) as mlx.launch's script would.

    The same place and name (``mktemp``'s: ``tmp.*`` in the temp folder, this user's only) and content (``echo``'s:
    a newline added); returns the variable's name: the file's path, for the rank's environment.
    """
    written: dict[str, str] = {}
    try:
        for name, content in files.items():
            descriptor, path = tempfile.mkstemp(prefix="tmp.")
            os.close(descriptor)  # closed at once, so nothing can leak it; mkstemp's mode (0600) stays
            written[name] = path
            Path(path).write_text(content + "\n")
    except BaseException:
        remove_launch_files(written.values())
        raise
    return written


def remove_launch_files(paths: Iterable[str]) -> None:
    """Remove the files ``write_launch_files`` wrote (any already gone: the rank removed its hosts file)."""
    for path in paths:
        remove_mktemp_file(path)
