"""The speech, transcription and image workers on their own Unix sockets: real mlx-vlm, real tiny models, raw HTTP.

Each worker is the one the session's media front started (``media_fleet``, tests/e2e/media_fleet_support.py:
``python -m mlx_agent.runtime mlx-vlm-speech|transcription|image``, the plan's contract), with the session's tiny
Soprano, Parakeet-CTC and ERNIE-Image models, reached on the socket the front gave it; each fixture checks that
its worker is the same loaded process afterwards. Each answers its own endpoint as mlx-vlm does, and nothing
else: not the other kind's paths, not another ``model`` (a Hub id mlx-vlm would load), not a field naming a server
path or a file to write. The preview of each tiny model picks its media recipe and kind by itself. Each request
says ``Connection: close``, so its answer ends when the worker has sent it, not when keep-alive runs out.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlx_agent.wire import SOCKET_FLAG, UPLOADS_DIR
from tests.conftest import Agent
from tests.contract_support import contract
from tests.e2e.media_fleet_support import WorkerSocket, loaded_model, loaded_worker
from tests.e2e.worker_socket_support import REPO_ROOT, Answer, SocketWorker, is_api_error, socket_worker
from tests.fixtures.tiny_stt import TRANSCRIPT, wav_bytes
from tests.gateway_support import Gateway

pytestmark = pytest.mark.e2e

BOUNDARY = "mediaboundary"


def shared_worker(media_fleet: Gateway, kind: str) -> Iterator[WorkerSocket]:
    """Yield the fleet front's worker of ``kind`` on its socket; afterwards it is the same, still-loaded process."""
    worker = loaded_worker(media_fleet, kind)
    yield worker
    after = loaded_model(media_fleet, kind)  # nothing here unloaded, crashed or replaced it
    assert (after["model_state"], after["worker"]["pid"], after["worker_exits"]) == ("loaded", worker.pid, 0), after


@pytest.fixture(scope="module")
def speaker(media_fleet: Gateway) -> Iterator[WorkerSocket]:
    """Return the speech worker of the tiny Soprano model, as the shared media front started it, on its socket."""
    yield from shared_worker(media_fleet, "speech")


@pytest.fixture(scope="module")
def listener(media_fleet: Gateway) -> Iterator[WorkerSocket]:
    """Return the transcription worker of the tiny Parakeet-CTC model, as the shared media front started it."""
    yield from shared_worker(media_fleet, "transcription")


def health(worker: WorkerSocket | SocketWorker) -> Answer:
    """Return the worker's /health answer (``Connection: close``: the answer ends with it, not at keep-alive's end)."""
    return worker.exchange(b"GET /health HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n")


def upload(worker: WorkerSocket | SocketWorker, path: str, fields: dict[str, str], audio: bytes) -> Answer:
    """POST a multipart form (text fields and one WAV file, as the openai SDK sends it) to ``path``."""
    parts = [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav'
    body = "".join(parts).encode() + head.encode() + b"\r\n\r\n" + audio + f"\r\n--{BOUNDARY}--\r\n".encode()
    request = (
        f"POST {path} HTTP/1.1\r\nHost: w\r\nConnection: close\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return worker.exchange(request.encode() + body)


def test_the_speech_worker_is_loaded_when_it_answers(speaker: WorkerSocket, tiny_tts: Path) -> None:
    """/health says loaded, with the bound model and its kind, from the first connection on."""
    answer = health(speaker)
    assert answer.status == 200
    assert answer.json() == {"status": "ok", "model": str(tiny_tts), "kind": "speech", "loaded": True}


def test_speech_answers_wav_bytes(speaker: WorkerSocket) -> None:
    """A speech request without ``model`` is synthesised by the bound model: a RIFF/WAVE file of audio."""
    answer = speaker.post({"input": "hello.", "response_format": "wav", "max_tokens": 8}, path="/v1/audio/speech")
    assert answer.status == 200, answer.body[:300]
    assert answer.headers["content-type"] == "audio/wav"
    assert answer.body[:4] == b"RIFF" and answer.body[8:12] == b"WAVE" and len(answer.body) > 1000


def test_speech_refuses_another_model_a_path_field_and_other_paths(speaker: WorkerSocket) -> None:
    """Another model is 404, ``ref_audio`` (a server file) 400, and the transcription and chat paths 404."""
    other = speaker.post({"input": "hi", "model": "prince-canuma/Kokoro-82M"}, path="/v1/audio/speech")
    assert other.status == 404 and is_api_error(other.json(), "model_not_found"), other
    path = speaker.post({"input": "hi", "ref_audio": "/etc/passwd"}, path="/v1/audio/speech")
    assert path.status == 400 and is_api_error(path.json(), "unsupported_parameter"), path
    assert path.json()["error"]["param"] == "ref_audio"
    for route in ("/v1/audio/transcriptions", "/v1/chat/completions", "/v1/images/generations"):
        answer = speaker.post({"input": "hi"}, path=route)
        assert answer.status == 404 and is_api_error(answer.json(), "unknown_endpoint"), route
    assert health(speaker).json()["loaded"]  # nothing was unloaded


def test_transcription_answers_json(listener: WorkerSocket, tiny_stt: Path) -> None:
    """A WAV upload naming the bound model is transcribed (the fixture's forced CTC head reads ``a``)."""
    answer = upload(listener, "/v1/audio/transcriptions", {"model": str(tiny_stt)}, wav_bytes())
    assert answer.status == 200, answer.body[:300]
    assert answer.json() == {"text": TRANSCRIPT}
    text = upload(
        listener, "/v1/audio/transcriptions", {"model": str(tiny_stt), "response_format": "text"}, wav_bytes()
    )
    assert text.status == 200 and text.body.decode().strip() == TRANSCRIPT


def test_translation_is_served_on_its_own_path(listener: WorkerSocket, tiny_stt: Path) -> None:
    """/v1/audio/translations reaches mlx-vlm's translation endpoint for the bound model."""
    answer = upload(listener, "/v1/audio/translations", {"model": str(tiny_stt)}, wav_bytes())
    assert answer.status == 200 and answer.json() == {"text": TRANSCRIPT}, answer.body[:300]


def test_transcription_refuses_another_model_and_other_paths(listener: WorkerSocket) -> None:
    """A form naming a Hub model is 404 (nothing loaded, nothing unloaded); speech and images paths are 404."""
    other = upload(listener, "/v1/audio/transcriptions", {"model": "openai/whisper-large-v3"}, wav_bytes())
    assert other.status == 404 and is_api_error(other.json(), "model_not_found"), other
    for route in ("/v1/audio/speech", "/v1/images/edits", "/v1/embeddings"):
        answer = listener.post({"input": "hi"}, path=route)
        assert answer.status == 404 and is_api_error(answer.json(), "unknown_endpoint"), route
    assert health(listener).json()["loaded"]


def test_a_worker_refuses_to_start_for_a_model_of_another_kind(tiny_stt: Path) -> None:
    """The speech worker given the recogniser stops before it listens, with a refusal line naming what it found."""
    directory = Path(tempfile.mkdtemp(prefix="w", dir="/tmp"))
    argv = [sys.executable, "-m", "mlx_agent.runtime", "mlx-vlm-speech", "--model", str(tiny_stt)]
    argv += [SOCKET_FLAG, str(directory / "w.sock"), *contract()]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=REPO_ROOT)
    assert done.returncode != 0
    assert "unsupported_model" in done.stderr and "declare no speech model" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("fixture", "runtime", "kind"),
    [
        ("tiny_tts", "mlx-vlm-speech", "speech"),
        ("tiny_stt", "mlx-vlm-transcription", "transcription"),
        ("tiny_image", "mlx-vlm-image", "image_generation"),
    ],
)
def test_auto_previews_each_media_model_with_its_recipe_and_kind(
    agent: Agent, request: pytest.FixtureRequest, fixture: str, runtime: str, kind: str
) -> None:
    """``serve start --runtime auto`` of each tiny media model plans its kind's worker, every file bound."""
    model: Path = request.getfixturevalue(fixture)
    result = agent.run("serve", "start", "--path", str(model), "--runtime", "auto")
    assert result.rc == 0, result.stdout + result.stderr
    served = result.data["plan"]["models"][0]
    assert served["runtime"]["name"] == runtime and served["worker"]["kind"] == kind
    assert served["agents"] is None and served["weight_bytes"] > 0
    names = {f["name"] for f in served["source"]["files"]}
    assert names >= {"config.json", "model.safetensors"} or names >= {"model_index.json", "vae/model.safetensors"}


@pytest.fixture(scope="module")
def painter(media_fleet: Gateway) -> Iterator[WorkerSocket]:
    """Return the image-generation worker of the tiny ERNIE-Image pipeline, as the shared media front started it."""
    yield from shared_worker(media_fleet, "image_generation")


@pytest.fixture(scope="module")
def uploads(painter: WorkerSocket) -> Iterator[Path]:
    """Yield the directory the front stores checked edit images in (beside the worker's socket), with one PNG.

    The front's own is emptied after each edit: the PNG and the directory go with this module.
    """
    from PIL import Image

    directory = Path(painter.path).parent / UPLOADS_DIR
    directory.mkdir(mode=0o700, exist_ok=True)
    Image.new("RGB", (32, 32), (200, 30, 30)).save(directory / "red.png")
    yield directory
    (directory / "red.png").unlink()
    directory.rmdir()  # the front left nothing of its own edits there


def is_png(b64: str) -> bool:
    """Say whether a base64 string holds a PNG file."""
    import base64

    return base64.b64decode(b64)[:8] == b"\x89PNG\r\n\x1a\n"


def test_image_generation_answers_b64_png(painter: WorkerSocket) -> None:
    """A 16x16 one-step generation without ``model`` is drawn by the bound pipeline: one base64 PNG."""
    body = {"prompt": "a red cube", "size": "16x16", "steps": 1, "seed": 1}
    answer = painter.post(body, path="/v1/images/generations")
    assert answer.status == 200, answer.body[:300]
    (image,) = answer.json()["data"]
    assert is_png(image["b64_json"]) and (image["width"], image["height"]) == (16, 16)


def test_image_edit_reads_only_an_uploaded_image(painter: WorkerSocket, uploads: Path) -> None:
    """An edit of an image in the upload directory is drawn; the same request naming another file is 400."""
    body = {"prompt": "make it blue", "image": str(uploads / "red.png"), "size": "16x16", "steps": 1, "seed": 1}
    answer = painter.post(body, path="/v1/images/edits")
    assert answer.status == 200, answer.body[:300]
    assert is_png(answer.json()["data"][0]["b64_json"])
    outside = painter.post({**body, "image": "/etc/hostname"}, path="/v1/images/edits")
    assert outside.status == 400 and is_api_error(outside.json(), "unsupported_parameter"), outside


def test_image_generation_refuses_files_models_and_other_paths(painter: WorkerSocket) -> None:
    """Writing a file, a prompt-expansion model, another model and the audio paths are all refused."""
    for field, value in [("output_path", "/tmp/x.png"), ("response_format", "path"), ("prompt_expansion_model", "x/y")]:
        answer = painter.post({"prompt": "x", field: value}, path="/v1/images/generations")
        assert answer.status == 400 and answer.json()["error"]["param"] == field, answer
    other = painter.post({"prompt": "x", "model": "black-forest-labs/FLUX.2-klein-4B"}, path="/v1/images/generations")
    assert other.status == 404 and is_api_error(other.json(), "model_not_found"), other
    for route in ("/v1/audio/speech", "/v1/audio/transcriptions", "/v1/chat/completions"):
        answer = painter.post({"prompt": "x"}, path=route)
        assert answer.status == 404 and is_api_error(answer.json(), "unknown_endpoint"), route


def test_models_lists_each_media_model_with_its_kind(
    agent: Agent, tiny_tts: Path, tiny_stt: Path, tiny_image: Path
) -> None:
    """``mlx-agent models --dir`` finds the three tiny models (the pipeline by its model_index.json) with their kind."""
    result = agent.run("models", *(f"--dir={model}" for model in (tiny_tts, tiny_stt, tiny_image)))
    assert result.rc == 0, result.stdout + result.stderr
    rows = {row["path"]: row for row in result.data["models"] if row["path"] is not None}
    assert {(rows[str(m)]["kind"], rows[str(m)]["runtime"]) for m in (tiny_tts, tiny_stt, tiny_image)} == {
        ("speech", "mlx-vlm-speech"),
        ("transcription", "mlx-vlm-transcription"),
        ("image_generation", "mlx-vlm-image"),
    }


def test_a_folder_name_never_picks_the_model_class(tiny_stt: Path, tmp_path: Path) -> None:
    """A NeMo checkpoint without model_type in a folder named ``whisper-...`` loads as its config's Parakeet.

    mlx-audio alone would take ``whisper`` from the name and fail to build a Whisper from a Parakeet config.
    """
    import json
    import shutil

    misleading = tmp_path / "whisper-tiny-en"
    shutil.copytree(tiny_stt, misleading)
    config = json.loads((misleading / "config.json").read_text())
    del config["model_type"]  # as NeMo exports write it: only the ``target`` class says what it is
    (misleading / "config.json").write_text(json.dumps(config))
    with socket_worker(misleading, runtime="mlx-vlm-transcription") as worker:
        answer = upload(worker, "/v1/audio/transcriptions", {"model": str(misleading)}, wav_bytes())
    assert answer.status == 200 and answer.json() == {"text": TRANSCRIPT}, answer.body[:300]


def test_a_transcription_model_launches_eagerly_with_its_worker_loaded(agent: Agent, tiny_stt: Path) -> None:
    """``serve start --confirm`` of the tiny recogniser starts its front and media worker; ``status`` says loaded."""
    from tests.ports import free_port

    receipt = agent.launch("--path", str(tiny_stt), "--runtime", "auto", "--port", str(free_port()))
    assert receipt["plan"]["models"][0]["worker"]["kind"] == "transcription"
    (server,) = agent.run("serve", "status").data["servers"]
    assert server["model_state"] == "loaded" and server["worker_rss_bytes"] > 0


def test_image_values_mlx_vlm_would_fail_on_are_400(painter: WorkerSocket) -> None:
    """Values mlx-vlm's image schema refuses (built outside its error handling: a 500 there) are 400 here."""
    for body, field in [({"steps": 0}, "steps"), ({"n": 100}, "n"), ({"prompt": 5}, "prompt")]:
        answer = painter.post({"prompt": "x", "size": "16x16", **body}, path="/v1/images/generations")
        assert answer.status == 400 and is_api_error(answer.json(), "invalid_value"), answer
        assert answer.json()["error"]["param"] == field
