"""The mlx-vlm worker's own wall: no media part of a request reaches mlx_vlm if it names a URL or a path.

The front already refuses such parts (``gateway/content_parts.py``); this is the second wall, in the worker,
for whatever reaches its socket. mlx_vlm reads media from content parts by their ``type``: it GETs an http(s)
image, video or audio URL (requests, ffmpeg), and opens a path or a ``file://`` URL, so a request could make
the worker fetch from the machine's other services or read a file its client cannot. ``MediaWall`` reads each
request's JSON body before mlx_vlm does (``asgi_limits.BodyLimits`` has already bounded it) and answers 400,
an OpenAI error object, when any object anywhere in it is

* an image part (``IMAGE_TYPES``) holding anything but ``data:image/...`` URLs (``image_invalid``), or
* a video, audio or file part (``MEDIA_TYPES``), whatever it holds (``media_unsupported``): no runtime here
  decodes those from data yet, and mlx_vlm would take a bare string in them as a path.

``check_media_types`` is the seam test run before the worker listens: each part type mlx_vlm's request code
compares against must be one the wall knows, so a new media type upstream stops the worker (``SeamChanged``)
instead of passing the wall unseen.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import MutableMapping
from types import CodeType
from typing import Any

from mlx_agent.api_errors import Code, Family, error_body
from mlx_agent.errors import SeamChanged
from mlx_agent.runtime.serving.asgi_limits import App, Receive, Send, read_whole, replaying

IMAGE_TYPES = ("image_url", "input_image", "image")
MEDIA_TYPES = ("video_url", "input_video", "video", "input_audio", "audio", "audio_url", "input_file", "file")
# The keys of an image part (at any depth) whose strings say how, not what (OpenAI's ``detail``).
IMAGE_SETTINGS = ("type", "detail")
# The functions of mlx_vlm that pick media out of a request by part type (``check_media_types``).
MEDIA_READERS: dict[str, tuple[str, ...]] = {
    "mlx_vlm.server.openai": (
        "chat_completions_endpoint",
        "responses_endpoint",
        "_extract_video_reference",
        "_content_has_effective_input",
        "_decode_input_audio_data",
    ),
    "mlx_vlm.server.anthropic": ("anthropic_messages_endpoint",),
    "mlx_vlm.prompt_utils": ("normalize_image_content", "extract_text_from_content"),
}
# What a part type of a media reader looks like (``input_image``, ``video_url``, ``audio``, ...).
MEDIA_WORD = re.compile(r"^(input_)?(image|video|audio|file)(_url)?$")
REMEDIATION = "Install the mlx-vlm version range mlx-agent pins (see pyproject.toml); a name the wrapper uses changed."


def refusal(doc: object) -> tuple[Code, str] | None:
    """Return the code and message refusing ``doc`` (a parsed JSON body), or None when it names no URL or path."""
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
            continue
        if not isinstance(value, dict):
            continue
        kind = value.get("type")
        if kind in MEDIA_TYPES:
            return Code.MEDIA_UNSUPPORTED, f"'{kind}' parts are not taken by this worker (no URL or path is opened)"
        if kind in IMAGE_TYPES:
            for text in _strings(value):
                if not text.startswith("data:image/"):
                    return Code.IMAGE_INVALID, "an image must be a data:image/... URL; no URL or path is opened"
        stack.extend(value.values())
    return None


def _strings(value: object) -> list[str]:
    """Return every string inside ``value`` but those of ``IMAGE_SETTINGS`` keys."""
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            stack.extend(v for k, v in item.items() if k not in IMAGE_SETTINGS)
        elif isinstance(item, list):
            stack.extend(item)
    return out


class MediaWall:
    """ASGI middleware: a request body with a media part naming a URL or a path is 400 (module docstring)."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        """Check one HTTP request's body, then hand it on as it came; lifespan and websockets pass untouched."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        messages, body = await read_whole(receive)
        refused = _check(body)
        if refused is not None:
            await _answer(send, *refused)
            return
        await self.app(scope, replaying(messages, receive), send)


def _check(body: bytes) -> tuple[Code, str] | None:
    if not body:
        return None
    try:
        doc = json.loads(body)
    except RecursionError:
        return Code.INVALID_JSON, "the JSON body is nested too deeply"
    except ValueError:
        return None  # not JSON: mlx_vlm refuses it itself, and it names no part
    return refusal(doc)


async def _answer(send: Send, code: Code, message: str) -> None:
    body = json.dumps(error_body(Family.OPENAI, code, message, status=400)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _constants(code: CodeType) -> set[str]:
    """Return the string constants of ``code`` and of the functions defined in it."""
    out: set[str] = set()
    stack = list(code.co_consts)
    while stack:
        const = stack.pop()
        if isinstance(const, str):
            out.add(const)
        elif isinstance(const, (tuple, frozenset)):  # ``in ("input_video", "video_url")`` is one constant
            stack.extend(const)
        elif isinstance(const, CodeType):
            stack.extend(const.co_consts)
    return out


def check_media_types() -> None:
    """Raise ``SeamChanged`` when mlx_vlm reads a media part type the wall does not know, or a reader is gone."""
    known = {*IMAGE_TYPES, *MEDIA_TYPES}
    for module_name, names in MEDIA_READERS.items():
        module = importlib.import_module(module_name)
        for name in names:
            code = getattr(getattr(module, name, None), "__code__", None)
            if code is None:
                raise SeamChanged(f"{module_name}.{name} no longer exists", remediation=REMEDIATION)
            unknown = sorted(t for t in _constants(code) if MEDIA_WORD.match(t) and t not in known)
            if unknown:
                raise SeamChanged(
                    f"{module_name}.{name} reads media parts of types {unknown}, which the worker's media wall "
                    "does not check",
                    remediation=REMEDIATION,
                )
