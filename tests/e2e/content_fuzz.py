"""Hostile content parts of every API for the vision-model fuzz: every part type, every field, hostile references.

Each API's parts are drawn from every type any API or runtime knows (text, images in each shape, video, audio,
files, Anthropic's blocks, unknown ones), each holding fields drawn from every field name those types use, with
values that name the listener (http, https, ftp), the watched secret file (a path, ``file://``), data URLs of a
sound, a lying, a thin and a truncated image, bare base64, and the request fuzz's hostile values.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.e2e.fuzz_support import values
from tests.e2e.test_runtimes import png
from tests.media_traps import Listener, lying_png, thin_png, truncated_png

PART_TYPES = (
    "text",
    "input_text",
    "output_text",
    "image_url",
    "input_image",
    "image",
    "video_url",
    "input_video",
    "video",
    "input_audio",
    "audio",
    "audio_url",
    "input_file",
    "file",
    "document",
    "refusal",
    "tool_use",
    "tool_result",
    "thinking",
    "search_result",
    "x-unknown",
)
PART_FIELDS = (
    "text",
    "image_url",
    "image",
    "url",
    "detail",
    "file_id",
    "video_url",
    "video",
    "input_audio",
    "audio",
    "audio_url",
    "file",
    "file_data",
    "source",
    "content",
    "refusal",
)
SOURCE_TYPES = ("base64", "url", "file", "text", "x-unknown")


def url_of(raw: bytes) -> str:
    """Return ``raw`` as a PNG data URL."""
    return "data:image/png;base64," + base64.b64encode(raw).decode()


def references(listener: Listener, secret: Path) -> list[Any]:
    """Return what a hostile part may name: URLs of the listener, the secret by path and URL, data of each kind."""
    sound = png()
    return [
        listener.url("/x.png"),
        listener.url("/x.mp4", "https"),
        listener.url("/x.wav", "ftp"),
        str(secret),
        f"file://{secret}",
        secret.name,
        sound,
        sound.partition(",")[2],
        url_of(lying_png()),
        url_of(thin_png()),
        url_of(truncated_png()),
        "data:video/mp4;base64,AAAAIGZ0eXBpc29t",
        "data:audio/wav;base64,UklGRiQAAABXQVZF",
        {"url": listener.url("/y.png")},
        {"url": sound},
        {"url": str(secret)},
        {"data": str(secret), "format": "wav"},
        {"data": listener.url("/z.wav"), "format": "wav"},
        {"file_data": f"file://{secret}", "filename": "a.pdf"},
    ]


def parts(listener: Listener, secret: Path) -> st.SearchStrategy[dict[str, Any]]:
    """Return a strategy of one content part: a type and one to three fields, each a reference or a hostile value."""
    refs = st.sampled_from(references(listener, secret))
    source = st.fixed_dictionaries(
        {"type": st.sampled_from(SOURCE_TYPES)},
        optional={"media_type": st.sampled_from(["image/png", "video/mp4", "text/plain"]), "url": refs, "data": refs},
    )
    field_value = st.one_of(refs, refs, source, values)
    return st.builds(
        lambda kind, fields: {"type": kind, **fields},
        st.sampled_from(PART_TYPES),
        st.dictionaries(st.sampled_from(PART_FIELDS), field_value, min_size=1, max_size=3),
    )


def bodies(api: str, listener: Listener, secret: Path) -> st.SearchStrategy[dict[str, Any]]:
    """Return a strategy of one request of ``api`` whose content holds one to three hostile parts (or images)."""
    if api == "/api/chat":
        refs = st.sampled_from(references(listener, secret))
        message = st.builds(
            lambda images: {"role": "user", "content": "x", "images": images},
            st.lists(st.one_of(refs, values), min_size=1, max_size=2),
        )
    else:
        message = st.builds(
            lambda content: {"role": "user", "content": content},
            st.lists(parts(listener, secret), min_size=1, max_size=3),
        )
    limit = {"/v1/responses": "max_output_tokens", "/api/chat": "keep_alive"}.get(api, "max_tokens")
    holder = "input" if api == "/v1/responses" else "messages"
    return st.builds(
        lambda m, stream: {"model": "tiny", "stream": stream, limit: 3 if limit != "keep_alive" else "5m", holder: [m]},
        message,
        st.booleans(),
    )
