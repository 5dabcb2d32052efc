"""A front over media workers for the media endpoints' tests: a stand-in worker per kind, and the fleet's config.

``media_config`` builds a fleet of one model per kind (``MODELS``) plus a chat model, each over the argv its kind
is given: ``standin_argv`` here, the real wrapped media entries once they exist (swap ``argv_of`` and nothing else).

The stand-in answers mlx-vlm's media paths as its server does (speech: audio bytes of the asked format; audio:
a form, JSON or text by ``response_format``; images: JSON with ``b64_json`` and a ``path`` the front must drop;
edits: JSON naming image paths, which it opens) and appends one JSON line per request to ``STANDIN_LOG``: what
it was sent, for the tests to read. A speech ``input`` of ``x-fail`` is answered 500 in FastAPI's shape,
``x-html`` with an HTML page; with ``stream`` it sends one piece, waits for the file ``STANDIN_GO`` names, then
sends the rest (``x-cut``: hangs up after the first piece).
"""

from __future__ import annotations

import copy
import io
import json
import sys
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.gateway_support import fake_worker_argv, gateway_config

STANDIN = r"""
import argparse, base64, io, json, os, sys, time, wave
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
a, _ = p.parse_known_args()
LOG = os.environ["STANDIN_LOG"]
PNG = base64.b64encode(bytes.fromhex(os.environ["STANDIN_PNG"])).decode()

def note(doc):
    with open(LOG, "a") as fh:
        fh.write(json.dumps(doc) + "\n")

def wav(seconds=0.1):
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(8000); w.writeframes(b"\x01\x00" * int(8000 * seconds))
    return out.getvalue()

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, ctype):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.send(200, b'{"status": "ok"}', "application/json")

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        ctype = self.headers["Content-Type"]
        if self.path == "/v1/audio/speech":
            body = json.loads(raw)
            note({"path": self.path, "body": body})
            if body["input"] == "x-fail":
                return self.send(500, b'{"detail": "stand-in failure"}', "application/json")
            if body["input"] == "x-html":
                return self.send(200, b"<html>hi</html>", "text/html")
            audio = wav() if body["response_format"] == "wav" else b"\x01\x00" * 800
            mime = "audio/" + body["response_format"]
            if not body.get("stream"):
                return self.send(200, audio, mime)
            self.send_response(200)
            self.send_header("Content-Type", mime)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for index in range(3):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(audio), audio))
                self.wfile.flush()
                if body["input"] == "x-cut":
                    self.close_connection = True
                    return
                if index == 0:
                    while not os.path.exists(os.environ["STANDIN_GO"]):
                        time.sleep(0.01)
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path in ("/v1/audio/transcriptions", "/v1/audio/translations"):
            form = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + raw)
            fields, files = {}, {}
            for part in form.iter_parts():
                name = part.get_param("name", header="content-disposition")
                data = part.get_payload(decode=True)
                if part.get_filename() is None:
                    fields[name] = data.decode()
                else:
                    with wave.open(io.BytesIO(data)) as w:
                        files[name] = {"filename": part.get_filename(), "type": part.get_content_type(),
                                       "channels": w.getnchannels(), "rate": w.getframerate(),
                                       "width": w.getsampwidth(), "frames": w.getnframes()}
            note({"path": self.path, "content_type": ctype.split(";")[0], "fields": fields, "files": files})
            if fields.get("response_format") in ("text", "srt", "vtt"):
                return self.send(200, b"stand-in transcript", "text/plain; charset=utf-8")
            return self.send(200, json.dumps({"text": "stand-in transcript"}).encode(), "application/json")
        if self.path in ("/v1/images/generations", "/v1/images/edits"):
            body = json.loads(raw)
            seen = {}
            for path in body.get("image") or []:
                with open(path, "rb") as fh:
                    seen[path] = len(fh.read())
            note({"path": self.path, "body": body, "opened": seen})
            data = [{"b64_json": PNG, "path": "/tmp/leak.png", "revised_prompt": body["prompt"], "width": 1,
                     "height": 1, "seed": 1} for _ in range(body.get("n", 1))]
            return self.send(200, json.dumps({"created": 7, "data": data, "size": "1x1"}).encode(), "application/json")
        self.send(404, b'{"detail": "Not Found"}', "application/json")

print("stand-in media worker: listening", flush=True)
ThreadingHTTPServer(("127.0.0.1", a.port), H).serve_forever()
"""

# A 16x16 PNG: what the stand-in draws, and an image to edit.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000010000000100802000000909168360000001949444154789c63e41239c1400a60"
    "2249f5a886510d434a0300f20401060d40fe650000000049454e44ae426082"
)

# The fleet: a served name per kind ("text": over the chat stand-in, tests/gateway_support.py).
MODELS = {"org/speech": "speech", "org/stt": "transcription", "org/image": "image_generation", "org/chat": "text"}


def standin_argv(directory: Path) -> Callable[[str], list[str]]:
    """Write the stand-in media worker and return the argv of a kind's worker (a chat model: the chat stand-in)."""
    script = directory / "standin_media_worker.py"
    script.write_text(STANDIN)
    chat = fake_worker_argv(directory)
    media = [sys.executable, str(script), "--host", "127.0.0.1", "--port", "{port}"]
    return lambda kind: chat if kind == "text" else media


def media_config(directory: Path, port: int, argv_of: Callable[[str], list[str]], **front: Any) -> dict[str, Any]:
    """Return a front config serving one model per ``MODELS`` entry, each over ``argv_of(kind)``."""
    config = gateway_config(directory, port, argv_of("text"), model_path=directory / "model")
    first = config["models"][0]
    config["models"] = []
    for index, (name, kind) in enumerate(MODELS.items()):
        model = copy.deepcopy(first)
        model.update(served_model_name=name, hidden_names=[])
        model["worker"]["argv"] = argv = argv_of(kind)
        model["worker"]["transport"] = "unix" if any("{socket}" in a for a in argv) else "tcp"
        model["worker"]["kind"] = kind
        model["worker"]["log_path"] = str(directory / f"worker-{index}.log")
        model["worker"]["env"].update(
            STANDIN_LOG=str(log_path(directory)), STANDIN_GO=str(directory / "go"), STANDIN_PNG=PNG.hex()
        )
        config["models"].append(model)
    config["socket_dir"] = str(directory / "sockets")
    (directory / "sockets").mkdir(mode=0o700, exist_ok=True)
    config.update(front)
    return config


def log_path(directory: Path) -> Path:
    """Return the file the stand-in workers note their requests in."""
    return directory / "standin.jsonl"


def noted(directory: Path) -> list[dict[str, Any]]:
    """Return what the stand-in workers were sent, in order."""
    path = log_path(directory)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wav_bytes(seconds: float, *, rate: int = 22_050, channels: int = 2) -> bytes:
    """Return a 16-bit PCM WAV of ``seconds`` of a quiet tone."""
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(b"\x10\x00" * int(rate * seconds) * channels)
    return out.getvalue()


def form_body(fields: dict[str, str], files: list[tuple[str, str, bytes]], boundary: str = "b0undary") -> bytes:
    """Return a multipart form body (``files``: field, file name, bytes) as a client would write it."""
    out = b""
    for name, value in fields.items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
    for name, filename, data in files:
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
        out += (head + "Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


FORM_TYPE = "multipart/form-data; boundary=b0undary"
