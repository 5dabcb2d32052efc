"""The files mlx.launch's ring script makes on each host, which it leaves behind.

For every rank the script writes a pid file and a hosts file with ``mktemp`` (``tmp.XXXXXXXXXX`` in the temp
folder). Its kill script removes the pid file, but only for a rank mlx.launch stops; nothing removes the
hosts file. Our ranks remove their hosts file once the ring has formed (``handshake.verify_group``), and our
launcher a local rank's pid file once that rank has exited by itself (``launcher.rank_process_class``).
"""

from __future__ import annotations

import contextlib
import os
import stat


def remove_mktemp_file(path: str | None) -> None:
    """Remove ``path`` if it is a regular file of this user with mktemp's name: never a file a person named."""
    if not path or not os.path.basename(path).startswith("tmp."):
        return
    with contextlib.suppress(OSError):  # already gone, or not ours to remove: it only ever costs a small file
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid():
            os.unlink(path)
