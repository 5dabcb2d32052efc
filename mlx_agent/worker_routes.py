"""The paths a worker answers the front on, each with the kind of body it takes (standard library only).

The front (``gateway/``) and the worker (``runtime/``) are separate processes: this is the one place both read
a worker path from. The front's own route table (``gateway.door.endpoints.Key``) names what clients call; a
front endpoint reaches its model through one of these (the Ollama and Anthropic families translate to
``CHAT`` or ``COMPLETIONS``). The body kind says what the worker does with a body: render ``messages`` with the
model's chat template, take a raw ``prompt``, embed an ``input``, or tokenize a text or messages.
"""

from __future__ import annotations

from enum import Enum, StrEnum


class BodyKind(StrEnum):
    """What a worker route's body carries."""

    MESSAGES = "messages"  # a conversation, rendered by the model's chat template
    PROMPT = "prompt"  # a raw prompt, no template
    INPUT = "input"  # texts to embed
    TOKENIZE = "tokenize"  # a text, or messages rendered as a chat's, to tokenize (nothing is generated)
    SPEECH = "speech"  # a text to speak (JSON); the reply is audio bytes
    AUDIO = "audio"  # an audio upload to transcribe or translate, as the front checked and re-encoded it
    IMAGE_PROMPT = "image_prompt"  # a prompt to draw (JSON); the reply holds the images
    IMAGE_EDIT = "image_edit"  # a prompt and images the front checked and stored, to edit (JSON)


class WorkerRoute(Enum):
    """A POST path a worker answers, and the kind of body it takes."""

    CHAT = ("/v1/chat/completions", BodyKind.MESSAGES)
    COMPLETIONS = ("/v1/completions", BodyKind.PROMPT)
    EMBEDDINGS = ("/v1/embeddings", BodyKind.INPUT)
    TOKENIZE = ("/v1/tokenize", BodyKind.TOKENIZE)
    # mlx-vlm's media endpoints (its server answers them through mlx-audio and its diffusion pipelines).
    SPEECH = ("/v1/audio/speech", BodyKind.SPEECH)
    TRANSCRIPTIONS = ("/v1/audio/transcriptions", BodyKind.AUDIO)
    TRANSLATIONS = ("/v1/audio/translations", BodyKind.AUDIO)
    IMAGE_GENERATIONS = ("/v1/images/generations", BodyKind.IMAGE_PROMPT)
    IMAGE_EDITS = ("/v1/images/edits", BodyKind.IMAGE_EDIT)

    def __init__(self, path: str, kind: BodyKind) -> None:
        self.path = path
        self.kind = kind

    @classmethod
    def at(cls, path: str) -> WorkerRoute | None:
        """Return the route a request path names, or None for a path no worker answers."""
        return next((route for route in cls if route.path == path), None)
