"""What the Ollama endpoints accept, declared as the other APIs' bodies are (``mlx_agent.bodies``).

The declarations are closed: a field Ollama documents that this server cannot honour, or one it does not know,
is refused as ``unsupported_parameter`` (``request.py`` checks what a declaration cannot say: which values of an
accepted field can be honoured). ``options`` is closed too; its harmless load-time hints are declared and read
nowhere (docs/ollama.md, "Options", is the table).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator

from mlx_agent.bodies import MAX_STOP, Body, Declared, Object, Penalty, TopK, Unit, one_of, stops

Count = Annotated[int, Field(ge=-2, le=2**31 - 1)]  # num_predict: -1 no limit, -2 fill the context
AnyInt = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Ratio = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]


class Options(Declared):
    """Ollama's ``options``: the sampler's fields are mapped (``request.sampler``), the hints accepted and unused."""

    closed: ClassVar[bool] = True
    # mapped to the sampler
    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] | None = None
    top_p: Unit | None = None
    top_k: TopK | None = None
    min_p: Unit | None = None
    num_predict: Count | None = None
    stop: Any = None
    seed: Annotated[int, Field(ge=-(2**63), le=2**64 - 1)] | None = None
    repeat_penalty: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] | None = None
    repeat_last_n: Annotated[int, Field(ge=-1, le=1_000_000)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    # accepted only where they leave the sampler as it is (request.sampler refuses other values)
    typical_p: Ratio | None = None
    tfs_z: Ratio | None = None
    mirostat: AnyInt | None = None
    mirostat_tau: Ratio | None = None
    mirostat_eta: Ratio | None = None
    # how Ollama's own runner loads a model: the plan decided this for the reviewed model, so they change nothing
    num_ctx: AnyInt | None = None
    num_batch: AnyInt | None = None
    num_gpu: AnyInt | None = None
    main_gpu: AnyInt | None = None
    num_thread: AnyInt | None = None
    num_keep: AnyInt | None = None
    numa: bool | None = None
    low_vram: bool | None = None
    f16_kv: bool | None = None
    logits_all: bool | None = None
    vocab_only: bool | None = None
    use_mmap: bool | None = None
    use_mlock: bool | None = None
    embedding_only: bool | None = None
    penalize_newline: bool | None = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        return stops(value, MAX_STOP)


class Generation(Body):
    """What ``/api/chat`` and ``/api/generate`` share."""

    closed: ClassVar[bool] = True
    stream: bool | None = None
    format: Any = None
    options: Options | None = None
    keep_alive: Any = None
    think: Any = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None

    @field_validator("format")
    @classmethod
    def _format(cls, value: Any) -> Any:
        if value in (None, "", "json") or isinstance(value, dict):
            return value
        raise ValueError("must be 'json' or a JSON schema object")

    @field_validator("think")
    @classmethod
    def _think(cls, value: Any) -> Any:
        if value is None or isinstance(value, bool) or value in ("low", "medium", "high"):
            return value
        raise ValueError("must be true, false, 'low', 'medium' or 'high'")

    @field_validator("keep_alive")
    @classmethod
    def _keep_alive(cls, value: Any) -> Any:
        return one_of(value, (str, int, float), "a duration such as '5m', or a number of seconds")


class OllamaChatBody(Generation):
    """``POST /api/chat``: an empty ``messages`` loads (or, with ``keep_alive: 0``, unloads) the model."""

    messages: Annotated[list[Object], Field(max_length=100_000)] | None = None
    tools: Annotated[list[Object], Field(max_length=1024)] | None = None


class OllamaGenerateBody(Generation):
    """``POST /api/generate``: an empty ``prompt`` loads (or unloads) the model."""

    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool | None = None
    images: Annotated[list[str], Field(max_length=64)] | None = None


class OllamaShowBody(Body):
    """``POST /api/show``: ``name`` is the older spelling of ``model``."""

    closed: ClassVar[bool] = True
    name: str | None = None
    verbose: bool | None = None


class OllamaEmbedBody(Body):
    """``POST /api/embed``."""

    closed: ClassVar[bool] = True
    input: Any = None
    truncate: bool | None = None
    dimensions: Annotated[int, Field(ge=1, le=65536)] | None = None
    options: Options | None = None
    keep_alive: Any = None


class OllamaEmbeddingsBody(Body):
    """``POST /api/embeddings`` (Ollama's older endpoint: one prompt)."""

    closed: ClassVar[bool] = True
    prompt: str | None = None
    options: Options | None = None
    keep_alive: Any = None
