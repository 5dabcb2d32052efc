"""A multipart form upload, read as it streams in and held to its endpoint's declaration (``FormSpec``).

OpenAI's audio endpoints (``/v1/audio/transcriptions``, ``/v1/audio/translations``) and image edits
(``/v1/images/edits``) take ``multipart/form-data``, as the openai SDK sends them. ``read_form`` reads one part at
a time with aiohttp's ``MultipartReader`` (nothing is buffered before it is counted) and refuses, as soon as it
is seen:

* a body that is not ``multipart/form-data`` with a boundary, a form that breaks off, a part with more than
  aiohttp's 128 header lines or a header line over 8190 bytes, a nested multipart part: 400 ``multipart_invalid``;
* a part with a name the endpoint does not declare: 400 ``unsupported_parameter`` naming it (a file part under a
  text field's name, or text under a file's name, is ``multipart_invalid``);
* more file parts than the endpoint takes, or a field sent twice: 400 ``multipart_invalid``;
* a text field past ``MAX_FIELD_BYTES`` or not UTF-8: 400 ``invalid_value``;
* a file past its cap, or a form past its total cap: 413 (the spec's code: ``audio_too_large``,
  ``image_too_large``), read no further.

A part is data only: its file name and content type are the client's words and are never used as a path; no URL
a field names is fetched.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from aiohttp import BodyPartReader, MultipartReader, StreamReader
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDictProxy

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import refused

MAX_FIELD_BYTES = 64 * 1024  # a text field (a prompt, a language code): far more than any takes
MAX_PARTS = 64  # parts in one form, files and fields together
CHUNK = 64 * 1024


@dataclass(frozen=True)
class FormSpec:
    """What one endpoint's form may hold: its text fields, its file fields, and the caps on the files."""

    fields: frozenset[str]
    files: frozenset[str]  # a file field; ``name[]`` is the same field sent once per file
    max_files: int
    max_file_bytes: int
    max_total_bytes: int
    too_large: Code  # the code of a file or form past its cap (413)
    what: str = "file"  # how a refusal names the file ("audio file", "image")


@dataclass(frozen=True)
class Upload:
    """One file part: its field, the client's file name and type (words only, never a path), its bytes."""

    name: str
    filename: str | None
    content_type: str | None
    data: bytes


@dataclass(frozen=True)
class Form:
    """A form read whole: text fields by name, and the file parts in order."""

    fields: dict[str, str] = field(default_factory=dict)
    files: list[Upload] = field(default_factory=list)


def _invalid(message: str, param: str | None = None) -> RequestRefused:
    return refused(Code.MULTIPART_INVALID, message, param=param)


def reader_of(headers: CIMultiDictProxy[str], content: StreamReader) -> MultipartReader:
    """Return the reader of a body, or 400 ``multipart_invalid`` when it is not a form with a boundary."""
    content_type = headers.get("Content-Type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise _invalid(
            f"this endpoint takes multipart/form-data (as the openai SDK sends it), not {content_type or 'no type'}",
            param="Content-Type",
        )
    try:
        return MultipartReader(headers, content)
    except (KeyError, ValueError, AssertionError) as exc:
        raise _invalid(f"the multipart body has no usable boundary: {exc}", param="Content-Type") from None


async def read_form(reader: MultipartReader, spec: FormSpec) -> Form:
    """Return the form ``reader`` streams, held to ``spec`` (the refusals are the module docstring's)."""
    form = Form()
    total = 0
    parts = 0
    try:
        while True:
            part = await reader.next()
            if part is None:
                break
            if not isinstance(part, BodyPartReader):
                raise _invalid("a nested multipart part is not taken")
            parts += 1
            if parts > MAX_PARTS:
                raise _invalid(f"a form may hold at most {MAX_PARTS} parts")
            name = part.name
            if not name:
                raise _invalid("every part must have a name (Content-Disposition: form-data; name=...)")
            base = name.removesuffix("[]")
            if base in spec.files:
                if part.filename is None and base not in spec.fields:
                    raise _invalid(f"'{name}' must be a file part (with a filename)", param=base)
                if len(form.files) >= spec.max_files:
                    raise _invalid(f"send at most {spec.max_files} {spec.what}(s) in '{base}'", param=base)
                room = min(spec.max_file_bytes, spec.max_total_bytes - total)
                data = await _read_capped(part, room, spec, base)
                total += len(data)
                content_type = part.headers.get("Content-Type")
                form.files.append(Upload(base, part.filename, content_type, data))
            elif name in spec.fields:
                if part.filename is not None:
                    raise _invalid(f"'{name}' must be a text field, not a file", param=name)
                if name in form.fields:
                    raise _invalid(f"'{name}' is sent twice", param=name)
                raw = await _read_field(part, name)
                total += len(raw)
                if total > spec.max_total_bytes:
                    raise _too_large(spec, spec.max_total_bytes, "the form")
                try:
                    form.fields[name] = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise refused(Code.INVALID_VALUE, f"'{name}' is not valid UTF-8", param=name) from None
            else:
                message = f"'{name}' is not supported: the local runtime cannot honour it"
                raise refused(Code.UNSUPPORTED_PARAMETER, message, param=name)
    except RequestRefused:
        raise
    except (ValueError, AssertionError, RuntimeError, HttpProcessingError) as exc:  # aiohttp's refusals of a form
        raise _invalid(f"the multipart body is malformed: {exc}") from None
    return form


async def _read_field(part: BodyPartReader, name: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await part.read_chunk(CHUNK):
        size += len(chunk)
        if size > MAX_FIELD_BYTES:
            raise refused(Code.INVALID_VALUE, f"'{name}' is longer than {MAX_FIELD_BYTES} bytes", param=name)
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_capped(part: BodyPartReader, room: int, spec: FormSpec, param: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await part.read_chunk(CHUNK):
        size += len(chunk)
        if size > room:
            what = f"the {spec.what}" if room == spec.max_file_bytes else "the form"
            raise _too_large(spec, room, what, param)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(spec: FormSpec, limit: int, what: str, param: str | None = None) -> RequestRefused:
    return refused(spec.too_large, f"{what} is larger than {limit} bytes", param=param, status=413)


def encode_form(fields: dict[str, str], files: list[Upload]) -> tuple[bytes, str]:
    """Return a form's body and content type, as the front sends it on to a worker (its own names, checked)."""
    boundary = secrets.token_hex(16)
    out = bytearray()
    for name, value in fields.items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        out += value.encode() + b"\r\n"
    for upload in files:
        out += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{upload.name}"; filename="{upload.filename}"\r\n'
            f"Content-Type: {upload.content_type or 'application/octet-stream'}\r\n\r\n"
        ).encode()
        out += upload.data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"
