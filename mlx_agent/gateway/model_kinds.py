"""What each model kind answers, and the one refusal of a request to a model of another kind (pure).

A model's kind is its worker record's (``WorkerRecord.kind``, written by the plan from its recipe): ``text`` and
``vision`` chat (and a config written before kinds, ``None``), ``embedding`` vectors, and mlx-vlm's media kinds
``speech``, ``transcription`` and ``image_generation``. ``PATHS`` is the one table of the endpoints each kind
answers (a front path that is also a worker's is spelled by its ``WorkerRoute``); ``/v1/models`` lists it per
model, and ``require_kind`` refuses the rest with the code the endpoint asks for (``model_not_speech``, ...),
naming the model, its kind and the models that would answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import refused
from mlx_agent.worker_routes import WorkerRoute

if TYPE_CHECKING:
    from mlx_agent.gateway.models.fleet import Fleet
    from mlx_agent.gateway.models.lifecycle import Lifecycle
    from mlx_agent.records.front import FrontModelConfig

CHAT_PATHS = (
    WorkerRoute.CHAT.path,
    WorkerRoute.COMPLETIONS.path,
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    WorkerRoute.TOKENIZE.path,
    "/api/chat",
    "/api/generate",
)
EMBEDDING_PATHS = (WorkerRoute.EMBEDDINGS.path, "/api/embed", "/api/embeddings")
SPEECH_PATHS = (WorkerRoute.SPEECH.path,)
TRANSCRIPTION_PATHS = (WorkerRoute.TRANSCRIPTIONS.path, WorkerRoute.TRANSLATIONS.path)
IMAGE_PATHS = (WorkerRoute.IMAGE_GENERATIONS.path, WorkerRoute.IMAGE_EDITS.path)

# The endpoints each kind answers (a model whose config predates kinds, None, chats).
PATHS: dict[str | None, tuple[str, ...]] = {
    None: CHAT_PATHS,
    "text": CHAT_PATHS,
    "vision": CHAT_PATHS,
    "embedding": EMBEDDING_PATHS,
    "speech": SPEECH_PATHS,
    "transcription": TRANSCRIPTION_PATHS,
    "image_generation": IMAGE_PATHS,
}
MEDIA_KINDS = ("speech", "transcription", "image_generation")
NOT_CHAT = ("embedding", *MEDIA_KINDS)  # the kinds no chat API may ask
# How a refusal names a kind.
NAMES: dict[str | None, str] = {
    None: "a chat model",
    "text": "a chat model",
    "vision": "a chat model",
    "embedding": "an embedding model",
    "speech": "a speech (text-to-speech) model",
    "transcription": "a transcription (speech-to-text) model",
    "image_generation": "an image-generation model",
}
# The code of a request that needs a kind, sent to a model of another.
CODES = {
    "speech": Code.MODEL_NOT_SPEECH,
    "transcription": Code.MODEL_NOT_TRANSCRIPTION,
    "image_generation": Code.MODEL_NOT_IMAGE_GENERATION,
    "embedding": Code.MODEL_NOT_EMBEDDING,
}


def chat_refusal(model: FrontModelConfig) -> RequestRefused | None:
    """Return the 400 ``model_not_chat`` of a chat request to a model that does not chat, else None."""
    if kind_of(model) not in NOT_CHAT:
        return None
    answers = ", ".join(f"POST {path}" for path in paths_of(model))
    return refused(
        Code.MODEL_NOT_CHAT,
        f"the model '{model['served_model_name']}' is {NAMES[kind_of(model)]}: it answers {answers} only; "
        "name a chat model here",
        param="model",
    )


def kind_of(model: FrontModelConfig) -> str | None:
    """Return the model's kind as its worker record says (None: a config written before kinds)."""
    kind: str | None = model["worker"].get("kind")
    return kind


def paths_of(model: FrontModelConfig) -> tuple[str, ...]:
    """Return the endpoints the model answers."""
    return PATHS.get(kind_of(model), CHAT_PATHS)


def wrong_kind(model: FrontModelConfig, code: Code, wanted: str, others: list[str]) -> RequestRefused:
    """Return the 400 of a request needing ``wanted`` (a kind's name) sent to ``model``; ``others`` would answer."""
    kind = kind_of(model)
    hint = f"name {wanted}: {', '.join(others)}" if others else f"serve {wanted} to answer it"
    answers = ", ".join(f"POST {path}" for path in paths_of(model))
    return refused(
        code,
        f"the model '{model['served_model_name']}' is {NAMES.get(kind, 'a chat model')} and answers {answers}; {hint}",
        param="model",
    )


def require_kind(fleet: Fleet, name: object, kind: str) -> Lifecycle:
    """Return the model a request names if it is of ``kind``; else 400 with ``CODES[kind]`` (404: no such name).

    A request that names no model gets the first model of ``kind``, where a fleet has one.
    """
    if name is None or name == "":
        name = next((m.name for m in fleet.models if kind_of(m.model) == kind), None)
    model = fleet.route(name)
    if kind_of(model.model) == kind:
        return model
    others = [m.name for m in fleet.models if kind_of(m.model) == kind]
    raise wrong_kind(model.model, CODES[kind], NAMES[kind], others)
