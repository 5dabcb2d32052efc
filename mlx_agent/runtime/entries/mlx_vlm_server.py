"""mlx_vlm.server, wrapped to listen on the Unix socket its front gives it and to keep late system messages in place.

mlx_vlm's CLI ends in ``uvicorn.run(app, host=..., port=...)``. We bind a socket private to this user (0600,
inside the front's 0700 directory) before that, and hand uvicorn its descriptor instead of a host and port:
uvicorn's own ``uds=`` would widen the socket to 0666. uvicorn listens on it only after mlx_vlm's lifespan
has loaded the model, so a connection that succeeds means the model is loaded.

mlx_vlm folds every system (and developer) message into the first one before it renders
(``_normalize_instruction_messages``), so a late reminder rewrote the start of the prompt. We replace that one
name where the chat, Responses and compaction code look it up (``InstructionPlacer``): the leading system
messages still join into one, and later ones stay at their place. Every endpoint then renders through
``mlx_vlm.server.apply_chat_template``, the one place where a request's messages meet its ``tools`` and the
template, so we replace that name (``AdaptedRender``): the conversation is adapted there exactly as the mlx_lm
worker adapts it (``conversation.Conversations``: late system messages written as the template allows, short
ids, single calls, joined users, the system message in the first user turn), decided by rendering probes through
mlx_vlm's own function with the request's tools and the generation prompt; a template that still refuses is a
400 ``template_error`` with the ``--chat-template`` remedy (``TemplateRefusal``), never mlx_vlm's 500. The load
is read in parts and each prefill step is copied to the front's progress file (``install_progress``). Everything else is
mlx_vlm's own server, unchanged, behind two walls around its app: the front's body cap and deadline
(``asgi_limits``), then the media wall (``media_wall``: a media part naming a URL or a path is 400, so mlx_vlm
never fetches or opens one). ``VLM_SEAMS`` names what we rely on; a changed name, or a media part type the wall
does not know, stops the worker before it listens (tests/unit/test_vlm_seams.py).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException

from mlx_agent.errors import HttpError, SeamChanged
from mlx_agent.runtime.entries.media_wall import MediaWall, check_media_types
from mlx_agent.runtime.serving.conversation import Conversations, template_failed
from mlx_agent.runtime.serving.errors_http import from_generation_error
from mlx_agent.runtime.serving.progress import Board
from mlx_agent.runtime.serving.system_turns import SYSTEM_ROLES, place, text_of

NORMALIZER = "_normalize_instruction_messages"
RENDERER = "apply_chat_template"  # in mlx_vlm.server: every endpoint renders through this name (AdaptedRender)
GENERATION = "mlx_vlm.server.generation"
THINKING_BUDGET = "get_server_thinking_budget"  # a request's default thinking budget, read from mlx_vlm's env
# The worker's log line at start: what mlx_vlm's own config holds of the plan's start-up options (settings_line).
SETTINGS_LINE = "mlx-agent: mlx_vlm settings "
SETTINGS = (
    "kv_bits",
    "kv_quant_scheme",
    "kv_group_size",
    "max_kv_size",
    "vision_cache_size",
    "draft_model",
    "draft_kind",
)
PROMPT_TOKENS = "mlx_agent_prompt_tokens"  # our key in mlx_vlm's per-request state: its prompt's length, until read
# Modules of mlx_vlm whose global ``NORMALIZER`` we replace (each looks it up at call time).
PLACED_IN = ("mlx_vlm.server.openai", "mlx_vlm.server.compaction")
# Callables of mlx_vlm (and uvicorn) we call or replace, with the parameters (in order, from the first) we rely on.
VLM_SEAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "mlx_vlm.server.openai": {
        NORMALIZER: ("chat_messages", "instructions"),
        "chat_completions_endpoint": (),
        # the media wall's seam: where mlx_vlm picks a request's media out by part type (media_wall.MEDIA_READERS)
        "_extract_video_reference": ("item",),
        "_decode_input_audio_data": ("input_audio",),
    },
    "mlx_vlm.server.compaction": {NORMALIZER: ("chat_messages", "instructions")},
    # the conversation is adapted where the endpoints render (AdaptedRender), its probes rendered by the original
    "mlx_vlm.server": {RENDERER: ("processor", "config", "prompt", "add_generation_prompt")},
    "mlx_vlm.server.runtime": {"ModelCacheRegistry.for_kind": ("self", "kind")},
    "mlx_vlm.server.cli": {"main": ()},
    # the settings line (settings_line): mlx_vlm's own config as its CLI captured it, and its thinking budget
    "mlx_vlm.server.runtime_config": {"RuntimeConfig.current": ("self",)},
    "mlx_vlm.server.request_normalization": {NORMALIZER: ("chat_messages", "instructions"), THINKING_BUDGET: ()},
    "uvicorn": {"run": ("app",)},
    # load and prefill progress (install_progress): the load we wrap, the prefill steps we read after
    GENERATION: {
        "load": ("path_or_hf_repo", "adapter_path", "lazy"),
        "load_model_resources": ("model_path", "adapter_path"),
        "ResponseGenerator._log_prefill_started": ("self", "request"),
        "ResponseGenerator._step": ("self", "batch_gen", "active"),
        "ResponseGenerator._log_prefill_completed": ("uid", "info", "prompt_response"),
        "ResponseGenerator._initialize_model": ("self",),  # the draft guard (install_draft_guard)
    },
}
# Functions that must still call (look up by name) what we replace or rely on: without the call, no effect.
CALLERS: dict[str, dict[str, tuple[str, ...]]] = {
    # their messages must still pass through NORMALIZER before they are rendered
    "mlx_vlm.server.openai": {
        "chat_completions_endpoint": (NORMALIZER, "_extract_video_reference", "_decode_input_audio_data", RENDERER),
        "responses_endpoint": (NORMALIZER, RENDERER),
    },
    # its options reach the server only as the config captured here, before uvicorn.run (run_on_socket)
    "mlx_vlm.server.cli": {"main": ("from_env", "run")},
    GENERATION: {
        "load_model_resources": ("load",),
        "ResponseGenerator._run_impl": ("_log_prefill_started", "_step"),
        "ResponseGenerator._step": ("_log_prefill_progress", "_log_prefill_completed"),
        # where the drafter is loaded, checked and, when incompatible, dropped (draft_dropped reads what it left)
        "ResponseGenerator._initialize_model": ("load_drafter", "validate_drafter_compatibility", "draft_kind"),
    },
}
REMEDIATION = "Install the mlx-vlm version range mlx-agent pins (see pyproject.toml); a name the wrapper uses changed."


def lookup(module_name: str, dotted: str) -> Any:
    """Return ``module.dotted`` of mlx_vlm (or a package it brings), or raise ``SeamChanged`` naming what is gone."""
    obj: Any = importlib.import_module(module_name)
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise SeamChanged(f"{module_name}.{dotted} no longer exists", remediation=REMEDIATION)
    return obj


def check_names(seams: dict[str, dict[str, tuple[str, ...]]], callers: dict[str, dict[str, tuple[str, ...]]]) -> None:
    """Raise ``SeamChanged`` unless each seam takes its first parameters and each caller still calls its callees."""
    for module_name, callables in seams.items():
        for dotted, params in callables.items():
            names = list(inspect.signature(lookup(module_name, dotted)).parameters)
            if names[: len(params)] != list(params):
                raise SeamChanged(
                    f"{module_name}.{dotted} now takes {names}, expected to start with {list(params)}",
                    remediation=REMEDIATION,
                )
    for module_name, functions in callers.items():
        for name, callees in functions.items():
            code = getattr(lookup(module_name, name), "__code__", None)
            for callee in callees:
                if code is None or callee not in code.co_names:
                    raise SeamChanged(f"{module_name}.{name} no longer calls {callee}", remediation=REMEDIATION)


def check_vlm_seams() -> None:
    """Raise ``SeamChanged`` naming the first name of mlx_vlm the wrapper uses that is missing or changed."""
    check_names(VLM_SEAMS, CALLERS)
    check_render_seam()


def check_render_seam() -> None:
    """Raise ``SeamChanged`` unless the endpoints' ``apply_chat_template`` looks up ``mlx_vlm.server``'s at call time.

    The endpoints call a dependency (``app._protocol_deps``) that reads the package's name on every call; that is
    what lets ``AdaptedRender`` sit where every request is rendered. Checked by calling it with the name replaced.
    """
    server: Any = importlib.import_module("mlx_vlm.server")
    through = lookup("mlx_vlm.server.app", f"_protocol_deps.{RENDERER}")
    saved, seen = getattr(server, RENDERER), object()
    setattr(server, RENDERER, lambda *args, **kwargs: seen)
    try:
        reached = through(None, {"model_type": "probe"}, []) is seen
    except Exception:  # a dependency that renders by itself fails with these arguments
        reached = False
    finally:
        setattr(server, RENDERER, saved)
    if not reached:
        raise SeamChanged(
            f"mlx_vlm's endpoints no longer render through mlx_vlm.server.{RENDERER}", remediation=REMEDIATION
        )


class InstructionPlacer:
    """A stand-in for mlx_vlm's ``_normalize_instruction_messages`` that keeps late system messages in place.

    Called as mlx_vlm calls it: ``(chat_messages, instructions=None)``, rewriting the list in place and returning
    the text of the leading system message. The leading system messages (and ``instructions``) join into one;
    later ones stay where they were sent, as system messages: how the template writes them is decided where the
    request is rendered with its tools (``AdaptedRender``). Without a loaded text model it folds as mlx_vlm does.
    """

    def __init__(self, fold: Callable[..., str | None], loaded: Callable[[], tuple[Any, Any] | None]) -> None:
        self._fold = fold
        self._loaded = loaded

    def __call__(self, chat_messages: list[dict[str, Any]], instructions: str | None = None) -> str | None:
        """Place ``instructions`` and the system messages of ``chat_messages`` (in place); return the leading text."""
        if self._loaded() is None:
            return self._fold(chat_messages, instructions)
        # mlx_vlm drops system messages without content; so do we (an empty turn would still be rendered)
        kept = [m for m in chat_messages if m.get("role") not in SYSTEM_ROLES or m.get("content")]
        lead = [{"role": "system", "content": instructions}] if instructions else []
        chat_messages[:] = place([*lead, *kept], lambda _: "keep")
        first = chat_messages[0] if chat_messages and chat_messages[0].get("role") == "system" else None
        return (text_of(first.get("content")) or None) if first is not None else None


class TemplateRefusal(HTTPException):
    """A template's refusal on its way out of an endpoint (mlx_vlm re-raises ``HTTPException``, answers the rest 500).

    Carries the worker's OpenAI-style error (``HttpError``); ``install_adapter`` registers its answer on the app.
    """

    def __init__(self, error: HttpError) -> None:
        super().__init__(status_code=error.status, detail=error.message)
        self.error = error


def answer_refusal(request: Any, refusal: Exception) -> Any:
    """Answer a ``TemplateRefusal`` with its error document (the front reads its code: ``template_error``)."""
    from fastapi.responses import JSONResponse

    error = refusal.error if isinstance(refusal, TemplateRefusal) else from_generation_error(refusal)
    return JSONResponse(status_code=error.status, content=error.body())


class AdaptedRender:
    """A stand-in for ``mlx_vlm.server.apply_chat_template`` that adapts the conversation to the served template.

    A list of messages is adapted by the processor's ``Conversations`` for the call's ``tools`` (decided once per
    processor and set of tools, by rendering through ``original``), then rendered by ``original`` with every
    argument the endpoint gave. Anything else (a string prompt, ``return_messages``) passes through untouched.
    """

    def __init__(self, original: Callable[..., Any]) -> None:
        self.original = original
        self._conversations: tuple[Any, Conversations] | None = None
        self._lock = threading.Lock()

    def conversations(self, processor: Any, config: Any) -> Conversations:
        """Return the adapter of ``processor``'s template (kept while the same processor is served)."""
        with self._lock:
            if self._conversations is None or self._conversations[0] is not processor:
                self._conversations = (processor, Conversations(vlm_tools_render(processor, config, self.original)))
            return self._conversations[1]

    def __call__(
        self, processor: Any, config: Any, prompt: Any, add_generation_prompt: bool = True, *args: Any, **kwargs: Any
    ) -> Any:
        """Render ``prompt`` as mlx_vlm does, its messages adapted first; a template's refusal is a 400."""
        if args or kwargs.get("return_messages") or not _is_conversation(prompt):
            return self.original(processor, config, prompt, add_generation_prompt, *args, **kwargs)
        try:
            messages = self.conversations(processor, config).adapt(prompt, kwargs.get("tools"))
            return self.original(processor, config, messages, add_generation_prompt, **kwargs)
        except HttpError as error:  # the adapter's own 400 (a template that renders no tool results)
            raise TemplateRefusal(error) from None
        except HTTPException:
            raise
        except Exception as error:  # the template's refusal, whatever its type
            raise TemplateRefusal(from_generation_error(template_failed(error))) from error


def _is_conversation(prompt: object) -> bool:
    return isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt)


def vlm_tools_render(
    processor: Any, config: Any, original: Callable[..., Any]
) -> Callable[[list[dict[str, Any]], Any, bool], str]:
    """Return the ``conversation.ToolsRender`` of ``processor``: mlx_vlm's own rendering, with the tools given."""

    def render(messages: list[dict[str, Any]], tools: Any, generation: bool) -> str:
        prompt = original(processor, config, messages, add_generation_prompt=generation, tools=tools or None)
        if not isinstance(prompt, str):  # models rendered from their last message only: nothing to adapt
            raise TypeError(f"mlx_vlm rendered {type(prompt).__name__}, not a prompt")
        return prompt

    return render


def vlm_render(processor: Any, config: Any) -> Callable[[list[dict[str, Any]], bool], str]:
    """Return a ``system_turns.Render`` through mlx_vlm's own ``apply_chat_template`` (not adapted), without tools."""
    server: Any = importlib.import_module("mlx_vlm.server")  # the endpoints look the function up there
    current = getattr(server, RENDERER)
    tools_render = vlm_tools_render(processor, config, getattr(current, "original", current))
    return lambda messages, generation: tools_render(messages, None, generation)


def loaded_text_model() -> tuple[Any, Any] | None:
    """Return the processor and config of mlx_vlm's loaded text-generation model, or None."""
    from mlx_vlm.server.runtime import runtime

    cache = runtime.model_cache.for_kind("text_generation")
    processor, config = cache.get("processor"), cache.get("config")
    return None if processor is None or config is None else (processor, config)


def install_placer() -> InstructionPlacer:
    """Replace ``NORMALIZER`` in the modules of ``PLACED_IN`` with one ``InstructionPlacer``; return it."""
    from mlx_vlm.server import request_normalization

    placer = InstructionPlacer(getattr(request_normalization, NORMALIZER), loaded_text_model)
    for module_name in PLACED_IN:
        setattr(importlib.import_module(module_name), NORMALIZER, placer)  # the seam: looked up at call time
    return placer


def install_adapter(app: Any) -> AdaptedRender:
    """Replace ``mlx_vlm.server.apply_chat_template`` with an ``AdaptedRender``; answer its refusals on ``app``."""
    server: Any = importlib.import_module("mlx_vlm.server")
    current = getattr(server, RENDERER)
    adapted = current if isinstance(current, AdaptedRender) else AdaptedRender(current)
    setattr(server, RENDERER, adapted)  # the seam: the endpoints' dependency looks it up at call time
    app.add_exception_handler(TemplateRefusal, answer_refusal)
    return adapted


def install_progress(where: Board | None = None) -> None:
    """Report the load and each prefill on the board (``runtime/serving/progress.py``), as the mlx_lm worker does.

    The load goes through ``progress.loading``: lazily, then its weights read in parts, done when it returns.
    mlx_vlm's batched generation thread prefills a prompt in steps of ``--prefill-step-size`` tokens, one per
    ``_step``, and keeps each request's tokens read in its state (``prefill_processed``, cached tokens
    included): after each step we copy them to the board, with the prompt's length stashed at its start; a
    request whose prefill completed, was cancelled or failed (gone from ``active``) leaves the board.
    """
    from mlx_agent.runtime.serving import progress

    generation: Any = importlib.import_module(GENERATION)
    where = where or progress.board()
    generation.load = progress.loading(generation.load, finish=True)  # the seam: load_model_resources calls it
    cls: Any = generation.ResponseGenerator
    started, step, completed = cls._log_prefill_started, cls._step, cls._log_prefill_completed

    def prefill_started(self: Any, request: Any, **kwargs: Any) -> dict[str, Any]:
        state: dict[str, Any] = started(self, request, **kwargs)
        state[PROMPT_TOKENS] = int(request.prompt_tokens)
        return state

    def stepped(self: Any, batch_gen: Any, active: dict[Any, dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        try:
            result = step(self, batch_gen, active, *args, **kwargs)
        except BaseException:
            where.prefill_keep(())  # the generation thread fails every request of the batch
            raise
        for uid, info in active.items():
            total, processed = info.get(PROMPT_TOKENS), info.get("prefill_processed")
            if isinstance(total, int) and isinstance(processed, int) and processed >= 0:
                where.prefill(uid, processed, max(total, processed))
        where.prefill_keep(active.keys())
        return result

    def prefill_completed(uid: Any, info: dict[str, Any], prompt_response: Any) -> None:
        completed(uid, info, prompt_response)
        info[PROMPT_TOKENS] = None  # read: the decoding steps report nothing more
        where.prefill_end(uid)

    cls._log_prefill_started = prefill_started
    cls._step = stepped
    cls._log_prefill_completed = staticmethod(prefill_completed)


def draft_dropped(asked: str | None, asked_kind: str | None, drafter: Any, kind: str | None) -> str | None:
    """Return why the loaded generator does not draft as the plan asked, or None when it does (or none was asked).

    mlx_vlm logs a warning and serves without speculative decoding when the drafter does not fit the model, and
    uses the drafter's own family when ``--draft-kind`` names another: both would serve something other than
    the reviewed plan.
    """
    if asked is None:
        return None
    if drafter is None:
        return f"mlx_vlm dropped the draft model {asked}: it does not fit the served model (see the warning above)"
    if asked_kind is not None and kind != asked_kind:
        return f"the draft model {asked} is a {kind} drafter, not the {asked_kind} drafter the plan names"
    return None


def install_draft_guard() -> None:
    """Fail the load (the worker exits before it listens) when mlx_vlm would not draft as the plan asked."""
    from mlx_agent.errors import DraftModelMismatch, print_refusal

    generation: Any = importlib.import_module(GENERATION)
    cls: Any = generation.ResponseGenerator
    initialize = cls._initialize_model

    def initialized(self: Any) -> None:
        initialize(self)
        asked = self.draft_model_path or os.environ.get("MLX_VLM_DRAFT_MODEL") or None
        why = draft_dropped(asked, os.environ.get("MLX_VLM_DRAFT_KIND") or None, self.draft_model, self.draft_kind)
        if why is not None:
            error = DraftModelMismatch(why, details={"draft_model": asked})
            print_refusal(error)
            raise RuntimeError(why)  # mlx_vlm's generation thread turns it into the load's error

    cls._initialize_model = initialized


def settings_line() -> str:
    """Return the log line of mlx_vlm's settings as its server runs with them: its config, read back, not our argv.

    mlx_vlm's CLI turns each start-up flag into an environment variable and captures them in
    ``runtime.config`` (``RuntimeConfig.from_env``) just before ``uvicorn.run``; the thinking budget is read from
    the environment by each request. The adapter is the one its lifespan preloads.
    """
    import json

    from mlx_vlm.server import request_normalization
    from mlx_vlm.server.runtime import runtime

    current = runtime.config.current()
    values = {name: current.get(name) for name in SETTINGS}
    values["thinking_budget"] = getattr(request_normalization, THINKING_BUDGET)()
    values["adapter_path"] = os.environ.get("MLX_VLM_PRELOAD_ADAPTER")
    return SETTINGS_LINE + json.dumps(values, sort_keys=True)


def bind_private(path: str) -> socket.socket:
    """Return a Unix socket bound at ``path`` that only its owner can connect to (not yet listening)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(previous)
    sock.set_inheritable(False)
    return sock


def serve(argv: list[str]) -> int:
    """Run mlx_vlm's server on the socket named by ``--mlx-agent-socket`` in ``argv``, under its contract's limits."""
    from mlx_agent.runtime.entries.vlm_environment import clear_cli_settings

    try:
        cleared = clear_cli_settings()  # before mlx_vlm reads its settings: only the reviewed argv sets them
        check_vlm_seams()
        check_media_types()
    except SeamChanged as error:
        print(f"mlx-agent: cannot wrap this mlx_vlm: {error}", file=sys.stderr)
        return 2
    from mlx_agent.runtime.entries.contract_entry import started
    from mlx_agent.runtime.entries.file_checks import refuse_if_changed
    from mlx_agent.runtime.serving.socket_limits import from_contract

    given, native = started(argv, socket=True)
    refuse_if_changed(given.contract.file_checks)  # the reviewed adapter files, before mlx_vlm reads anything
    socket_path = given.socket or ""
    limits = from_contract(given.contract)  # the front's body cap and body deadline (asgi_limits)
    sock = bind_private(socket_path)

    import uvicorn
    from mlx_vlm.server import cli

    def run_on_socket(app: Any, **kwargs: Any) -> None:
        from uvicorn.importer import import_from_string

        from mlx_agent.runtime.serving.asgi_limits import BodyLimits

        kwargs.pop("host", None)
        kwargs.pop("port", None)
        kwargs.pop("reload", None)  # a reloader needs the app by name; the front never asks for one
        loaded = import_from_string(app) if isinstance(app, str) else app  # mlx_vlm names "mlx_vlm.server:app"
        if cleared:
            print(f"mlx-agent: ignored mlx_vlm settings from the environment: {', '.join(cleared)}", file=sys.stderr)
        print(settings_line(), file=sys.stderr, flush=True)
        install_adapter(loaded)
        previous_run(BodyLimits(MediaWall(loaded), limits), fd=sock.fileno(), **kwargs)

    install_placer()
    install_progress()
    install_draft_guard()
    previous_run = uvicorn.run
    uvicorn.run = run_on_socket  # the seam: mlx_vlm's CLI calls uvicorn.run
    sys.argv = ["mlx_vlm.server", *native]
    try:
        cli.main()  # type: ignore[no-untyped-call]
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
    return 0
