"""mlx-vlm's embedding models, served on the front's private Unix socket: ``POST /v1/embeddings``, ``GET /health``.

The model loads as mlx_vlm's own server loads an embedding model (``load_embedding_model``, the
sentence-transformers pooling config of ``1_Pooling/``, ``load_processor``'s tokenizer), before the socket
listens, so a connection that succeeds means the model is loaded. A request's inputs are strings (tokenized
with the model's tokenizer, no special tokens added beyond what it adds itself) or token-id lists; they are
embedded in padded batches of ``BATCH`` and the model's own pooling and normalisation give each vector (a
padded batch gives the vectors one-by-one calls give: the attention mask hides the padding).

``dimensions`` truncates the vectors to their first N values and renormalises them, only where the model says
it was trained for that (``matryoshka_dimensions`` in config.json, jina-embeddings-v3's key); otherwise a
``dimensions`` other than the model's own is refused. An input longer than the model's window is refused
(``context_length_exceeded``), never cut. Requests are served one at a time (MLX is not thread-safe).

Every request is read off the socket under the front's limits, as the mlx_lm worker reads its own
(``socket_limits``, ``read_deadlines``; the contract's ``max_body_bytes``, ``header_timeout`` and
``body_timeout`` set them): a body past the cap is 413 unread, headers that do not arrive
within their deadline close the connection and a late body is 408 ``body_timeout``, so a slow or endless
request cannot hold this one-at-a-time worker.

``EMBED_SEAMS`` names what we call in mlx_vlm; a changed name stops the worker before it listens.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import inspect
import json
import os
import signal
import socketserver
import sys
from pathlib import Path
from typing import Any

from mlx_agent.api_errors import Code, Family, error_body
from mlx_agent.errors import SeamChanged
from mlx_agent.runtime.entries.contract_entry import started
from mlx_agent.runtime.entries.mlx_vlm_server import bind_private
from mlx_agent.runtime.serving import socket_limits
from mlx_agent.runtime.serving.read_deadlines import ReadDeadlines
from mlx_agent.worker_routes import WorkerRoute

EMBED_SEAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "mlx_vlm.embedding_loader": {"load_embedding_model": ("model_path",)},
    "mlx_vlm.models.pooling": {"read_pooling_config": ("model_dir",)},
    "mlx_vlm.utils": {"load_processor": ("model_path",)},
}
REMEDIATION = "Install the mlx-vlm version range mlx-agent pins (see pyproject.toml); a name the entry uses changed."
BATCH = 32  # inputs per forward pass
MAX_INPUTS = 2048  # per request, as OpenAI's API
MATRYOSHKA_KEY = "matryoshka_dimensions"
PROBE = "dimension probe"


def check_embed_seams() -> None:
    """Raise ``SeamChanged`` naming the first mlx_vlm callable the entry uses that is missing or changed."""
    import importlib

    for module_name, callables in EMBED_SEAMS.items():
        module = importlib.import_module(module_name)
        for name, params in callables.items():
            target = getattr(module, name, None)
            if target is None:
                raise SeamChanged(f"{module_name}.{name} no longer exists", remediation=REMEDIATION)
            names = list(inspect.signature(target).parameters)
            if names[: len(params)] != list(params):
                raise SeamChanged(
                    f"{module_name}.{name} now takes {names}, expected to start with {list(params)}",
                    remediation=REMEDIATION,
                )


class Refused(Exception):
    """A request this worker answers with an error body."""

    def __init__(self, code: Code, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


class Embedder:
    """One loaded embedding model: its tokenizer, its window, its width and the widths it may be cut to."""

    def __init__(self, model_dir: Path) -> None:
        import importlib

        import mlx.core as mx

        loader: Any = importlib.import_module("mlx_vlm.embedding_loader")  # mlx_vlm is untyped
        pooling: Any = importlib.import_module("mlx_vlm.models.pooling")
        utils: Any = importlib.import_module("mlx_vlm.utils")
        self.mx = mx
        self.model = loader.load_embedding_model(model_dir)
        self.model.pooling_config = pooling.read_pooling_config(model_dir)  # as mlx_vlm's server sets it
        processor = utils.load_processor(model_dir, add_detokenizer=False)
        self.tokenizer = getattr(processor, "tokenizer", processor)
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
        self.vocab_size = int(config.get("vocab_size") or text.get("vocab_size") or 0) or None
        window = config.get("max_position_embeddings") or text.get("max_position_embeddings")
        limit = getattr(self.tokenizer, "model_max_length", None)
        bounds = [v for v in (window, limit) if isinstance(v, int) and 0 < v < 10**9]
        self.max_length = min(bounds) if bounds else None
        pad = getattr(self.tokenizer, "pad_token_id", None)
        self.pad_id = int(pad) if isinstance(pad, int) else int(config.get("pad_token_id") or 0)
        declared = config.get(MATRYOSHKA_KEY)
        self.matryoshka = sorted(d for d in declared if isinstance(d, int)) if isinstance(declared, list) else None
        vectors, _ = self.embed([self.tokenize(PROBE)])
        self.dimension = len(vectors[0])

    def tokenize(self, text: str) -> list[int]:
        """Return the model tokenizer's ids for ``text``."""
        ids = self.tokenizer(text)["input_ids"]
        return [int(i) for i in ids]

    def embed(self, batch: list[list[int]], dimensions: int | None = None) -> tuple[list[list[float]], int]:
        """Return the pooled, normalised vector of each id list, in order, and the tokens read."""
        mx = self.mx
        vectors: list[list[float]] = []
        for start in range(0, len(batch), BATCH):
            chunk = batch[start : start + BATCH]
            width = max(len(ids) for ids in chunk)
            ids = mx.array([[*ids, *[self.pad_id] * (width - len(ids))] for ids in chunk])
            mask = mx.array([[1] * len(ids) + [0] * (width - len(ids)) for ids in chunk])
            out = self.model(ids, attention_mask=mask).text_embeds
            if dimensions is not None and dimensions < out.shape[-1]:
                out = out[:, :dimensions]  # Matryoshka: the first N values, renormalised
                out = out / mx.maximum(mx.linalg.norm(out, axis=-1, keepdims=True), 1e-9)
            out = out.astype(mx.float32)
            mx.eval(out)
            vectors.extend(out.tolist())
        return vectors, sum(len(ids) for ids in batch)

    def check_dimensions(self, dimensions: object) -> int | None:
        """Return the width a request asks for (None: the model's own); refuse one the model cannot give."""
        if dimensions is None:
            return None
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
            raise Refused(Code.INVALID_VALUE, "'dimensions' must be a positive integer", "dimensions")
        if dimensions == self.dimension:
            return None
        if self.matryoshka is None:
            raise Refused(
                Code.UNSUPPORTED_PARAMETER,
                f"this model gives {self.dimension}-dimensional vectors and declares no Matryoshka dimensions "
                f"({MATRYOSHKA_KEY} in config.json), so they cannot be shortened; omit 'dimensions'",
                "dimensions",
            )
        if dimensions > self.dimension:
            raise Refused(
                Code.INVALID_VALUE, f"'dimensions' must be at most the model's {self.dimension}", "dimensions"
            )
        return dimensions

    def ids_of(self, inputs: object) -> list[list[int]]:
        """Return the token ids of each input (strings, or token-id lists as sent); refuse other shapes."""
        if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs:
            raise Refused(Code.INVALID_VALUE, "'input' must be a string, a list of strings or token-id lists", "input")
        if len(inputs) > MAX_INPUTS:
            raise Refused(Code.INVALID_VALUE, f"'input' may hold at most {MAX_INPUTS} entries", "input")
        out = []
        for index, item in enumerate(inputs):
            where = f"input.{index}"
            if isinstance(item, str):
                ids = self.tokenize(item)
            elif isinstance(item, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in item):
                ids = list(item)
                if self.vocab_size is not None and any(t < 0 or t >= self.vocab_size for t in ids):
                    raise Refused(Code.INVALID_VALUE, f"token ids must lie in [0, {self.vocab_size})", where)
            else:
                raise Refused(Code.INVALID_TYPE, "each input must be a string or a list of token ids", where)
            if not ids:
                raise Refused(Code.EMPTY_PROMPT, "an input must not be empty", where)
            if self.max_length is not None and len(ids) > self.max_length:
                raise Refused(
                    Code.CONTEXT_LENGTH_EXCEEDED,
                    f"an input is {len(ids)} tokens; this model reads at most {self.max_length} (nothing is cut)",
                    where,
                )
            out.append(ids)
        return out

    def answer(self, body: dict[str, Any], model_name: str) -> dict[str, Any]:
        """Return the OpenAI embeddings reply for a request body."""
        dimensions = self.check_dimensions(body.get("dimensions"))
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64", None):
            raise Refused(Code.INVALID_VALUE, "'encoding_format' must be 'float' or 'base64'", "encoding_format")
        vectors, tokens = self.embed(self.ids_of(body.get("input")), dimensions)
        data = []
        for index, vector in enumerate(vectors):
            value: Any = vector if fmt != "base64" else as_base64(vector)
            data.append({"object": "embedding", "index": index, "embedding": value})
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"object": "list", "data": data, "model": model_name, "usage": usage}


def as_base64(vector: list[float]) -> str:
    """Return a vector as OpenAI's base64: little-endian float32 values."""
    import struct

    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def handler_for(embedder: Embedder, model_name: str) -> type[ReadDeadlines]:
    """Return the request handler of one loaded model."""

    class Handler(ReadDeadlines):
        protocol_version = "HTTP/1.1"

        def address_string(self) -> str:
            return "front"  # a Unix socket's peer has no address

        def log_message(self, format: str, *args: Any) -> None:
            return  # the front logs every request line

        def reply(self, status: int, doc: dict[str, Any]) -> None:
            raw = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(raw)
            self.close_connection = True

        def refuse(self, code: Code, message: str, param: str | None = None, status: int | None = None) -> None:
            body = error_body(Family.OPENAI, code, message, param=param, status=status)
            self.reply(status or code.status, body)

        def read_body(self) -> bytes | None:
            """Return the request's body read under the limits; None once it was refused or its client left."""
            length = self.headers.get("Content-Length")
            if length is None:
                self.refuse(Code.LENGTH_REQUIRED, "a Content-Length header is required")
                return None
            if not length.strip().isdigit():
                self.refuse(Code.INVALID_JSON, "Content-Length is not a number")
                return None
            size, cap = int(length), socket_limits.current().max_body_bytes
            if size > cap:
                message = f"the request body is {size} bytes; this server takes at most {cap}"
                self.refuse_unread(lambda: self.refuse(Code.BODY_TOO_LARGE, message))
                return None
            try:
                raw = self.rfile.read(size)
            except TimeoutError:  # the body did not arrive within its deadline
                self.refuse_unread(
                    lambda: self.refuse(Code.BODY_TIMEOUT, "the request body did not arrive in time; send it at once")
                )
                return None
            if len(raw) < size:  # the client went away mid-body: nobody to answer
                self.close_connection = True
                return None
            if self.reader is not None:
                self.reader.lift()  # embedding may take as long as it takes
            return raw

        def do_GET(self) -> None:
            if self.path == "/health":
                self.reply(200, {"status": "ok", "model": model_name, "dimensions": embedder.dimension})
            else:
                self.refuse(Code.UNKNOWN_ENDPOINT, f"no such endpoint: {self.path}")

        def do_POST(self) -> None:
            if WorkerRoute.at(self.path) is not WorkerRoute.EMBEDDINGS:
                self.refuse(Code.UNKNOWN_ENDPOINT, f"no such endpoint: {self.path}")
                return
            raw = self.read_body()
            if raw is None:
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self.refuse(Code.INVALID_JSON, "the body is not JSON")
                return
            if not isinstance(body, dict):
                self.refuse(Code.INVALID_BODY, "the body must be a JSON object")
                return
            try:
                self.reply(200, embedder.answer(body, model_name))
            except Refused as refusal:
                self.refuse(refusal.code, refusal.message, refusal.param)
            except Exception as exc:  # a model's failure: reported, and the worker keeps serving
                self.refuse(Code.GENERATION_FAILED, f"embedding failed: {type(exc).__name__}: {exc}")

    return Handler


def serve(argv: list[str]) -> int:
    """Load the model named by ``--model`` and serve it on the socket named by ``--mlx-agent-socket``."""
    try:
        check_embed_seams()
    except SeamChanged as error:
        print(f"mlx-agent: cannot wrap this mlx_vlm: {error}", file=sys.stderr)
        return 2
    given, argv = started(argv, socket=True)
    socket_limits.configure(socket_limits.from_contract(given.contract))  # what every request is read under
    parser = argparse.ArgumentParser(prog="mlx_agent.runtime mlx-vlm-embed")
    parser.add_argument("--model", required=True)
    args = parser.parse_args(argv)
    socket_path = given.socket or ""
    embedder = Embedder(Path(args.model))  # loaded before the socket exists: readiness means loaded
    sock = bind_private(socket_path)
    server = socketserver.UnixStreamServer(socket_path, handler_for(embedder, args.model), bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.server_activate()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # unwinds serve_forever, so the socket is removed
    print(f"mlx-agent: serving embeddings of {args.model} ({embedder.dimension} dimensions)", file=sys.stderr)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
    return 0
