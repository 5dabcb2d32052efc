"""A bounded fuzz of every content-part type and field of every API against a real front over a vision model.

The front serves the tiny Qwen2-VL model through the wrapped mlx-vlm worker. Every case is a request of one of
the APIs the front serves (``content_fuzz.APIS``: chat completions and completions, Messages and its token count,
Responses and its compaction, Ollama's four, ``/v1/embeddings``) whose content holds hostile parts: every part
type as its API writes it and drawn parts of any type with any fields, naming a loopback listener, a 0600 file of
``nobody``'s, or data of sound and undecodable images; then the request fuzz's field cases (``fuzz_support``) and
mlx-vlm's own chat fields, which the front passes on. After every case (``content_checks``): a 2xx with the
endpoint's reply or a 4xx with its API's error (never a 5xx but the documented 501 and 503), no connection to
the listener, no open of the file, and a normal request answered. At the end the worker is the one the front
first started. The counts are printed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlx_agent.gateway.images import MAX_IMAGE_PIXELS
from tests.e2e.content_checks import attempt, attempt_every_part, print_codes
from tests.e2e.content_fuzz import APIS, bodies
from tests.e2e.front_support import Front
from tests.e2e.fuzz_support import BASES, FIELDS, FUZZ, assert_first_worker, deep, fuzz_front, values
from tests.media_traps import Traps, png

pytestmark = pytest.mark.e2e

SEEN: Counter[str] = Counter()
IMAGE = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": png()}}]


@pytest.fixture(scope="module")
def front(tiny_vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    """Start one eager front on the session's tiny vision model for the whole fuzz; print what the cases got."""
    with fuzz_front(tiny_vlm, tmp_path_factory.mktemp("fuzz-home"), SEEN, "--runtime", "mlx-vlm") as started:
        yield started
    print_codes("vision")


@pytest.mark.parametrize("path", APIS)
@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_hostile_content_parts_never_reach_a_url_a_file_or_a_5xx(
    front: Front, traps: Traps, path: str, data: st.DataObject
) -> None:
    """Any part of any type with any fields: a reply or the API's 4xx; nothing fetched or opened; no 5xx but 501/503."""
    body = data.draw(bodies(path, traps.listener, traps.secret.path))
    attempt(front, traps, "vision", path, body, SEEN, front.healthy)


@pytest.mark.parametrize("path", list(BASES))
@settings(FUZZ, max_examples=20)
@given(data=st.data())
def test_hostile_fields_never_break_the_vision_server(
    front: Front, traps: Traps, path: str, data: st.DataObject
) -> None:
    """The request fuzz's field cases on the vision model: one to three fields of a valid body replaced by anything."""
    body = dict(BASES[path])
    names = data.draw(st.lists(st.sampled_from(FIELDS[path]), min_size=1, max_size=3, unique=True))
    for name in names:
        body[name] = data.draw(st.one_of(values, deep) if name in ("messages", "tools", "input") else values)
    if body.get("stream") is True:
        body["max_tokens"] = 3
    attempt(front, traps, "vision", path, body, SEEN, front.healthy)


@pytest.mark.parametrize("path", APIS)
def test_every_part_type_on_the_vision_model(front: Front, traps: Traps, path: str) -> None:
    """Every part type as its API writes it, naming a URL or a path: media, images and documents refused."""
    attempt_every_part(front, traps, "vision", path, SEEN, front.healthy)


# mlx-vlm's own chat fields, which the front does not declare and chat completions passes on (its ChatRequest).
VLM_FIELDS = (
    "min_pixels",
    "max_pixels",
    "resize_shape",
    "adapter_path",
    "tool_parser",
    "top_n_sigma",
    "p_less",
    "typical_p",
    "enable_thinking",
    "reasoning",
    "thinking_budget",
    "thinking_start_token",
    "thinking_end_token",
    "context_management",
    "max_denoising_steps",
    "block_length",
    "threshold",
    "diffusion_sampler",
)
SIZES = st.sampled_from([0, 1, 448, 3136, [0, 0], [0, 448], [448, 448], [1, 2, 3], 10**9, MAX_IMAGE_PIXELS + 1])


@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_the_vision_workers_own_fields_never_get_a_5xx(front: Front, traps: Traps, data: st.DataObject) -> None:
    """mlx-vlm's own chat fields, on a body with an image, hold anything: a reply or the API's 4xx, never a 5xx."""
    body: dict[str, object] = {"model": "tiny", "messages": [{"role": "user", "content": IMAGE}], "max_tokens": 3}
    for name in data.draw(st.lists(st.sampled_from(VLM_FIELDS), min_size=1, max_size=3, unique=True)):
        body[name] = data.draw(st.one_of(SIZES, values) if name.endswith(("pixels", "shape")) else values)
    body["stream"] = data.draw(st.booleans())
    attempt(front, traps, "vision", "/v1/chat/completions", body, SEEN, front.healthy)


def test_a_zero_or_oversized_image_size_is_refused_by_the_front(front: Front) -> None:
    """A zero resize (a 500 from the worker before) and a min_pixels past the bound are 400 naming the field."""
    for field, value in (("resize_shape", [0, 0]), ("min_pixels", MAX_IMAGE_PIXELS + 1)):
        body = {"model": "tiny", "messages": [{"role": "user", "content": IMAGE}], "max_tokens": 2, field: value}
        status, _, answer = front.send("POST", "/v1/chat/completions", body)
        assert (status, answer["error"]["code"], answer["error"]["param"]) == (400, "invalid_value", field), answer
    assert front.healthy()


def test_the_vision_worker_never_restarted(front: Front) -> None:
    """After the fuzz the worker is the first one: no hostile part crashed it."""
    assert_first_worker(front)
