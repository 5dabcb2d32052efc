"""The wrapped workers that several end-to-end files share (no tests here): what each serves and how it starts.

A test that only sends requests and reads replies takes one of these through a session fixture of
``tests/e2e/conftest.py`` (started once per test process and waited on by its readiness; the files that take it
are one group of ``SHARED_SERVERS`` in ``tests/conftest.py``, so they run in one process). A test that kills,
reconfigures or faults a worker starts its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.wrapped_support import Server, running, variant
from tests.fixtures.tiny_model import CHAT_TEMPLATE

# ChatML that refuses a role it does not know, as real templates do with raise_exception. The shared tiny
# worker's model has it: a request of the known roles renders exactly as with the tiny model's own ChatML.
STRICT_TEMPLATE = (
    "{%- for message in messages %}{%- if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{- raise_exception('Unknown role: ' + message['role']) }}{%- endif %}{%- endfor %}" + CHAT_TEMPLATE
)
# The shared tiny worker prefills in chunks of 64 tokens, so that a long prompt takes many steps
# (test_concurrent_serving reads them); every other prompt sent to it is shorter than one chunk.
PREFILL_STEP = ("--prefill-step-size", "64")


def strict_tiny_model(directory: Path) -> Path:
    """Build the tiny random-weight model with ``STRICT_TEMPLATE`` as its chat template, in ``directory``."""
    variant(directory, template=STRICT_TEMPLATE)
    return directory


@contextmanager
def wrapped_tiny_server(directory: Path) -> Iterator[Server]:
    """Serve the strict tiny model through the wrapped entry on a loopback port (``PREFILL_STEP``); stop it after."""
    model = strict_tiny_model(directory / "model")
    with running(model, directory, *PREFILL_STEP) as server:
        yield server
