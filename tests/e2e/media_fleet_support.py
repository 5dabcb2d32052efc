"""One front over the real media workers of the tiny speech, recogniser and image models, and raw HTTP to them.

The fleet is tests/integration/test_media_front.py's (``media_support.media_config``: one front, models loaded on
request), with the stand-in's argv swapped for the wrapped ``mlx-vlm-speech``, ``mlx-vlm-transcription`` and
``mlx-vlm-image`` entries; the chat model keeps the stand-in. It is the session's ``media_fleet`` (tests/e2e/
conftest.py): the front's tests read it through the front, and the worker-socket tests talk to the very workers
it started, on the Unix sockets it gave them (``worker_socket``), as the front itself does.
"""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_agent.wire import SOCKET_FLAG
from tests.conftest import free_port
from tests.contract_support import contract
from tests.e2e.closing_http import closing_post
from tests.e2e.worker_socket_support import Answer, read_answer
from tests.gateway_support import Gateway, Reply, serving
from tests.media_support import FORM_TYPE, form_body, media_config, standin_argv, wav_bytes

RUNTIMES = {"speech": "mlx-vlm-speech", "transcription": "mlx-vlm-transcription", "image_generation": "mlx-vlm-image"}
SERVED = {"speech": "org/speech", "transcription": "org/stt", "image_generation": "org/image"}  # media_support.MODELS


@contextlib.contextmanager
def media_front(directory: Path, models: dict[str, Path]) -> Iterator[Gateway]:
    """Run a front whose models of the kinds in ``models`` (kind: path) are the real workers of those models."""
    standin = standin_argv(directory)

    def argv_of(kind: str) -> list[str]:
        if kind not in models:
            return standin(kind)
        entry = [sys.executable, "-m", "mlx_agent.runtime", RUNTIMES[kind], "--model", str(models[kind])]
        return [*entry, SOCKET_FLAG, "{socket}", *contract()]

    config = media_config(directory, free_port(), argv_of)
    for model in config["models"]:
        kind = model["worker"]["kind"]
        if kind in models:
            model["worker"]["model_name"] = str(models[kind])  # the recipes' model_field: the worker names its path
            model["worker"]["ready_timeout"] = 300
    with serving(directory, config) as gateway:
        yield gateway


@dataclass
class WorkerSocket:
    """A worker the front started, reached on the Unix socket the front gave it (raw HTTP, one request a connection)."""

    path: str
    pid: int

    def exchange(self, raw: bytes, timeout: float = 120.0) -> Answer:
        """Send ``raw`` (a whole request), read the answer to the end of the connection and parse it."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(self.path)
            sock.sendall(raw)
            return read_answer(sock)

    def post(self, body: Any, path: str) -> Answer:
        """POST ``body`` as JSON to ``path``, asking the worker to close the connection after its answer."""
        return self.exchange(closing_post(body, path))


def loaded_model(gateway: Gateway, kind: str) -> dict[str, Any]:
    """Return the front's state of its model of ``kind``."""
    (model,) = [m for m in gateway.state()["models"] if m["name"] == SERVED[kind]]
    found: dict[str, Any] = model
    return found


def worker_socket(gateway: Gateway, kind: str) -> WorkerSocket:
    """Return the Unix socket of the front's loaded worker of ``kind`` (the address its state reports)."""
    model = loaded_model(gateway, kind)
    assert model["model_state"] == "loaded" and model["worker"]["transport"] == "unix", model
    return WorkerSocket(model["worker"]["address"], model["worker"]["pid"])


def loaded_worker(gateway: Gateway, kind: str) -> WorkerSocket:
    """Return the socket of the front's worker of ``kind``, loaded first by its kind's smallest request if need be."""
    if loaded_model(gateway, kind)["model_state"] != "loaded":  # a model loads on its first request
        reply = smallest_request(gateway, kind)
        assert reply.status == 200, reply.body[:300]
    return worker_socket(gateway, kind)


def smallest_request(gateway: Gateway, kind: str) -> Reply:
    """Send the front a short request for its model of ``kind``: eight tokens of speech, half a second, 16x16."""
    if kind == "speech":
        return gateway.request("POST", "/v1/audio/speech", {"model": SERVED[kind], "input": "hi", "max_tokens": 8})
    if kind == "transcription":
        body = form_body({"model": SERVED[kind]}, [("file", "a.wav", wav_bytes(0.5))])
        return gateway.request("POST", "/v1/audio/transcriptions", raw=body, headers={"Content-Type": FORM_TYPE})
    image = {"model": SERVED[kind], "prompt": "x", "size": "16x16", "steps": 1}
    return gateway.request("POST", "/v1/images/generations", image)
