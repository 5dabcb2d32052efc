"""Every content part of a chat body, held to one whitelist per model kind before any worker sees it (pure).

A chat message's ``content`` is a string, null, or a list of parts, each an object with a string ``type``.
``PART_TYPES`` says which types each model kind (``WorkerRecord.kind``) takes: text parts everywhere, image
parts on a vision model, nothing on an embedding model (which takes no chat at all). Every API reaches this
check, chat completions as sent and the others as their translators wrote them (``openai.request.prepare``).

Media arrive only as data the client sent: an image is a ``data:`` URL (``images``: its limits, and every
part rewritten to the one shape ``{"type": "image_url", "image_url": {"url": ...}}``, so ``image_url`` as a
plain string, ``input_image`` and ``image`` reach either runtime as they read it). Refused, 400 in the API's
own error shape:

* an image on a text model: ``model_not_vision`` naming it;
* a video, audio or file part (``MEDIA_PART_TYPES``): ``media_unsupported``. mlx-vlm would fetch a URL or open
  a path such a part names (ffmpeg, requests); no runtime here decodes video or audio from data yet, so the
  part is refused whatever it holds;
* any other part type: ``unsupported_content``; a part that is not an object with a string type, text that is
  not a string, content that is neither a string nor a list: ``invalid_type``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import refused
from mlx_agent.gateway.images import IMAGE_PART_TYPES, LIMITS, ImageLimits, ImagePart, check_images, part_url

# The text part types of chat completions and of the Responses shape (mlx-vlm reads all three as text).
TEXT_PART_TYPES = ("text", "input_text", "output_text")
# Media parts some runtime reads by fetching or opening what they name: refused on every API and model kind.
MEDIA_PART_TYPES = (
    "video_url",
    "input_video",
    "video",
    "input_audio",
    "audio",
    "audio_url",
    "input_file",
    "file",
)
# The one whitelist: the part types each model kind takes (None: a config written before kinds; the worker judges).
PART_TYPES: dict[str | None, frozenset[str]] = {
    "text": frozenset(TEXT_PART_TYPES),
    "vision": frozenset((*TEXT_PART_TYPES, *IMAGE_PART_TYPES)),
    "embedding": frozenset(),
    None: frozenset((*TEXT_PART_TYPES, *IMAGE_PART_TYPES)),
}


def media_refusal(kind: str, param: str) -> RequestRefused:
    """Return the refusal of a video, audio or file part (the same words on every API)."""
    return refused(
        Code.MEDIA_UNSUPPORTED,
        f"'{kind}' parts are not supported here: video, audio and files are not taken yet, and no URL or path a "
        "request names is fetched or opened; send text, and images as data: URLs",
        param=param,
    )


def check_messages(
    messages: list[Any], *, model: str, kind: str | None, limits: ImageLimits = LIMITS
) -> tuple[list[Any], int]:
    """Return ``messages`` with their image parts in the one shape, and how many images; refuse a part (module doc)."""
    allowed = PART_TYPES.get(kind, PART_TYPES[None])
    out: list[Any] = []
    images: list[tuple[str, Mapping[str, Any]]] = []
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        if content is None or isinstance(content, str):
            out.append(message)
            continue
        where = f"messages.{index}.content"
        if not isinstance(content, list):
            raise refused(Code.INVALID_TYPE, "a message's content must be a string or a list of parts", param=where)
        parts = [_part(part, f"{where}.{n}", allowed, model, images) for n, part in enumerate(content)]
        out.append({**message, "content": parts})
    check_images(images, limits)
    return out, len(images)


def _part(part: object, param: str, allowed: frozenset[str], model: str, images: list[Any]) -> Any:
    """Return one part as the worker gets it (an image rewritten to the one shape); refuse it if it may not pass."""
    kind = part.get("type") if isinstance(part, Mapping) else None
    if not isinstance(part, Mapping) or not isinstance(kind, str):
        raise refused(Code.INVALID_TYPE, "each content part must be an object with a string 'type'", param=param)
    if kind in MEDIA_PART_TYPES:
        raise media_refusal(kind, param)
    if kind in IMAGE_PART_TYPES and kind not in allowed:
        raise refused(
            Code.MODEL_NOT_VISION,
            f"the model '{model}' reads text only and cannot take images; send text, or serve a vision model "
            "(mlx-vlm) and name it",
            param=param,
        )
    if kind not in allowed:
        raise refused(Code.UNSUPPORTED_CONTENT, f"content parts of type {kind!r} are not supported here", param=param)
    if kind in IMAGE_PART_TYPES:
        name = part.param if isinstance(part, ImagePart) else param
        url = part_url(part)
        images.append((name, part))
        return part if isinstance(part, ImagePart) else ImagePart(url if isinstance(url, str) else "", name)
    if not isinstance(part.get("text"), str):
        raise refused(Code.INVALID_TYPE, f"a '{kind}' part needs its text as a string", param=f"{param}.text")
    return part
