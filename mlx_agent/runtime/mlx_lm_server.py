"""mlx_lm.server with the model loaded before the port opens.

mlx_lm's ``/health`` answers ``ok`` as soon as it listens, while the model still loads in its generation
thread. We replace the module's ``run`` (its ``handler_class`` argument is ignored upstream, so replacing
``run`` is the seam) with one that loads the default model first: once the port accepts connections,
the model is loaded, and a readiness probe of ``/health`` means "loaded and answering".
"""

from __future__ import annotations

import inspect
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import mlx_lm.server as server

# The seams we rely on, with the parameters we call them with. A change upstream fails here, loudly.
SEAMS: dict[str, tuple[str, ...]] = {
    "run": ("host", "port", "model_provider"),
    "main": (),
    "ModelProvider.load_default": ("self",),
}


class SeamChanged(RuntimeError):
    """The installed mlx_lm no longer has a function or parameter the wrapper depends on."""


def _lookup(dotted: str) -> Any:
    obj: Any = server
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise SeamChanged(f"mlx_lm.server.{dotted} no longer exists")
    return obj


def check_seams() -> None:
    """Raise ``SeamChanged`` if a seam of mlx_lm.server is missing or lost a parameter we pass."""
    for dotted, params in SEAMS.items():
        fn = _lookup(dotted)
        names = list(inspect.signature(fn).parameters)
        if names[: len(params)] != list(params):
            raise SeamChanged(f"mlx_lm.server.{dotted} now takes {names}, expected to start with {list(params)}")


def _loading_run(original: Callable[..., Any]) -> Callable[..., Any]:
    def run(host: str, port: int, model_provider: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        logging.info("mlx-agent: loading %s before opening the port", model_provider.cli_args.model)
        model_provider.load_default()
        logging.info("mlx-agent: model loaded in %.2f s; listening on %s:%s",
                     time.monotonic() - started, host, port)
        return original(host, port, model_provider, *args, **kwargs)

    return run


def serve(argv: list[str]) -> int:
    """Run mlx_lm.server's own ``main`` with ``argv``, loading the model before it listens."""
    check_seams()
    server.run = _loading_run(server.run)
    sys.argv = ["mlx_lm.server", *argv]
    upstream_main: Callable[[], None] = server.main  # untyped upstream
    upstream_main()
    return 0
