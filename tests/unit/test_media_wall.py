"""The mlx-vlm worker's media wall: which bodies it refuses, how it answers, and its seam on mlx_vlm's readers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import SeamChanged
from mlx_agent.runtime.entries import mlx_vlm_server
from mlx_agent.runtime.entries.media_wall import MEDIA_TYPES, MediaWall, check_media_types, refusal
from tests.unit.image_data import PNG_URL


def chat(*parts: Any) -> dict[str, Any]:
    """Return a chat body with one user message of ``parts``."""
    return {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, *parts]}]}


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/i.png"}},
        {"type": "image_url", "image_url": "file:///root/secret.png"},
        {"type": "input_image", "image_url": "/root/secret.png"},
        {"type": "image", "image": "secret.png"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/i.png"}},
        {"type": "image_url", "image_url": {"url": PNG_URL, "extra": "/etc/passwd"}},
    ],
)
@pytest.mark.fast
def test_an_image_part_naming_anything_but_data_is_refused(part: dict[str, Any]) -> None:
    """An image part with any string other than a data:image URL (type and detail aside) is image_invalid."""
    assert refusal(chat(part)) is not None and refusal(chat(part))[0] == "image_invalid"  # type: ignore[index]


@pytest.mark.fast
@pytest.mark.parametrize("kind", MEDIA_TYPES)
def test_every_video_audio_or_file_part_is_refused_wherever_it_sits(kind: str) -> None:
    """A media part is refused in a message, in a Responses input and deep in any other field."""
    part = {"type": kind, kind: "data:video/mp4;base64,AAAA"}
    for doc in (chat(part), {"input": [{"role": "user", "content": [part]}]}, {"a": [[{"b": part}]]}):
        assert refusal(doc) is not None and refusal(doc)[0] == "media_unsupported"  # type: ignore[index]


@pytest.mark.fast
def test_data_images_and_text_pass() -> None:
    """Data URL images (object or string, with detail) and text pass the wall."""
    parts = [
        {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "high"}},
        {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
    ]
    assert refusal(chat(*parts)) is None
    assert refusal({"messages": [{"role": "user", "content": "http://example.com/a.png"}]}) is None


def serve_through_wall(body: bytes) -> tuple[list[MutableMapping[str, Any]], bytes | None]:
    """Send ``body`` in two pieces through the wall to an app; return what was answered and what the app read."""
    seen: list[bytes] = []
    sent: list[MutableMapping[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        seen.append(b"".join(parts))
        await send({"type": "http.response.start", "status": 200, "headers": []})

    pieces: list[MutableMapping[str, Any]] = [
        {"type": "http.request", "body": body[:5], "more_body": True},
        {"type": "http.request", "body": body[5:]},
    ]

    async def receive() -> MutableMapping[str, Any]:
        return pieces.pop(0)

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(MediaWall(app)({"type": "http"}, receive, send))
    return sent, seen[0] if seen else None


@pytest.mark.fast
def test_the_wall_answers_400_before_mlx_vlm_reads_the_body() -> None:
    """A refused body never reaches the app; the answer is a 400 OpenAI error object."""
    sent, seen = serve_through_wall(json.dumps(chat({"type": "video", "video": "/root/x.mp4"})).encode())
    assert seen is None and sent[0]["status"] == 400
    assert json.loads(sent[1]["body"])["error"]["code"] == "media_unsupported"


@pytest.mark.fast
def test_a_body_that_passes_reaches_the_app_whole() -> None:
    """A body that passes reaches the app as it was sent, however it arrived."""
    body = json.dumps(chat({"type": "image_url", "image_url": PNG_URL})).encode()
    sent, seen = serve_through_wall(body)
    assert seen == body and sent[0]["status"] == 200


def test_installed_mlx_vlm_reads_no_media_type_the_wall_does_not_know() -> None:
    """Every part type mlx_vlm's request readers compare against is one the wall checks."""
    check_media_types()


def test_a_new_media_type_upstream_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If mlx_vlm starts reading a media part type the wall does not know, the check names it."""
    from mlx_vlm.server import openai

    def _extract_video_reference(item: dict[str, Any]) -> Any:
        return item.get("file_url") if item.get("type") == "file_url" else None

    monkeypatch.setattr(openai, "_extract_video_reference", _extract_video_reference)
    with pytest.raises(SeamChanged, match="file_url"):
        check_media_types()


def test_a_media_seam_that_changes_stops_the_worker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A reader the wall's seam names gone: serve() exits 2 naming it, before it binds its socket."""
    from mlx_vlm.server import openai

    monkeypatch.delattr(openai, "_decode_input_audio_data")
    socket_path = tmp_path / "w.sock"
    assert mlx_vlm_server.serve(["--model", "m", "--mlx-agent-socket", str(socket_path)]) == 2
    assert "_decode_input_audio_data" in capsys.readouterr().err and not socket_path.exists()
