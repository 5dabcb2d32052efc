"""The wrapped mlx-vlm worker's own Unix socket: the front's body cap and body deadline around its FastAPI app.

Raw HTTP to a real mlx-vlm worker on the tiny Qwen2-VL model, as a broken or hostile client past the front
would send it: a body over the cap is 413 before it is read, a body that trickles in is 408 at its deadline,
and the worker still answers a chat after both. The second wall (``media_wall``): a media part naming a URL or a
path, on chat completions or Responses, is 400 from the worker itself while a loopback listener sees no
connection and a 0600 file of ``nobody``'s is never opened. Each whole request says ``Connection: close``
(``closing_http``): its answer is read to the connection's end, which keep-alive would hold open for seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.api_errors import Code
from mlx_agent.wire import MAX_BODY_BYTES
from tests.e2e.closing_http import closing_post
from tests.e2e.worker_socket_support import (
    CHAT_HEAD,
    SocketWorker,
    closed_by_peer,
    is_api_error,
    read_answer,
    socket_worker,
)
from tests.media_traps import Listener, Traps

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def worker(tiny_vlm: Path) -> Iterator[SocketWorker]:
    """Start one wrapped mlx-vlm worker on its socket with a 3 s body deadline."""
    with socket_worker(tiny_vlm, {"body_timeout": 3.0}, runtime="mlx-vlm") as started:
        yield started


def chat_served(worker: SocketWorker, model: Path) -> bool:
    """Say whether a short chat is answered 200 (mlx_vlm serves its model under its path)."""
    body = {"model": str(model), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return worker.exchange(closing_post(body, "/v1/chat/completions")).status == 200


def test_a_body_over_the_cap_is_413_before_it_is_read_by_the_vlm_worker(worker: SocketWorker, tiny_vlm: Path) -> None:
    """A Content-Length past the front's cap is 413 body_too_large, and the worker serves on."""
    with worker.connect() as sock:
        head = CHAT_HEAD + b"Connection: close\r\n"  # the answer's end is the connection's
        sock.sendall(head + f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode() + b"{" + b" " * (1 << 20))
        answer = read_answer(sock)
    assert answer.status == 413 and is_api_error(answer.json(), Code.BODY_TOO_LARGE), answer
    assert chat_served(worker, tiny_vlm)


def test_a_body_sent_a_byte_at_a_time_is_408_at_its_deadline_by_the_vlm_worker(
    worker: SocketWorker, tiny_vlm: Path
) -> None:
    """Complete headers, then a body one byte at a time: 408 body_timeout at the deadline, then the close."""
    with worker.connect() as sock:
        sock.sendall(CHAT_HEAD + b"Content-Length: 100000\r\n\r\n")
        received = closed_by_peer(sock, b'{"messages": ' + b" " * 2000)
    assert received is not None, "the worker never answered the slow body"
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.split()[1] == b"408" and is_api_error(json.loads(body), Code.BODY_TIMEOUT), received
    assert chat_served(worker, tiny_vlm)


def worker_parts(listener: Listener, secret: Path) -> dict[str, tuple[Any, str]]:
    """Return each body part that names a URL or a path, with the code the worker must answer."""
    return {
        "video_url": ({"type": "video_url", "video_url": {"url": listener.url("/v.mp4")}}, Code.MEDIA_UNSUPPORTED),
        "video_path": ({"type": "video", "video": str(secret)}, Code.MEDIA_UNSUPPORTED),
        "input_video_file": ({"type": "input_video", "video_url": f"file://{secret}"}, Code.MEDIA_UNSUPPORTED),
        "input_audio_url": (
            {"type": "input_audio", "input_audio": {"data": listener.url("/a.wav"), "format": "wav"}},
            Code.MEDIA_UNSUPPORTED,
        ),
        "input_audio_path": ({"type": "input_audio", "input_audio": {"data": str(secret)}}, Code.MEDIA_UNSUPPORTED),
        "image_url_http": ({"type": "image_url", "image_url": {"url": listener.url("/i.png")}}, Code.IMAGE_INVALID),
        "image_url_file": ({"type": "image_url", "image_url": {"url": f"file://{secret}"}}, Code.IMAGE_INVALID),
        "input_image_path": ({"type": "input_image", "image_url": str(secret)}, Code.IMAGE_INVALID),
    }


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
@pytest.mark.parametrize(
    "case",
    [
        "video_url",
        "video_path",
        "input_video_file",
        "input_audio_url",
        "input_audio_path",
        "image_url_http",
        "image_url_file",
        "input_image_path",
    ],
)
def test_the_vlm_worker_itself_refuses_a_part_naming_a_url_or_a_path(
    worker: SocketWorker, tiny_vlm: Path, traps: Traps, case: str, path: str
) -> None:
    """Straight to the socket, past the front: 400 with its code; no connection to the listener, no open of the file."""
    listener, secret = traps.listener, traps.secret
    part, code = worker_parts(listener, secret.path)[case]
    connections = listener.connections
    content = [{"type": "text", "text": "look"}, part]
    body: dict[str, Any] = {"model": str(tiny_vlm), "max_tokens": 2}
    if path == "/v1/chat/completions":
        body["messages"] = [{"role": "user", "content": content}]
    else:
        body["input"] = [{"role": "user", "content": content}]
    answer = worker.exchange(closing_post(body, path))
    assert answer.status == 400 and is_api_error(answer.json(), code), answer
    assert listener.connections == connections and not secret.touched()
    assert chat_served(worker, tiny_vlm)
