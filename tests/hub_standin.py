"""A stand-in for the Hugging Face Hub's HTTP API on loopback, for ``mlx-agent pull`` (``HF_ENDPOINT`` points here).

It answers the two requests a pull makes, as the Hub does: ``GET /api/models/ORG/NAME/revision/REV?blobs=true``
(the commit a revision names and each file's size, git blob id and, for ``*.safetensors``, LFS sha256) and
``GET /ORG/NAME/resolve/COMMIT/FILE`` (the bytes, honouring ``Range``). A test can move a branch to a new
commit, break a file's transfer off once, hold a transfer halfway until it says go on, or serve bytes that do not
match the listing. Every file request is logged with its ``Range`` header.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


def git_sha1(data: bytes) -> str:
    """Return the git blob id of ``data`` (what the Hub lists as a file's ``blobId`` and ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def commit_of(files: dict[str, bytes]) -> str:
    """Return a 40-hex commit id that depends on the files' contents."""
    digest = hashlib.sha1(usedforsecurity=False)
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    return digest.hexdigest()


@dataclass
class Hub:
    """The stand-in's repos and what it does to transfers; read and changed by the test while it serves."""

    repos: dict[str, dict[str, str]] = field(default_factory=dict)  # repo -> branch -> commit
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit -> name -> bytes
    drop_once: set[str] = field(default_factory=set)  # files whose next transfer breaks off halfway
    wrong_bytes: set[str] = field(default_factory=set)  # files served with their bytes altered
    hold: dict[str, threading.Event] = field(default_factory=dict)  # file -> go-on event, waited on halfway
    halfway: threading.Event = field(default_factory=threading.Event)  # set when a held transfer waits
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (file, Range header) per transfer
    url: str = ""

    def publish(self, repo: str, files: dict[str, bytes], branch: str = "main") -> str:
        """Make ``files`` the commit ``branch`` of ``repo`` names; return the commit."""
        commit = commit_of(files)
        self.commits[commit] = dict(files)
        self.repos.setdefault(repo, {})[branch] = commit
        return commit

    def listing(self, repo: str, revision: str) -> dict[str, object] | None:
        """Return the API's answer for ``repo`` at ``revision``, or None if there is no such repo or revision."""
        branches = self.repos.get(repo)
        if branches is None:
            return None
        commit = branches.get(revision, revision if revision in self.commits else None)
        if commit is None:
            return None
        siblings = []
        for name, data in sorted(self.commits[commit].items()):
            sibling: dict[str, object] = {"rfilename": name, "size": len(data), "blobId": git_sha1(data)}
            if name.endswith(".safetensors"):
                lfs = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
                sibling["lfs"] = lfs
            siblings.append(sibling)
        return {"id": repo, "modelId": repo, "sha": commit, "private": False, "siblings": siblings}


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Keep the test's output quiet."""

        def _json(self, status: int, body: object, error_code: str | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if error_code:
                self.send_header("X-Error-Code", error_code)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            """Answer a listing or a file."""
            path = unquote(urlsplit(self.path).path)
            if path.startswith("/api/models/"):
                repo, _, revision = path.removeprefix("/api/models/").partition("/revision/")
                answer = hub.listing(repo, revision)
                if answer is None:
                    self._json(404, {"error": "Repository not found"}, "RepoNotFound")
                else:
                    self._json(200, answer)
                return
            found = self._resolve(path)
            if found is not None:
                self._file(*found)

        def do_HEAD(self) -> None:
            """Answer huggingface_hub's metadata request for a file: its headers, no body (for the benchmark)."""
            found = self._resolve(unquote(urlsplit(self.path).path))
            if found is not None:
                self._headers(200, *found, len(found[2]))
                self.end_headers()

        def _resolve(self, path: str) -> tuple[str, str, bytes] | None:
            """Return the commit, name and bytes ``/ORG/NAME/resolve/COMMIT/FILE`` names, or answer 404."""
            parts = path.strip("/").split("/")
            commit = parts[3] if len(parts) > 4 else ""
            filename = "/".join(parts[4:])
            files = hub.commits.get(commit, {})
            if parts[2:3] != ["resolve"] or filename not in files or "/".join(parts[:2]) not in hub.repos:
                self._json(404, {"error": "Entry not found"}, "EntryNotFound")  # also /api/agent-harnesses
                return None
            return commit, filename, files[filename]

        def _headers(self, status: int, commit: str, filename: str, data: bytes, length: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(length))
            self.send_header("X-Repo-Commit", commit)
            self.send_header("ETag", f'"{git_sha1(data)}"')
            if filename.endswith(".safetensors"):
                self.send_header("X-Linked-Etag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("X-Linked-Size", str(len(data)))

        def _file(self, commit: str, filename: str, data: bytes) -> None:
            ranged = self.headers.get("Range")
            hub.requests.append((filename, ranged))
            start = int(ranged.removeprefix("bytes=").split("-")[0]) if ranged else 0
            if filename in hub.wrong_bytes:
                data = bytes(b ^ 0xFF for b in data)
            body = data[start:]
            self._headers(206 if ranged else 200, commit, filename, data, len(body))
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            half = len(body) // 2
            self.wfile.write(body[:half])
            self.wfile.flush()
            if filename in hub.drop_once:
                hub.drop_once.discard(filename)
                self.close_connection = True
                return  # the rest never comes: the client sees the connection end early
            go_on = hub.hold.pop(filename, None)
            if go_on is not None:
                hub.halfway.set()
                go_on.wait(60)
            self.wfile.write(body[half:])

    return Handler


@contextmanager
def serve(hub: Hub) -> Iterator[Hub]:
    """Serve ``hub`` on a free loopback port for the block; its ``url`` is the ``HF_ENDPOINT`` to use."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield hub
    finally:
        for event in hub.hold.values():
            event.set()
        server.shutdown()
        server.server_close()


def model_files(model_dir: Path) -> dict[str, bytes]:
    """Return a model directory's top-level files as a repo's files."""
    return {p.name: p.read_bytes() for p in sorted(model_dir.iterdir()) if p.is_file()}
