"""The Hugging Face Hub over HTTP, for ``mlx-agent pull`` only: a repo's listing, and one file fetched and checked.

The listing is huggingface_hub's ``model_info`` (``HF_ENDPOINT``, the token, its errors). The file transfer is
ours, through huggingface_hub's HTTP session: its ``hf_hub_download`` writes each try to a temporary file of its
own and deletes it on any failure, so a download broken off starts over, and it checks no hash. Here the bytes
go to ``blobs/<id>.incomplete`` (the name the cache has always used for a partial blob), a later try resumes it
with a ``Range`` request, and only bytes whose size and hash match the Hub's listing become the blob.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mlx_agent.errors import MlxAgentError, StateWriteFailed
from mlx_agent.errors.commands import DownloadCorrupt, DownloadInterrupted, HubUnreachable, NotEnoughDisk, RepoNotFound

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from mlx_agent.plan.pull_records import PullFile

CHUNK = 1024 * 1024
TIMEOUT_S = 60.0  # per read: a Hub that stops sending for this long is a broken connection


def endpoint() -> str:
    """Return the Hub's address huggingface_hub uses (``HF_ENDPOINT``, else huggingface.co)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def _hub_error(exc: Exception, what: str) -> MlxAgentError:
    """Turn a huggingface_hub or HTTP failure into the pull's refusal."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    status = exc.response.status_code if isinstance(exc, HfHubHTTPError) else None
    if status in (401, 403, 404):
        return RepoNotFound(f"{what}: the Hub answered {status}", details={"status": status})
    if isinstance(exc, OfflineModeIsEnabled):
        return HubUnreachable(f"{what}: HF_HUB_OFFLINE is set, so the Hub is not asked", details={})
    return HubUnreachable(f"{what}: {exc}", details={"endpoint": endpoint(), "status": status})


def listing(repo: str, revision: str) -> tuple[str, list[dict[str, Any]]]:
    """Return the commit ``revision`` names now, and its files (name, size, git blob id, LFS sha256)."""
    import httpx2
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    except (HfHubHTTPError, OfflineModeIsEnabled, httpx2.HTTPError, OSError, ValueError) as exc:
        raise _hub_error(exc, f"listing {repo}@{revision}") from exc
    if not isinstance(info.sha, str) or info.siblings is None:
        raise HubUnreachable(f"the Hub's answer for {repo}@{revision} names no commit or files", details={})
    files = [
        {
            "name": s.rfilename,
            "size": s.lfs.size if s.lfs is not None else s.size,
            "blob_id": s.blob_id,
            "sha256": s.lfs.sha256 if s.lfs is not None else None,
        }
        for s in info.siblings
    ]
    return info.sha, files


def _git_sha1(path: Path) -> str:
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def matches(path: Path, record: PullFile) -> bool:
    """Say whether the file at ``path`` is the Hub's: its size, and its LFS sha256 or else its git blob sha1."""
    from mlx_agent.files import sha256_file

    if path.stat().st_size != record["size"]:
        return False
    if record["sha256"] is not None:
        return sha256_file(path) == record["sha256"]
    return record["git_sha1"] is not None and _git_sha1(path) == record["git_sha1"]


def _stream(url: str, partial: Path, have: int, on_bytes: Callable[[int], None]) -> int:
    """Append the bytes after ``have`` to ``partial``; return how many the file holds then."""
    from huggingface_hub import get_session
    from huggingface_hub.utils._headers import build_hf_headers  # the token's header; not re-exported

    headers = build_hf_headers()
    if have:
        headers["Range"] = f"bytes={have}-"
    with get_session().stream("GET", url, headers=headers, timeout=TIMEOUT_S) as response:
        if response.status_code in (401, 403, 404):
            raise RepoNotFound(f"{url}: the Hub answered {response.status_code}", details={"url": url})
        if response.status_code not in (200, 206):
            raise HubUnreachable(f"{url}: the Hub answered {response.status_code}", details={"url": url})
        if response.status_code == 200 and have:
            on_bytes(-have)  # the Range was ignored: the whole file comes again
            have = 0
        with partial.open("ab" if have else "wb") as out:
            for chunk in response.iter_bytes():  # as they arrive: a chunker would drop bytes held when the link breaks
                out.write(chunk)
                have += len(chunk)
                on_bytes(len(chunk))
    return have


def download(url: str, partial: Path, record: PullFile, on_bytes: Callable[[int], None]) -> None:
    """Fetch ``record`` into ``partial`` (resuming what it holds) and check it; a bad file is deleted.

    ``on_bytes`` hears each chunk's length as it is written (and the length of bytes already held, first).
    """
    import httpx2

    from mlx_agent.disk import is_full

    have = partial.stat().st_size if partial.is_file() else 0
    if have > record["size"]:
        partial.unlink()
        have = 0
    on_bytes(have)
    try:
        if have < record["size"]:
            have = _stream(url, partial, have, on_bytes)
    except httpx2.HTTPError as exc:
        raise DownloadInterrupted(
            f"the connection broke off while fetching {record['name']}: {exc}",
            details={"file": record["name"], "bytes_kept": partial.stat().st_size if partial.is_file() else 0},
        ) from exc
    except OSError as exc:
        if is_full(exc):
            raise NotEnoughDisk(
                f"the disk filled up while fetching {record['name']}",
                details={"file": record["name"], "path": str(partial.parent)},
            ) from exc
        raise StateWriteFailed(f"cannot write {partial}: {exc}", details={"path": str(partial)}) from exc
    if have < record["size"]:
        raise DownloadInterrupted(
            f"the Hub sent {have} of {record['size']} bytes of {record['name']}",
            details={"file": record["name"], "bytes_kept": have},
        )
    if not matches(partial, record):
        partial.unlink(missing_ok=True)
        raise DownloadCorrupt(
            f"{record['name']} does not match the Hub's listing (size {record['size']}, "
            f"{'sha256 ' + str(record['sha256']) if record['sha256'] else 'git blob ' + str(record['git_sha1'])})",
            details={"file": record["name"], "url": url},
        )


def file_url(repo: str, commit: str, name: str) -> str:
    """Return the address of one file of ``repo`` at ``commit`` (``HF_ENDPOINT``'s ``/resolve/``)."""
    from huggingface_hub import hf_hub_url

    return str(hf_hub_url(repo, name, revision=commit))


def place(partial: Path, blob: Path) -> None:
    """Make a checked partial file the blob (readable by all, as huggingface_hub leaves blobs)."""
    os.chmod(partial, 0o644)
    os.replace(partial, blob)
