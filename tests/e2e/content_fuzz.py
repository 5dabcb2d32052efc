"""Hostile content of every API: every part type and field, the references they name, the bodies that carry them.

Each API's parts are drawn from every type any API or runtime knows (text, images in each shape, video, audio,
files, Anthropic's blocks, unknown ones), each holding fields drawn from every field name those types use, with
values that name the listener (http, https, ftp, ws, gopher, ...), the watched secret file (a path, a ``file://``
URL), data URLs of a sound, a lying, a thin and a truncated image, bare base64, the request fuzz's hostile values
and huge, deep or odd JSON. They sit where each API carries content: a message's content, a system prompt, a
tool's result (Messages' ``tool_result``, Responses' ``function_call_output``), Ollama's ``images`` and
``prompt``, an embeddings ``input`` (and vLLM's ``messages`` on ``/v1/embeddings``). ``named`` and ``placed`` give
every part type as its API writes it, naming the listener or the file. What is checked of each answer is
``content_checks``.
"""

from __future__ import annotations

import base64
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.e2e.fuzz_support import deep, values
from tests.media_traps import Listener, lying_png, png, thin_png, truncated_png

# Every API the front serves that carries a prompt, content parts or inputs.
APIS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/v1/responses/compact",
    "/api/chat",
    "/api/generate",
    "/api/embed",
    "/api/embeddings",
    "/v1/embeddings",
)
STREAMED = frozenset(
    ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses", "/api/chat", "/api/generate")
)

PART_TYPES = (
    "text",
    "input_text",
    "output_text",
    "image_url",
    "input_image",
    "image",
    "image_file",
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
    "redacted_thinking",
    "search_result",
    "container_upload",
    "x-unknown",
)
PART_FIELDS = (
    "text",
    "image_url",
    "image",
    "image_file",
    "url",
    "detail",
    "file_id",
    "file_url",
    "video_url",
    "video",
    "input_audio",
    "audio",
    "audio_url",
    "file",
    "file_data",
    "filename",
    "data",
    "format",
    "media_type",
    "source",
    "content",
    "output",
    "refusal",
)
SOURCE_TYPES = ("base64", "url", "file", "text", "content", "x-unknown")
URL_SCHEMES = ("http", "https", "ftp", "ws", "wss", "gopher", "rtsp", "rtmp", "sftp", "HTTP")


def url_of(raw: bytes) -> str:
    """Return ``raw`` as a PNG data URL."""
    return "data:image/png;base64," + base64.b64encode(raw).decode()


@cache
def images() -> tuple[str, str, str, str]:
    """Return data URLs of a sound, a lying, a thin and a truncated image (built once: the last takes a while)."""
    return png(), url_of(lying_png()), url_of(thin_png()), url_of(truncated_png())


def references(listener: Listener, secret: Path) -> list[Any]:
    """Return what a hostile part may name: URLs of the listener, the secret by path and URL, data of each kind."""
    sound, lying, thin, truncated = images()
    return [
        *(
            listener.url(f"/x.{ext}", scheme)
            for scheme, ext in zip(URL_SCHEMES, ("png", "mp4", "wav") * 4, strict=False)
        ),
        f"//127.0.0.1:{listener.port}/x.png",
        f"127.0.0.1:{listener.port}",
        str(secret),
        f"file://{secret}",
        f"file://localhost{secret}",
        f"{secret.parent}/../{secret.parent.name}/{secret.name}",
        secret.name,
        sound,
        sound.partition(",")[2],
        lying,
        thin,
        truncated,
        "data:video/mp4;base64,AAAAIGZ0eXBpc29t",
        "data:audio/wav;base64,UklGRiQAAABXQVZF",
        "data:text/plain;base64,aGk=",
        "data:image/png;base64,",
        {"url": listener.url("/y.png")},
        {"url": sound},
        {"url": str(secret)},
        {"url": f"file://{secret}", "detail": "high"},
        {"data": str(secret), "format": "wav"},
        {"data": listener.url("/z.wav"), "format": "wav"},
        {"file_data": f"file://{secret}", "filename": "a.pdf"},
        {"file_url": listener.url("/a.pdf"), "filename": "a.pdf"},
        {"path": str(secret)},
    ]


# Huge, deep and odd JSON: each is a single value a field or a whole content may take.
odd = st.one_of(
    deep,
    st.sampled_from(
        [
            "A" * (1 << 20),  # a 1 MiB string
            [{"type": "text", "text": "x"}] * 5000,  # many parts
            {f"k{n}": n for n in range(2000)},  # a wide object
            2**200,
            -0.0,
            float("nan"),
            "\x00\ud800\U0010ffff",
            [],
            {},
        ]
    ),
)


def _sources(refs: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Return a strategy of an Anthropic-style source: ``{"type": "base64"|"url"|..., ...}`` holding references."""
    return st.fixed_dictionaries(
        {"type": st.sampled_from(SOURCE_TYPES)},
        optional={
            "media_type": st.sampled_from(["image/png", "video/mp4", "audio/wav", "application/pdf", "text/plain"]),
            "url": refs,
            "data": refs,
            "file_id": refs,
            "content": refs,
        },
    )


def well_formed(refs: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Return a strategy of a part as its API writes it (the field its type reads), naming a reference."""
    by_field = st.builds(lambda kind, ref: {"type": kind, kind: ref}, st.sampled_from(PART_TYPES), refs)
    by_url = st.builds(lambda kind, ref: {"type": kind, kind: {"url": ref}}, st.sampled_from(PART_TYPES), refs)
    return st.one_of(
        by_field,
        by_url,
        st.builds(lambda ref: {"type": "input_audio", "input_audio": {"data": ref, "format": "wav"}}, refs),
        st.builds(lambda ref: {"type": "input_image", "image_url": ref, "detail": "auto"}, refs),
        st.builds(lambda ref: {"type": "input_file", "file_data": ref, "filename": "a.pdf"}, refs),
        st.builds(lambda ref: {"type": "input_file", "file_url": ref}, refs),
        st.builds(
            lambda kind, source: {"type": kind, "source": source},
            st.sampled_from(["image", "document", "video", "audio"]),
            _sources(refs),
        ),
    )


def parts(listener: Listener, secret: Path) -> st.SearchStrategy[dict[str, Any]]:
    """Return a strategy of one content part: as its API writes it, or any type with one to three of any field.

    A field holds mostly a reference or a source, sometimes a hostile or odd value (which the front's body checks
    refuse before any part is read), or a list of parts one level down (a tool's result, a document's content).
    """
    refs = st.sampled_from(references(listener, secret))

    def part(field_value: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
        return st.builds(
            lambda kind, fields: {"type": kind, **fields},
            st.sampled_from(PART_TYPES),
            st.dictionaries(st.sampled_from(PART_FIELDS), field_value, min_size=1, max_size=3),
        )

    flat = st.one_of(refs, refs, refs, _sources(refs), values, odd)
    nested = st.lists(st.one_of(well_formed(refs), part(flat)), min_size=1, max_size=2)
    return st.one_of(well_formed(refs), well_formed(refs), part(st.one_of(flat, flat, flat, nested)))


def content(listener: Listener, secret: Path) -> st.SearchStrategy[Any]:
    """Return a strategy of one message's content: mostly one to three hostile parts, sometimes an odd value."""
    hostile = parts(listener, secret)
    return st.one_of(st.lists(hostile, min_size=1, max_size=3), st.lists(hostile, min_size=1, max_size=3), odd)


def _chat(content: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """Chat completions' messages: the hostile content from any role (a tool's after the call it answers)."""
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return st.one_of(
        st.builds(lambda c: [{"role": "user", "content": c}], content),
        st.builds(lambda c: [{"role": "system", "content": c}, {"role": "user", "content": "hi"}], content),
        st.builds(
            lambda c: [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c", "content": c},
            ],
            content,
        ),
    )


def _anthropic(content: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Messages' body fields: the hostile content as a user turn, a system prompt, or a tool's result."""
    use = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    return st.one_of(
        st.builds(lambda c: {"messages": [{"role": "user", "content": c}]}, content),
        st.builds(lambda c: {"system": c, "messages": [{"role": "user", "content": "hi"}]}, content),
        st.builds(
            lambda c: {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [use]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": c}]},
                ]
            },
            content,
        ),
    )


def _responses(content: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """Responses' input: the hostile content as a message of any role, or a function call's output."""
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    return st.one_of(
        st.builds(
            lambda role, c: [{"role": role, "content": c}], st.sampled_from(["user", "system", "developer"]), content
        ),
        st.builds(lambda c: [{"type": "message", "role": "user", "content": c}], content),
        st.builds(lambda c: [call, {"type": "function_call_output", "call_id": "c", "output": c}], content),
    )


def _ollama_images(refs: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Ollama's ``images``: a list of references and hostile values, or an odd value whole."""
    return st.one_of(st.lists(st.one_of(refs, refs, values), min_size=1, max_size=2), odd)


def _inputs(refs: st.SearchStrategy[Any], content: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Return an embeddings ``input``: references as text, content parts (multimodal inputs), anything."""
    return st.one_of(refs, refs, st.lists(refs, min_size=1, max_size=3), content, values, odd)


def bodies(api: str, listener: Listener, secret: Path) -> st.SearchStrategy[dict[str, Any]]:
    """Return a strategy of one request of ``api`` (one of ``APIS``) with hostile content where the API carries it."""
    refs = st.sampled_from(references(listener, secret))
    hostile = content(listener, secret)
    fields: st.SearchStrategy[dict[str, Any]]
    if api == "/v1/chat/completions":
        fields = st.builds(lambda m: {"messages": m, "max_tokens": 3}, _chat(hostile))
    elif api == "/v1/completions":
        fields = st.builds(lambda p: {"prompt": p, "max_tokens": 3}, st.one_of(refs, hostile, values))
    elif api in ("/v1/messages", "/v1/messages/count_tokens"):
        fields = _anthropic(hostile).map(lambda f: {**f, "max_tokens": 3} if api == "/v1/messages" else f)
    elif api == "/v1/responses":
        fields = st.builds(lambda i: {"input": i, "max_output_tokens": 3}, _responses(hostile))
    elif api == "/v1/responses/compact":
        fields = st.builds(lambda i: {"input": i}, _responses(hostile))
    elif api == "/api/chat":
        message = st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "tool"]), "content": st.one_of(st.just("x"), refs, hostile)},
            optional={"images": _ollama_images(refs)},
        )
        fields = st.builds(lambda m: {"messages": [m], "keep_alive": "5m"}, message)
    elif api == "/api/generate":
        fields = st.fixed_dictionaries(
            {"prompt": st.one_of(st.just("x"), refs, values)},
            optional={"images": _ollama_images(refs), "system": st.one_of(refs, values), "suffix": refs},
        )
    elif api == "/api/embeddings":
        fields = st.builds(lambda p: {"prompt": p}, st.one_of(refs, values, odd))
    else:  # /api/embed, /v1/embeddings
        # Each field valid as often as hostile, so inputs reach the worker.
        dimensions = st.one_of(st.sampled_from([16, 64]), values)
        extra = {"dimensions": dimensions}
        if api == "/api/embed":
            extra["truncate"] = st.one_of(st.booleans(), values)
        else:
            extra["encoding_format"] = st.one_of(st.just("base64"), values)
        if api == "/v1/embeddings":
            extra["messages"] = _chat(hostile)  # vLLM's chat-shaped embeddings: ignored or refused, never read
        fields = st.fixed_dictionaries({"input": _inputs(refs, hostile)}, optional=extra)
    if api not in STREAMED:
        return fields.map(lambda f: {"model": "tiny", **f})
    return st.builds(lambda f, stream: {"model": "tiny", "stream": stream, **f}, fields, st.booleans())


def as_written(kind: str, ref: str) -> dict[str, Any]:
    """Return a part of type ``kind`` as its API writes it, the field it reads naming ``ref``."""
    url = {"type": "url", "url": ref}
    fields: dict[str, dict[str, Any]] = {
        "image_url": {"image_url": {"url": ref}},
        "input_image": {"image_url": ref},
        "image": {"source": url},
        "image_file": {"image_file": {"file_id": ref}},
        "video_url": {"video_url": {"url": ref}},
        "input_video": {"video_url": ref},
        "input_audio": {"input_audio": {"data": ref, "format": "wav"}},
        "audio_url": {"audio_url": {"url": ref}},
        "input_file": {"file_url": ref, "filename": "a.pdf"},
        "file": {"file": {"file_data": ref, "filename": "a.pdf"}},
        "document": {"source": url},
        "tool_use": {"id": "t", "name": "f", "input": {"path": ref}},
        "tool_result": {"tool_use_id": "t", "content": [{"type": "image", "source": url}]},
        "thinking": {"thinking": ref, "signature": "x"},
        "redacted_thinking": {"data": ref},
        "search_result": {"source": ref, "title": "t", "content": [{"type": "text", "text": "x"}]},
        "container_upload": {"file_id": ref},
    }
    default = {"text": ref} if kind in ("text", "input_text", "output_text") else {kind: ref, "url": ref}
    return {"type": kind, **fields.get(kind, default)}


def named(listener: Listener, secret: Path, turn: int) -> list[tuple[dict[str, Any], str]]:
    """Return every part type as written, naming the listener (schemes in turn) or the secret (path, ``file://``).

    Which of the two a type names alternates with ``turn`` (an API's place in ``APIS``), so across the APIs
    every type names both.
    """
    urls = [listener.url(f"/m{n}", scheme) for n, scheme in enumerate(URL_SCHEMES)]
    paths = [str(secret), f"file://{secret}"]
    refs = [urls[(n + turn) % len(urls)] if (n + turn) % 2 else paths[turn % 2] for n in range(len(PART_TYPES))]
    return [(as_written(kind, ref), ref) for kind, ref in zip(PART_TYPES, refs, strict=True)]


def placed(api: str, part: dict[str, Any], ref: str) -> dict[str, Any]:
    """Return a request of ``api`` that carries ``part`` where the API carries content (Ollama's: ``ref`` as media)."""
    user = [{"role": "user", "content": [{"type": "text", "text": "look"}, part]}]
    if api in ("/v1/chat/completions", "/v1/messages"):
        return {"model": "tiny", "messages": user, "max_tokens": 3}
    if api == "/v1/messages/count_tokens":
        return {"model": "tiny", "messages": user}
    if api == "/v1/responses":
        return {"model": "tiny", "input": user, "max_output_tokens": 3}
    if api == "/v1/responses/compact":
        return {"model": "tiny", "input": user}
    if api == "/api/chat":
        return {"model": "tiny", "stream": False, "messages": [{"role": "user", "content": "x", "images": [ref]}]}
    if api == "/api/generate":
        return {"model": "tiny", "stream": False, "prompt": "x", "images": [ref]}
    key = "prompt" if api in ("/v1/completions", "/api/embeddings") else "input"
    return {"model": "tiny", key: [part]}
