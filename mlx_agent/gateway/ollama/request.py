"""An Ollama ``/api/chat`` or ``/api/generate`` request, translated into the worker's chat-completions body (pure).

The rules (docs/ollama.md is the table):

* ``messages`` (chat) keep their roles; an assistant's ``tool_calls`` (arguments as an object) become OpenAI
  tool calls with ids made here, and a ``tool`` message answers the earliest unanswered call of its
  ``tool_name`` (else the earliest unanswered one); an assistant's ``thinking`` is dropped, as chat templates drop
  earlier reasoning. ``generate`` is one user turn (``prompt``, after ``system`` when given).
* ``images`` (base64, as Ollama's clients send them) become ``image_url`` parts with a data URL, which the chat
  path checks as every API's (``gateway.images``: the limits, and 400 ``model_not_vision`` for a text model).
* ``options`` map to the sampler (``sampler``); ``format`` ``json`` is ``response_format`` ``json_object`` and a
  schema object ``json_schema``, enforced by the worker; ``think`` ``false`` passes ``enable_thinking: false``
  to the chat template, ``low``/``medium``/``high`` become ``reasoning_effort``, ``true`` keeps the template's
  default; ``tools`` are function tools as chat completions takes them.
* ``generate`` with ``raw: true`` sends the prompt as it is to the worker's text completions (the client applied
  its own template): ``system``, ``images`` and ``think`` are refused with it, as it has no place for them.
* Refused (400 ``unsupported_parameter``), because ignoring them would give the client something else than it
  asked for: ``generate``'s ``template`` (the reviewed template is the model's), ``suffix`` (fill-in-the-middle),
  a non-empty ``context`` (Ollama's token history), ``logprobs: true``, and sampler settings the runtime has no
  sampler for (``mirostat`` other than 0, ``typical_p`` and ``tfs_z`` other than 1).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlx_agent.api_errors import Code
from mlx_agent.gateway.door.http_errors import refused
from mlx_agent.gateway.images import image_part
from mlx_agent.gateway.ollama.bodies import Generation, OllamaChatBody, OllamaGenerateBody, Options

IMAGE_TYPES = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"))
DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
KEEP = math.inf  # keep_alive below zero: keep the model as long as the server's policy does


@dataclass(frozen=True)
class OllamaRequest:
    """A translated request: the worker's chat body, and what the reply needs."""

    chat: dict[str, Any]
    stream: bool  # Ollama streams unless told not to
    keep_alive: float | None  # seconds (KEEP for "as long as the policy allows"), None when not sent
    load_only: bool  # no prompt: load (or unload) the model and answer at once
    raw: bool = False  # generate's raw: the prompt goes to the worker's text completions, no template


def parse_keep_alive(value: object) -> float | None:
    """Return ``keep_alive`` in seconds (``KEEP`` below zero); a number is seconds, a string a Go duration."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise refused(
            Code.INVALID_VALUE,
            "'keep_alive' must be a duration such as '5m' or a number of seconds",
            param="keep_alive",
        )
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip()
        sign = -1.0 if text.startswith("-") else 1.0
        text = text.lstrip("+-")
        try:
            seconds = sign * float(text)  # a bare number in a string: seconds, as Ollama's CLI takes it
        except ValueError:
            parts = DURATION.findall(text)
            if not text or "".join(n + u for n, u in parts) != text:
                raise refused(
                    Code.INVALID_VALUE,
                    f"'keep_alive' {value!r} is not a duration: use a number of seconds or '30s', '5m', '1h30m'",
                    param="keep_alive",
                ) from None
            seconds = sign * sum(float(n) * UNITS[u] for n, u in parts)
    if not math.isfinite(seconds):
        raise refused(Code.INVALID_VALUE, "'keep_alive' must be finite", param="keep_alive")
    return KEEP if seconds < 0 else seconds


def sampler(options: Options | None, out: dict[str, Any]) -> None:
    """Map ``options`` onto the chat body's sampler fields; refuse a sampler the runtime does not have."""
    if options is None:
        return
    for ours, theirs in (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("top_k", "top_k"),
        ("min_p", "min_p"),
        ("presence_penalty", "presence_penalty"),
        ("frequency_penalty", "frequency_penalty"),
        ("repetition_penalty", "repeat_penalty"),
    ):
        value = getattr(options, theirs)
        if value is not None:
            out[ours] = value
    if options.num_predict is not None and options.num_predict > 0:
        out["max_tokens"] = options.num_predict  # -1 (no limit) and -2 (fill the context): the server's own limit
    elif options.num_predict == 0:
        raise refused(
            Code.INVALID_VALUE,
            "options.num_predict must be positive, or -1 for the server's limit",
            param="options.num_predict",
        )
    if options.seed is not None and options.seed >= 0:
        out["seed"] = options.seed  # a negative seed is Ollama's "random", which an unseeded request is
    if options.stop:
        out["stop"] = [options.stop] if isinstance(options.stop, str) else list(options.stop)
    if options.repeat_last_n is not None and options.repeat_last_n > 0:
        out["repetition_context_size"] = options.repeat_last_n
    elif options.repeat_last_n == 0:
        out.pop("repetition_penalty", None)  # Ollama's 0: no window, so no repetition penalty
    for name, neutral in (("mirostat", 0), ("typical_p", 1), ("tfs_z", 1)):
        value = getattr(options, name)
        if value is not None and value != neutral:
            raise refused(
                Code.UNSUPPORTED_PARAMETER,
                f"options.{name} {value} is not supported: the runtime has no such sampler (leave it at {neutral})",
                param=f"options.{name}",
            )


def _common(body: Generation, out: dict[str, Any]) -> None:
    """Apply what chat and generate share: options, format, think; refuse logprobs."""
    sampler(body.options, out)
    if body.format == "json":
        out["response_format"] = {"type": "json_object"}
    elif isinstance(body.format, dict):
        out["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": body.format}}
    if body.think is False:
        out["chat_template_kwargs"] = {"enable_thinking": False}
    elif isinstance(body.think, str):
        out["reasoning_effort"] = body.think
    if body.logprobs:
        raise refused(
            Code.UNSUPPORTED_PARAMETER, "'logprobs' is not supported on the Ollama API here", param="logprobs"
        )


def image_parts(images: object, where: str) -> list[dict[str, Any]]:
    """Return chat ``image_url`` parts for Ollama's base64 ``images`` (their media type read from their bytes)."""
    if not images:
        return []
    if not isinstance(images, list):
        raise refused(Code.INVALID_TYPE, "'images' must be a list of base64 strings", param=where)
    parts: list[dict[str, Any]] = []
    for index, image in enumerate(images):
        if not isinstance(image, str):
            raise refused(Code.INVALID_TYPE, "each image must be a base64 string", param=f"{where}.{index}")
        try:
            head = base64.b64decode(image[:64].ljust(4 * ((len(image[:64]) + 3) // 4), "="), validate=True)
            base64.b64decode(image, validate=True)
        except (binascii.Error, ValueError):
            raise refused(
                Code.IMAGE_INVALID, "an image must be base64 data (not a path or a URL)", param=f"{where}.{index}"
            ) from None
        kind = next((mime for magic, mime in IMAGE_TYPES if head.startswith(magic)), None)
        if kind is None and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
            kind = "image/webp"
        if kind is None:
            raise refused(Code.IMAGE_INVALID, "an image must be PNG, JPEG, GIF or WebP", param=f"{where}.{index}")
        parts.append(image_part(f"data:{kind};base64,{image}", f"{where}.{index}"))
    return parts


def _content(text: object, images: object, where: str) -> Any:
    parts = image_parts(images, f"{where}.images")
    if text is not None and not isinstance(text, str):
        raise refused(Code.INVALID_TYPE, "a message's content must be a string", param=f"{where}.content")
    if not parts:
        return text or ""
    return [*parts, {"type": "text", "text": text or ""}]


def tools_of(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Return Ollama's function tools as chat completions takes them (the same shape, checked)."""
    out = []
    for index, tool in enumerate(tools or []):
        function = tool.get("function")
        if tool.get("type", "function") != "function" or not isinstance(function, Mapping):
            raise refused(
                Code.UNSUPPORTED_TOOL, "a tool must be {type: 'function', function: {...}}", param=f"tools.{index}"
            )
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise refused(Code.INVALID_VALUE, "a tool needs a name", param=f"tools.{index}.function.name")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise refused(
                Code.INVALID_VALUE, "a tool's parameters must be an object", param=f"tools.{index}.function.parameters"
            )
        entry = {"name": function["name"], "parameters": dict(parameters or {"type": "object", "properties": {}})}
        if isinstance(function.get("description"), str):
            entry["description"] = function["description"]
        out.append({"type": "function", "function": entry})
    return out


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    unanswered: list[tuple[str, str]] = []  # (call id, tool name), oldest first
    made = 0
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        role = message.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise refused(
                Code.INVALID_VALUE, "a message's role must be system, user, assistant or tool", param=f"{where}.role"
            )
        content = _content(message.get("content"), message.get("images"), where)
        if role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": content}
            calls = []
            for position, call in enumerate(message.get("tool_calls") or []):
                function = call.get("function") if isinstance(call, Mapping) else None
                if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
                    raise refused(
                        Code.INVALID_VALUE,
                        "a tool call needs a function with a name",
                        param=f"{where}.tool_calls.{position}",
                    )
                arguments = function.get("arguments") or {}
                made += 1
                call_id = str(call.get("id") or f"call_{made}")
                unanswered.append((call_id, function["name"]))
                text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
                named = {"name": function["name"], "arguments": text}
                calls.append({"id": call_id, "type": "function", "function": named})
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
        elif role == "tool":
            name = message.get("tool_name") or message.get("name")
            found = next((c for c in unanswered if c[1] == name), unanswered[0] if unanswered else None)
            tool: dict[str, Any] = {"role": "tool", "content": content}
            if found is not None:
                unanswered.remove(found)
                tool["tool_call_id"] = found[0]
            if isinstance(name, str):
                tool["name"] = name
            out.append(tool)
        else:
            out.append({"role": role, "content": content})
    return out


def translate_chat(body: OllamaChatBody) -> OllamaRequest:
    """Translate ``/api/chat``."""
    out: dict[str, Any] = {"model": body.model, "stream": True}
    messages = body.messages or []
    out["messages"] = _messages(messages)
    if body.tools:
        out["tools"] = tools_of(body.tools)
    _common(body, out)
    return OllamaRequest(out, body.stream is not False, parse_keep_alive(body.keep_alive), not messages)


def translate_generate(body: OllamaGenerateBody) -> OllamaRequest:
    """Translate ``/api/generate`` (one user turn); refuse what it cannot honour (module docstring)."""
    for name, value in (("template", body.template), ("suffix", body.suffix)):
        if value:
            raise refused(
                Code.UNSUPPORTED_PARAMETER,
                f"'{name}' is not supported: the model's reviewed chat template is used",
                param=name,
            )
    if body.context:
        raise refused(
            Code.UNSUPPORTED_PARAMETER,
            "'context' (token history) is not supported: send the conversation to /api/chat",
            param="context",
        )
    if body.raw:
        return _raw(body)
    messages: list[dict[str, Any]] = []
    if body.system:
        messages.append({"role": "system", "content": body.system})
    parts = image_parts(body.images, "images")
    prompt = body.prompt or ""
    messages.append({"role": "user", "content": [*parts, {"type": "text", "text": prompt}] if parts else prompt})
    out: dict[str, Any] = {"model": body.model, "stream": True, "messages": messages}
    _common(body, out)
    load_only = not body.prompt and not body.images
    return OllamaRequest(out, body.stream is not False, parse_keep_alive(body.keep_alive), load_only)


def _raw(body: OllamaGenerateBody) -> OllamaRequest:
    """Translate a raw generate: the prompt as it is, for the worker's text completions."""
    for name, value in (("system", body.system), ("images", body.images), ("think", body.think)):
        if value:
            raise refused(
                Code.UNSUPPORTED_PARAMETER,
                f"'{name}' cannot be honoured with raw: true (the prompt is sent as it is, with no template)",
                param=name,
            )
    out: dict[str, Any] = {"model": body.model, "stream": True, "prompt": body.prompt or ""}
    _common(body, out)
    out.pop("chat_template_kwargs", None)
    return OllamaRequest(out, body.stream is not False, parse_keep_alive(body.keep_alive), not body.prompt, raw=True)
