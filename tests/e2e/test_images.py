"""End to end: images through Messages and Responses reach the real mlx-vlm worker as chat completions' do.

A real front over the real wrapped mlx-vlm worker on the tiny Qwen2-VL model (its worker kind ``vision``, as
the plan records it). The same question with the same picture, asked through chat completions, Messages
(created and streamed) and Responses (created and streamed) by the official SDKs, makes one prompt: each
reports the same prompt token count, and more tokens than the question without the picture. A picture a tool
returned (a Messages ``tool_result``, a Responses ``function_call_output``) makes the prompt of its chat form (the
tool message, then a user message with the picture) on both APIs, streamed and not. A second front over the tiny
text model (kind ``text``) refuses the picture on every API with ``model_not_vision``, a tool's picture too.

The front's wall: a part that names a URL or a path (video, audio, an image by URL, ``file://`` or path) is 400 on
every API while a loopback listener sees no connection and a 0600 file of ``nobody``'s is never opened; an image
no worker could decode (a lying, a 4000x1 and a truncated 12 MP PNG) is 400 ``image_invalid`` naming the part on
every API, streamed or not; ``image_url`` as a plain string works; a worker's FastAPI refusal comes back in the
API's shape.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import free_port
from tests.gateway_support import Gateway, gateway_config, real_worker_argv, start_gateway
from tests.media_traps import Listener, Traps, lying_png, png, thin_png, truncated_png

pytestmark = pytest.mark.e2e

QUESTION = "What is in the picture?"
IMAGE_URL = png()
IMAGE_B64 = IMAGE_URL.partition(",")[2]


def fronted(directory: Path, argv: list[str], model: Path, kind: str) -> Gateway:
    """Start a front over ``argv`` whose worker is of ``kind``."""
    config = gateway_config(directory, free_port(), argv, model_path=model, max_tokens=4)
    config["models"][0]["worker"]["kind"] = kind
    return start_gateway(directory, config)


@pytest.fixture(scope="module")
def text_only(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Gateway]:
    """One front over the wrapped mlx_lm worker on the tiny text model."""
    gateway = fronted(tmp_path_factory.mktemp("text-front"), real_worker_argv(tiny_model, 4), tiny_model, "text")
    try:
        yield gateway
    finally:
        gateway.stop()


def oai(gateway: Gateway) -> openai.OpenAI:
    """Return the official OpenAI client on the front (no retries)."""
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="local", timeout=300, max_retries=0)


def claude(gateway: Gateway) -> anthropic.Anthropic:
    """Return the official Anthropic client on the front (no retries)."""
    return anthropic.Anthropic(base_url=gateway.base_url, api_key="local", timeout=300, max_retries=0)


CHAT_IMAGE: Any = [
    {
        "role": "user",
        "content": [{"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": {"url": IMAGE_URL}}],
    }
]
MESSAGES_IMAGE: Any = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": QUESTION},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMAGE_B64}},
        ],
    }
]
RESPONSES_IMAGE: Any = [
    {
        "role": "user",
        "content": [{"type": "input_text", "text": QUESTION}, {"type": "input_image", "image_url": IMAGE_URL}],
    }
]


@pytest.fixture(scope="module")
def chat_prompt(vlm_front: Gateway) -> int:
    """Return the prompt tokens chat completions reports for the question with its picture."""
    reply = oai(vlm_front).chat.completions.create(model="org/tiny", messages=CHAT_IMAGE, max_tokens=2)
    assert reply.usage is not None
    text = oai(vlm_front).chat.completions.create(
        model="org/tiny", messages=[{"role": "user", "content": QUESTION}], max_tokens=2
    )
    assert text.usage is not None and reply.usage.prompt_tokens > text.usage.prompt_tokens + 2  # the image's tokens
    return reply.usage.prompt_tokens


def test_a_messages_image_makes_the_chat_prompt(vlm_front: Gateway, chat_prompt: int) -> None:
    """messages.create with a base64 image block reports the prompt chat completions does."""
    message = claude(vlm_front).messages.create(model="org/tiny", max_tokens=2, messages=MESSAGES_IMAGE)
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) == chat_prompt


def test_a_streamed_messages_image_makes_the_chat_prompt(vlm_front: Gateway, chat_prompt: int) -> None:
    """messages.stream with the image ends with the same prompt count, and a text block."""
    with claude(vlm_front).messages.stream(model="org/tiny", max_tokens=2, messages=MESSAGES_IMAGE) as stream:
        final = stream.get_final_message()
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == chat_prompt
    assert final.stop_reason in ("end_turn", "max_tokens")


def test_a_responses_image_makes_the_chat_prompt(vlm_front: Gateway, chat_prompt: int) -> None:
    """responses.create with an input_image reports the prompt chat completions does."""
    response = oai(vlm_front).responses.create(model="org/tiny", input=RESPONSES_IMAGE, max_output_tokens=2)
    assert response.status in ("completed", "incomplete")
    assert response.usage is not None and response.usage.input_tokens == chat_prompt


def test_a_streamed_responses_image_makes_the_chat_prompt(vlm_front: Gateway, chat_prompt: int) -> None:
    """A streamed Response with an input_image ends with the same prompt count."""
    events = list(
        oai(vlm_front).responses.create(model="org/tiny", input=RESPONSES_IMAGE, max_output_tokens=2, stream=True)
    )
    final = events[-1]
    assert final.type in ("response.completed", "response.incomplete")
    assert final.response.usage is not None and final.response.usage.input_tokens == chat_prompt


def test_a_remote_image_url_is_refused_not_fetched(vlm_front: Gateway) -> None:
    """A Messages url source with an http URL is 400 image_invalid before any worker or network is touched."""
    remote = [
        {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://127.0.0.1:9/a.png"}}]}
    ]
    with pytest.raises(anthropic.BadRequestError) as info:
        claude(vlm_front).messages.create(model="org/tiny", max_tokens=2, messages=remote)  # type: ignore[arg-type]
    body: Any = info.value.body
    assert body["error"]["code"] == "image_invalid" and "not fetched" in body["error"]["message"]


@pytest.mark.parametrize("api", ["chat", "messages", "messages_stream", "responses", "responses_stream"])
def test_a_text_only_model_refuses_an_image_on_every_api(text_only: Gateway, api: str) -> None:
    """Each API answers 400 model_not_vision naming the model, in its own error shape."""
    error: openai.BadRequestError | anthropic.BadRequestError
    if api.startswith("messages"):
        with pytest.raises(anthropic.BadRequestError) as claude_info:
            if api == "messages":
                claude(text_only).messages.create(model="org/tiny", max_tokens=2, messages=MESSAGES_IMAGE)
            else:
                with claude(text_only).messages.stream(model="org/tiny", max_tokens=2, messages=MESSAGES_IMAGE) as s:
                    s.get_final_message()
        error = claude_info.value
        body: Any = error.body
        assert body["type"] == "error"
        detail = body["error"]
    else:
        with pytest.raises(openai.BadRequestError) as openai_info:
            if api == "chat":
                oai(text_only).chat.completions.create(model="org/tiny", messages=CHAT_IMAGE, max_tokens=2)
            else:
                oai(text_only).responses.create(
                    model="org/tiny", input=RESPONSES_IMAGE, max_output_tokens=2, stream=api == "responses_stream"
                )
        error = openai_info.value
        detail = error.body
    assert detail["code"] == "model_not_vision" and "'org/tiny'" in detail["message"]


CALL_ID = "toolu_read_1"
TOOL_ROUND_CHAT: Any = [
    {"role": "user", "content": QUESTION},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": CALL_ID, "type": "function", "function": {"name": "Read", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": CALL_ID, "content": "a.png"},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": IMAGE_URL}}]},
]


def messages_round(result: list[dict[str, Any]]) -> Any:
    """Return a Messages conversation: the question, a Read tool_use, and its tool_result of ``result`` blocks."""
    return [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": [{"type": "tool_use", "id": CALL_ID, "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": CALL_ID, "content": result}]},
    ]


TOOL_TEXT: Any = {"type": "text", "text": "a.png"}
TOOL_IMAGE: Any = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMAGE_B64}}
MESSAGES_TOOL_IMAGE = messages_round([TOOL_TEXT, TOOL_IMAGE])
RESPONSES_TOOL_IMAGE: Any = [
    {"role": "user", "content": QUESTION},
    {"type": "function_call", "call_id": CALL_ID, "name": "Read", "arguments": "{}"},
    {
        "type": "function_call_output",
        "call_id": CALL_ID,
        "output": [{"type": "input_text", "text": "a.png"}, {"type": "input_image", "image_url": IMAGE_URL}],
    },
]


@pytest.fixture(scope="module")
def tool_round_prompt(vlm_front: Gateway) -> int:
    """Return the prompt tokens chat completions reports for the tool round in its chat form."""
    reply = oai(vlm_front).chat.completions.create(model="org/tiny", messages=TOOL_ROUND_CHAT, max_tokens=2)
    assert reply.usage is not None
    return reply.usage.prompt_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_result_image_reaches_the_vision_worker(
    vlm_front: Gateway, tool_round_prompt: int, stream: bool
) -> None:
    """A tool_use/tool_result round whose result holds an image makes the chat form's prompt, the image's included."""
    message: anthropic.types.Message
    if stream:
        with claude(vlm_front).messages.stream(model="org/tiny", max_tokens=2, messages=MESSAGES_TOOL_IMAGE) as s:
            message = s.get_final_message()
    else:
        message = claude(vlm_front).messages.create(model="org/tiny", max_tokens=2, messages=MESSAGES_TOOL_IMAGE)
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) == tool_round_prompt
    text_only = claude(vlm_front).messages.create(model="org/tiny", max_tokens=2, messages=messages_round([TOOL_TEXT]))
    assert text_only.usage.input_tokens + (text_only.usage.cache_read_input_tokens or 0) + 2 < tool_round_prompt


@pytest.mark.parametrize("stream", [False, True])
def test_a_function_call_output_image_reaches_the_vision_worker(
    vlm_front: Gateway, tool_round_prompt: int, stream: bool
) -> None:
    """A function_call_output holding an input_image makes the chat form's prompt, streamed and not."""
    if stream:
        events = list(
            oai(vlm_front).responses.create(
                model="org/tiny", input=RESPONSES_TOOL_IMAGE, max_output_tokens=2, stream=True
            )
        )
        final = events[-1]
        assert final.type in ("response.completed", "response.incomplete")
        response = final.response
    else:
        response = oai(vlm_front).responses.create(model="org/tiny", input=RESPONSES_TOOL_IMAGE, max_output_tokens=2)
    assert response.status in ("completed", "incomplete")
    assert response.usage is not None and response.usage.input_tokens == tool_round_prompt


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_a_text_only_model_refuses_a_tool_results_image(text_only: Gateway, api: str) -> None:
    """A picture a tool returned is 400 model_not_vision naming the text model, as a user's picture is."""
    error: openai.BadRequestError | anthropic.BadRequestError
    if api == "messages":
        with pytest.raises(anthropic.BadRequestError) as claude_info:
            claude(text_only).messages.create(model="org/tiny", max_tokens=2, messages=MESSAGES_TOOL_IMAGE)
        error = claude_info.value
        detail: Any = error.body
        detail = detail["error"]
    else:
        with pytest.raises(openai.BadRequestError) as openai_info:
            oai(text_only).responses.create(model="org/tiny", input=RESPONSES_TOOL_IMAGE, max_output_tokens=2)
        error = openai_info.value
        detail = error.body
    assert detail["code"] == "model_not_vision" and "'org/tiny'" in detail["message"]


# -- the front's wall: no part names a URL or a path, every image decodes -----------------------------------


def hostile_parts(listener: Listener, secret: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """Return each chat part that names a URL or a path, with the code it must get."""
    return {
        "video_url": ({"type": "video_url", "video_url": {"url": listener.url("/v.mp4")}}, "media_unsupported"),
        "video_path": ({"type": "video", "video": str(secret)}, "media_unsupported"),
        "input_video_file": ({"type": "input_video", "video_url": f"file://{secret}"}, "media_unsupported"),
        "input_audio_url": (
            {"type": "input_audio", "input_audio": {"data": listener.url("/a.wav"), "format": "wav"}},
            "media_unsupported",
        ),
        "input_audio_path": ({"type": "input_audio", "input_audio": {"data": str(secret)}}, "media_unsupported"),
        "image_url_http": ({"type": "image_url", "image_url": {"url": listener.url("/i.png")}}, "image_invalid"),
        "image_url_string": ({"type": "image_url", "image_url": listener.url("/i.png")}, "image_invalid"),
        "image_url_file": ({"type": "image_url", "image_url": {"url": f"file://{secret}"}}, "image_invalid"),
        "image_path": ({"type": "image", "image": str(secret)}, "image_invalid"),
    }


def error_of(api: str, reply: Any) -> tuple[str | None, str | None]:
    """Return the code and param of an error reply in ``api``'s own shape (asserting the shape)."""
    doc = reply.json()
    if api == "ollama":
        assert isinstance(doc["error"], str), doc
        return doc.get("code"), doc.get("param")
    if api == "messages":
        assert doc["type"] == "error", doc
    return doc["error"]["code"], doc["error"].get("param")


API_PATHS = {
    "chat": "/v1/chat/completions",
    "messages": "/v1/messages",
    "responses": "/v1/responses",
    "ollama": "/api/chat",
}


def api_body(api: str, stream: bool, chat_parts: list[Any] | None = None, image: bytes | None = None) -> Any:
    """Return a request of ``api`` with the chat parts (chat only) or the image ``image`` in its own shape."""
    b64 = base64.b64encode(image).decode() if image is not None else ""
    url = "data:image/png;base64," + b64
    if api == "chat":
        parts = chat_parts or [{"type": "image_url", "image_url": {"url": url}}]
        return {
            "model": "org/tiny",
            "max_tokens": 2,
            "stream": stream,
            "messages": [{"role": "user", "content": parts}],
        }
    if api == "messages":
        block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}
        return {
            "model": "org/tiny",
            "max_tokens": 2,
            "stream": stream,
            "messages": [{"role": "user", "content": [block]}],
        }
    if api == "responses":
        part = {"type": "input_image", "image_url": url}
        return {
            "model": "org/tiny",
            "max_output_tokens": 2,
            "stream": stream,
            "input": [{"role": "user", "content": [part]}],
        }
    return {"model": "org/tiny", "stream": stream, "messages": [{"role": "user", "content": "x", "images": [b64]}]}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "case",
    [
        "video_url",
        "video_path",
        "input_video_file",
        "input_audio_url",
        "input_audio_path",
        "image_url_http",
        "image_url_string",
        "image_url_file",
        "image_path",
    ],
)
def test_a_chat_part_naming_a_url_or_a_path_is_refused_before_any_fetch(
    vlm_front: Gateway, traps: Traps, case: str, stream: bool
) -> None:
    """Each part is 400 with its code naming the part; the listener sees no connection, the file no open."""
    listener, secret = traps.listener, traps.secret
    part, code = hostile_parts(listener, secret.path)[case]
    connections = listener.connections
    body = api_body("chat", stream, [{"type": "text", "text": QUESTION}, part])
    reply = vlm_front.request("POST", API_PATHS["chat"], body)
    assert reply.status == 400 and error_of("chat", reply) == (code, "messages.0.content.1"), reply.body[:300]
    assert listener.connections == connections and not secret.touched()


@pytest.mark.parametrize(
    ("api", "body", "code"),
    [
        (
            "messages",
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "SECRET_URL"}}]}
                ]
            },
            "image_invalid",
        ),
        (
            "messages",
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "LISTENER"}}]}
                ]
            },
            "image_invalid",
        ),
        (
            "responses",
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "SECRET"}]}]},
            "image_invalid",
        ),
        (
            "responses",
            {"input": [{"role": "user", "content": [{"type": "input_video", "video_url": "LISTENER"}]}]},
            "media_unsupported",
        ),
        (
            "responses",
            {"input": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "SECRET"}}]}]},
            "media_unsupported",
        ),
        ("ollama", {"messages": [{"role": "user", "content": "x", "images": ["SECRET"]}]}, "image_invalid"),
    ],
)
def test_no_other_api_lets_a_part_name_a_url_or_a_path(
    vlm_front: Gateway, traps: Traps, api: str, body: dict[str, Any], code: str
) -> None:
    """Messages, Responses and /api/chat refuse such parts in their own shape; nothing is fetched or opened."""
    listener, secret = traps.listener, traps.secret
    connections = listener.connections
    raw = json.dumps({"model": "org/tiny", "stream": False, **body})
    raw = raw.replace("SECRET_URL", f"file://{secret.path}").replace("SECRET", str(secret.path))
    raw = raw.replace("LISTENER", listener.url("/m"))
    extra = {"max_tokens": 2} if api == "messages" else {}
    reply = vlm_front.request("POST", API_PATHS[api], {**json.loads(raw), **extra})
    assert reply.status == 400 and error_of(api, reply)[0] == code, reply.body[:300]
    assert listener.connections == connections and not secret.touched()


UNDECODABLE = {"lying": lying_png, "thin": thin_png, "truncated": truncated_png}
IMAGE_PARAMS = {
    "chat": "messages.0.content.0",
    "messages": "messages.0.content.0.source.data",
    "responses": "input.0.content.0.image_url",
    "ollama": "messages.0.images.0",
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", sorted(API_PATHS))
@pytest.mark.parametrize("name", sorted(UNDECODABLE))
def test_an_image_no_worker_could_decode_is_400_naming_its_part(
    vlm_front: Gateway, name: str, api: str, stream: bool
) -> None:
    """A lying, a 4000x1 and a truncated 12 MP PNG are 400 image_invalid in the API's shape, streamed or not."""
    reply = vlm_front.request("POST", API_PATHS[api], api_body(api, stream, image=UNDECODABLE[name]()))
    assert reply.status == 400, reply.body[:300]
    assert error_of(api, reply) == ("image_invalid", IMAGE_PARAMS[api])


def test_image_url_as_a_plain_string_reaches_the_worker(vlm_front: Gateway, chat_prompt: int) -> None:
    """A chat image_url given as the URL string (as documented) makes the prompt the object form makes."""
    parts = [{"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": IMAGE_URL}]
    reply = vlm_front.request("POST", API_PATHS["chat"], api_body("chat", False, parts))
    assert reply.status == 200, reply.body[:300]
    assert reply.json()["usage"]["prompt_tokens"] == chat_prompt


@pytest.mark.parametrize("stream", [False, True])
def test_a_workers_fastapi_refusal_comes_back_in_the_apis_shape(vlm_front: Gateway, stream: bool) -> None:
    """A role mlx-vlm's schema refuses (its 422 {"detail": [...]}) is answered as an OpenAI error with its status."""
    body = {"model": "org/tiny", "max_tokens": 2, "stream": stream, "messages": [{"role": "narrator", "content": "x"}]}
    reply = vlm_front.request("POST", API_PATHS["chat"], body)
    assert 400 <= reply.status < 500, reply.body[:300]
    doc = reply.json()
    assert "detail" not in doc and doc["error"]["code"] == "worker_error" and "role" in doc["error"]["message"]
