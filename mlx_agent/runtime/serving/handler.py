"""Our subclass of mlx_lm's ``APIHandler``: checked requests, honest errors, kept tool calls.

``do_POST`` reads and checks the body first (``request_options.prepare_body``) and hands mlx_lm the prepared
body, so mlx_lm parses what we decided; ``/v1/tokenize`` the wrapper answers itself (``tokenize``). Errors are
answered as OpenAI-style error objects with the right status (``errors_http``): mlx_lm's own validation is
translated, and the ``HttpError`` signals raised under mlx_lm's ``except Exception`` blocks arrive here. A client
that went away is logged, not a traceback.

Every request is read under the front's limits (``socket_limits``): a body over the cap is 413 unread, and
the headers and the body each have a deadline, past which the connection is closed (408 for a body), so
no client holds a handler thread or the worker's memory with a slow or endless request.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Mapping
from typing import Any

import mlx_lm.server as server

from mlx_agent.api_errors import Code, Family, error_body
from mlx_agent.bodies import load_json
from mlx_agent.errors import BodyInvalid, ClientGone, HttpError
from mlx_agent.runtime.reply.tool_calls import MARKER, UnparsedToolCall, as_written, split_calls
from mlx_agent.runtime.serving import socket_limits
from mlx_agent.runtime.serving.errors_http import api_error, bad_request, from_upstream_validation
from mlx_agent.runtime.serving.generator import WrappedGenerator, WrappedRequest
from mlx_agent.runtime.serving.prompt_size import refuse_if_too_long
from mlx_agent.runtime.serving.read_deadlines import ReadDeadlines
from mlx_agent.runtime.serving.request_options import RequestOptions, prepare_body
from mlx_agent.runtime.serving.tokenize import tokenize
from mlx_agent.wire import GRANTED_MAX_TOKENS_HEADER
from mlx_agent.worker_routes import BodyKind, WorkerRoute

log = logging.getLogger(__name__)

# The routes this worker answers (embedding is mlx-vlm's): mlx_lm generates, the wrapper tokenizes (``tokenize``).
SERVED = (WorkerRoute.CHAT, WorkerRoute.COMPLETIONS, WorkerRoute.TOKENIZE)


class WrappedHandler(ReadDeadlines, server.APIHandler):
    """mlx_lm's request handler with the wrapper's request checks, errors and tool-call handling."""

    response_generator: WrappedGenerator
    # Per request (mlx_lm's handler speaks HTTP/1.0: one request per handler), reset by do_POST.
    headers_flushed = False
    options = RequestOptions()
    tool_calls_parsed = 0
    wrapped_request: WrappedRequest | None = None
    body_unread = False

    def address_string(self) -> str:
        """Name the client in mlx_lm's log lines (a Unix socket's peer has no address)."""
        return self.client_address[0] if isinstance(self.client_address, tuple) else "front"

    def do_GET(self) -> None:
        """Answer mlx_lm's GET endpoints; any other path is a 404 error object (mlx_lm writes plain text)."""
        if self.path.startswith("/v1/models") or self.path == "/health":
            super().do_GET()  # type: ignore[no-untyped-call]
            return
        self._answer_error(api_error(Code.UNKNOWN_ENDPOINT, f"There is no GET endpoint {self.path!r}."))

    def do_POST(self) -> None:
        """Answer a POST: check and prepare the body, let mlx_lm serve it, answer errors as objects."""
        self._reset()
        try:
            route = WorkerRoute.at(self.path)
            if route not in SERVED:
                raise api_error(Code.UNKNOWN_ENDPOINT, f"There is no POST endpoint {self.path!r}.")
            body = self._read_body()
            if route is WorkerRoute.TOKENIZE:
                generator = self.response_generator
                self._answer_json(tokenize(body, generator.served, generator.model_provider.tokenizer))
                return
            self._prepare(body, chat=route is not None and route.kind is BodyKind.MESSAGES)
            super().do_POST()  # type: ignore[no-untyped-call]
        except HttpError as error:
            if self.body_unread:
                self._refuse(error)
            else:
                self._answer_error(error)
        except TimeoutError:  # the body did not arrive within its deadline
            self.close_connection = True
            self._refuse(api_error(Code.BODY_TIMEOUT, "The request body did not arrive in time; send it at once."))
        except ClientGone:
            pass  # the stream logged it and stopped the generation
        except (BrokenPipeError, ConnectionResetError):
            stream = self.wrapped_request.stream if self.wrapped_request else None
            if stream is not None:
                stream.abandon("the client went away (a write failed)")
            else:
                log.info("mlx-agent: the client went away before its answer was written")

    def _reset(self) -> None:
        self.headers_flushed = False
        self.options = RequestOptions()
        self.tool_calls_parsed = 0
        self.wrapped_request = None
        self.body_unread = False

    def _read_body(self) -> dict[str, Any]:
        """Return the request's JSON object, read under the front's limits (a refusal is an ``HttpError``)."""
        length = self.headers.get("Content-Length")
        if length is None:
            raise api_error(Code.LENGTH_REQUIRED, "A Content-Length header is required.")
        if not length.strip().isdigit():
            raise bad_request("Content-Length is not a number.", code=Code.INVALID_JSON)
        size, cap = int(length), socket_limits.current().max_body_bytes
        if size > cap:
            self.body_unread = True
            raise api_error(Code.BODY_TOO_LARGE, f"The request body is {size} bytes; this server takes at most {cap}.")
        raw = self.rfile.read(size)
        if len(raw) < size:
            log.info("mlx-agent: the client went away after %d of its %d body bytes", len(raw), size)
            self.close_connection = True
            raise ClientGone
        if self.reader is not None:
            self.reader.lift()  # the reply may take as long as it takes
        try:
            return load_json(raw)
        except BodyInvalid as error:
            raise bad_request(error.message, param=error.param, code=error.code) from None

    def _prepare(self, body: dict[str, Any], *, chat: bool) -> None:
        """Check and prepare a generation's body, and put it back for mlx_lm to read."""
        self._check_token_ids(body.get("logit_bias"))
        body, self.options = prepare_body(body, self.response_generator.served, chat=chat)
        generator = self.response_generator  # a prompt that cannot fit is refused here, before it is tokenized
        refuse_if_too_long(body, chat, generator.context_window, generator.model_provider.tokenizer)
        prepared = json.dumps(body).encode()
        self.headers.replace_header("Content-Length", str(len(prepared)))
        self.rfile = io.BytesIO(prepared)

    def _check_token_ids(self, bias: object) -> None:
        """Refuse a logit_bias key past the model's vocabulary (mlx would index out of its logits)."""
        if not isinstance(bias, dict) or not bias:
            return
        width = self.response_generator.output_width()
        for key in bias:
            try:
                token = int(key)
            except (TypeError, ValueError):
                token = -1
            if not 0 <= token < width:
                raise bad_request(
                    f"logit_bias key {key!r} is not a token id of this model (its vocabulary has {width}).",
                    param=f"logit_bias.{key}",
                )

    def _set_completion_headers(self, status_code: int = 200) -> None:
        """Start mlx_lm's JSON head, saying so when the context's room cut the reply limit."""
        super()._set_completion_headers(status_code)
        self._granted_header(status_code)

    def _set_stream_headers(self, status_code: int = 200) -> None:
        """Start mlx_lm's stream head, saying so when the context's room cut the reply limit."""
        super()._set_stream_headers(status_code)
        self._granted_header(status_code)

    def _granted_header(self, status_code: int) -> None:
        cut = self.wrapped_request.cut_max_tokens if self.wrapped_request is not None else None
        if status_code == 200 and cut is not None:
            self.send_header(GRANTED_MAX_TOKENS_HEADER, str(cut))

    def end_headers(self) -> None:
        """Send the headers, remembering that the status can no longer change."""
        self.headers_flushed = True
        super().end_headers()

    def validate_model_parameters(self) -> None:
        """Run mlx_lm's checks; a failure is a 400 naming the parameter, as an error object."""
        try:
            super().validate_model_parameters()
        except ValueError as error:
            raise from_upstream_validation(error) from None

    def handle_chat_completions(self) -> WrappedRequest:
        """Build mlx_lm's chat request, carrying the wrapper's options and the client's socket."""
        return self._wrap(super().handle_chat_completions())

    def handle_text_completions(self) -> WrappedRequest:
        """Build mlx_lm's text request, carrying the wrapper's options and the client's socket."""
        return self._wrap(super().handle_text_completions())

    def _wrap(self, base: Any) -> WrappedRequest:
        self.wrapped_request = WrappedRequest.wrap(base, self.options, self.request_id, self.connection)
        return self.wrapped_request

    def generate_response(
        self,
        text: str,
        finish_reason: Any,
        prompt_token_count: int | None = None,
        completion_token_count: int | None = None,
        prompt_cache_count: int | None = None,
        token_logprobs: list[float] | None = None,
        top_tokens: list[Any] | None = None,
        tokens: list[int] | None = None,
        tool_calls: list[Any] | None = None,
        reasoning_text: str | None = None,
    ) -> dict[str, Any]:
        """Build mlx_lm's response, moving tool calls that did not parse into the content and the marker."""
        parsed, unparsed = split_calls(tool_calls)
        marked: list[tuple[str, UnparsedToolCall]] = []  # text a parser said is no call (``PlainText``) is content
        if self.options.one_tool_call:
            parsed = parsed[: max(0, 1 - self.tool_calls_parsed)]  # parallel_tool_calls: false keeps the first
        self.tool_calls_parsed += len(parsed)
        if unparsed:
            tokenizer: Any = self.response_generator.model_provider.tokenizer
            start, end = self.response_generator.call_markers(tokenizer)
            written = [
                as_written(call, start, end, finished=finish_reason != "length" or index < len(unparsed) - 1)
                for index, call in enumerate(unparsed)
            ]
            text = (text or "") + "".join(written)
            marked = [(text_, call) for text_, call in zip(written, unparsed, strict=True) if call.marked]
        if finish_reason == "tool_calls" and not self.tool_calls_parsed:
            finish_reason = "stop"  # no call the client can run
        response: dict[str, Any] = super().generate_response(
            text,
            finish_reason,
            prompt_token_count,
            completion_token_count,
            prompt_cache_count,
            token_logprobs=token_logprobs,
            top_tokens=top_tokens,
            tokens=tokens,
            tool_calls=parsed,  # type: ignore[arg-type]  # upstream annotates str; it passes formatted dicts
            reasoning_text=reasoning_text,
        )
        if marked:
            choice = response["choices"][0]
            message = choice.get("message") or choice.get("delta")
            if message is not None:
                message[MARKER] = [{"text": text_, "error": call["error"]} for text_, call in marked]
        return response

    def completion_usage_response(
        self,
        prompt_token_count: int | None = None,
        completion_token_count: int | None = None,
        prompt_cache_count: int | None = None,
    ) -> dict[str, Any]:
        """Build the stream's usage chunk under the stream's own object (mlx_lm writes ``chat.completion``)."""
        response: dict[str, Any] = super().completion_usage_response(
            prompt_token_count, completion_token_count, prompt_cache_count
        )
        response["object"] = self.object_type
        return response

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Answer http.server's own refusals (an unknown method, a malformed request line) as error objects."""
        allow = None
        if code == 501:  # a method with no do_ handler
            code, allow = 405, "GET, POST"
            message = f"{self.command} is not allowed; use GET or POST."
        kind = Code.METHOD_NOT_ALLOWED if allow else Code.BAD_REQUEST
        if self.request_version == "HTTP/0.9":  # a request line too broken to name a version: answer with a head
            self.request_version = "HTTP/1.0"
        body = json.dumps(error_body(Family.OPENAI, kind, message or explain or "bad request", status=code)).encode()
        self.log_error("code %d, message %s", code, message)
        self.send_response(code, message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if allow:
            self.send_header("Allow", allow)
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(body)

    def _answer_json(self, doc: Mapping[str, object]) -> None:
        """Answer 200 with ``doc``, in mlx_lm's JSON head (what the wrapper answers itself: ``tokenize``)."""
        body = json.dumps(doc).encode()
        self._set_completion_headers(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _refuse(self, error: HttpError) -> None:
        """Answer a refusal to a client that may have stopped reading (``ReadDeadlines.refuse_unread``)."""
        self.refuse_unread(lambda: self._answer_error(error))

    def _answer_error(self, error: HttpError) -> None:
        log.info("mlx-agent: answered %d to %s %s: %s", error.status, self.command, self.path, error.message)
        body = json.dumps(error.body()).encode()
        if not self.headers_flushed:
            # A non-streaming reply buffers its 200 status line until it is complete; drop it.
            self._headers_buffer: list[bytes] = []
            self._set_completion_headers(error.status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif getattr(self, "stream", False):
            self.wfile.write(b"data: " + body + b"\n\n")
        self.wfile.flush()
