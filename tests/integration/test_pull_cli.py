"""`mlx-agent pull` through the real CLI against a stand-in of the Hub's HTTP API on loopback (``HF_ENDPOINT``).

Each test publishes the tiny model (plus files a pull must leave on the Hub) and drives preview and confirm as
a user does: what the preview lists, the fetch and what ``models`` and ``serve start`` make of it, a transfer
broken off and resumed, a revision moved since the review, a full disk, and bytes that do not match the listing.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import scan_cache_dir

from tests.conditions import wait_until
from tests.conftest import LAUNCHER, Agent, assert_valid, free_port
from tests.disk_support import tmpfs
from tests.hub_standin import Hub, model_files, serve

REPO = "org/tiny"
EXTRA = {"modeling_tiny.py": b"raise SystemExit(1)\n", "pytorch_model.bin": b"\x80pickle", ".gitattributes": b"*"}


@pytest.fixture
def hub(tiny_model: Path) -> Iterator[Hub]:
    """Serve a stand-in Hub whose ``org/tiny`` main branch holds the tiny model and three files to leave out."""
    stand_in = Hub()
    with serve(stand_in):
        stand_in.publish(REPO, {**model_files(tiny_model), **EXTRA})
        yield stand_in


@pytest.fixture
def puller(agent: Agent, hub: Hub) -> Agent:
    """Return the CLI runner of ``agent`` with ``HF_ENDPOINT`` at the stand-in and the Hub not switched off."""
    env = {**agent.env, "HF_ENDPOINT": hub.url}
    env.pop("HF_HUB_OFFLINE", None)
    return Agent(agent.home, env)


def documents(stdout: str) -> list[dict[str, Any]]:
    """Return every JSON document on stdout, in order (progress lines, then the envelope)."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while at < len(stdout):
        if stdout[at].isspace():
            at += 1
            continue
        doc, at = decoder.raw_decode(stdout, at)
        docs.append(doc)
    return docs


def pull(runner: Agent, *args: str) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """Run ``pull REPO ARGS --json``; return the exit code, the schema-checked envelope and the progress lines."""
    argv = [sys.executable, str(LAUNCHER), "pull", REPO, *args, "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=runner.env, timeout=180, cwd=runner.home)
    *progress, envelope = documents(proc.stdout)
    assert_valid("envelope", envelope)
    for line in progress:
        assert_valid("pull_progress", line)
    if envelope["status"] == "ok":
        assert_valid("pull_result" if "--confirm" in args else "pull_preview", envelope["data"])
    assert all("\n" not in json.dumps(line) for line in progress)
    return proc.returncode, envelope, progress


def previewed(runner: Agent) -> str:
    """Preview the pull and return its hash."""
    rc, envelope, _ = pull(runner)
    assert rc == 0, envelope
    return str(envelope["data"]["plan"]["preview_hash"])


def repo_dir(runner: Agent) -> Path:
    """Return the stand-in repo's folder in the runner's Hugging Face cache."""
    return Path(runner.env["HF_HOME"]) / "hub" / "models--org--tiny"


def test_the_preview_lists_the_files_the_commit_and_what_the_model_would_be(puller: Agent, hub: Hub) -> None:
    """The preview resolves main to its commit, lists each file to fetch with sizes and total, and fetches nothing."""
    rc, envelope, progress = pull(puller)
    assert (rc, progress) == (0, [])
    data = envelope["data"]
    plan = data["plan"]
    published = hub.commits[hub.repos[REPO]["main"]]
    assert plan["commit"] == hub.repos[REPO]["main"] and plan["endpoint"] == hub.url
    assert [f["name"] for f in plan["files"]] == sorted(set(published) - set(EXTRA))
    assert plan["total_bytes"] == sum(len(published[f["name"]]) for f in plan["files"])
    weights = next(f for f in plan["files"] if f["name"] == "model.safetensors")
    assert weights["sha256"] == hashlib.sha256(published["model.safetensors"]).hexdigest()
    assert {s["name"]: s["reason"] for s in plan["skipped"]} == {
        "modeling_tiny.py": "code",
        "pytorch_model.bin": "pickle",
        ".gitattributes": "hidden",
    }
    assert data["disk"]["fits"] is True and data["disk"]["fetch_bytes"] == plan["total_bytes"]
    servable = data["servable"]
    assert (servable["problem"], servable["runtime"], servable["kind"]) == (None, "mlx_lm", "text")
    assert servable["memory"]["weight_bytes"] == weights["size"]
    assert not repo_dir(puller).exists()  # the metadata the preview read went to a temporary folder
    assert {name for name, _ in hub.requests} == {"config.json", "model.safetensors.index.json"}


def test_confirm_fetches_exactly_the_plan_and_the_model_is_servable(puller: Agent, hub: Hub) -> None:
    """Confirm fetches the listed files with progress lines; models sees the repo complete; serve start plans it."""
    preview_hash = previewed(puller)
    rc, envelope, progress = pull(puller, "--confirm", "--preview-hash", preview_hash)
    assert rc == 0, envelope
    data = envelope["data"]
    assert progress[-1]["done_bytes"] == progress[-1]["fetch_bytes"] == data["fetched_bytes"]
    published = hub.commits[hub.repos[REPO]["main"]]
    snapshot = Path(data["snapshot"])
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(set(published) - set(EXTRA))
    assert all((snapshot / name).read_bytes() == published[name] for name in data["fetched"])
    assert (repo_dir(puller) / "refs" / "main").read_text() == data["commit"]
    [cached] = scan_cache_dir(repo_dir(puller).parent).repos  # huggingface_hub reads the cache as its own
    [revision] = cached.revisions
    assert (cached.repo_id, revision.commit_hash, set(revision.refs)) == (REPO, data["commit"], {"main"})
    assert revision.nb_files == len(data["fetched"])
    rows = {row["name"]: row for row in puller.run("models").data["models"]}
    assert (rows[REPO]["complete"], rows[REPO]["runtime"]) == (True, "mlx_lm")
    planned = puller.run("serve", "start", "--repo", REPO)
    assert planned.rc == 0 and planned.data["plan"]["models"][0]["source"]["revision"] == data["commit"]
    receipt = json.loads(Path(data["receipt_path"]).read_text())
    assert (receipt["plan"]["preview_hash"], receipt["fetched"]) == (preview_hash, data["fetched"])
    fetched_before = len(hub.requests)
    rc, again, _ = pull(puller, "--confirm", "--preview-hash", previewed(puller))
    assert rc == 0 and again["data"]["fetched"] == [] and again["data"]["reused"] == data["fetched"]
    assert len(hub.requests) == fetched_before + 2  # only the preview's two metadata files: nothing fetched again


def test_code_is_fetched_only_with_allow_code_and_the_flag_is_reviewed(puller: Agent, hub: Hub) -> None:
    """--allow-code fetches the repo's .py file; a confirm without the flag of that preview is preview_stale."""
    rc, envelope, _ = pull(puller, "--allow-code")
    plan = envelope["data"]["plan"]
    assert rc == 0 and [f["role"] for f in plan["files"] if f["name"] == "modeling_tiny.py"] == ["code"]
    rc, stale, _ = pull(puller, "--confirm", "--preview-hash", plan["preview_hash"])
    assert (rc, stale["error"]["code"]) == (1, "preview_stale")
    rc, envelope, _ = pull(puller, "--allow-code", "--confirm", "--preview-hash", plan["preview_hash"])
    assert rc == 0 and "modeling_tiny.py" in envelope["data"]["fetched"]
    assert (Path(envelope["data"]["snapshot"]) / "modeling_tiny.py").read_bytes() == EXTRA["modeling_tiny.py"]


def test_a_broken_transfer_fails_and_the_next_confirm_resumes_it(puller: Agent, hub: Hub) -> None:
    """A connection dropped halfway is download_interrupted; the same confirm again resumes with a Range request."""
    preview_hash = previewed(puller)
    hub.drop_once.add("model.safetensors")
    rc, envelope, _ = pull(puller, "--confirm", "--preview-hash", preview_hash)
    assert (rc, envelope["error"]["code"]) == (1, "download_interrupted")
    kept = envelope["error"]["details"]["bytes_kept"]
    size = len(hub.commits[hub.repos[REPO]["main"]]["model.safetensors"])
    assert kept == size // 2
    assert not (repo_dir(puller) / "refs" / "main").exists()  # the cache does not name a half-fetched snapshot
    rc, envelope, _ = pull(puller, "--confirm", "--preview-hash", preview_hash)
    assert rc == 0, envelope
    assert [r for name, r in hub.requests if name == "model.safetensors"][-1] == f"bytes={kept}-"
    weights = Path(envelope["data"]["snapshot"]) / "model.safetensors"
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == weights.resolve().name
    assert not list((repo_dir(puller) / "blobs").glob("*.incomplete"))


def test_a_pull_interrupted_by_a_signal_is_said_and_resumed(puller: Agent, hub: Hub) -> None:
    """SIGINT halfway through the weights ends the confirm with download_interrupted; the next one resumes."""
    preview_hash = previewed(puller)
    hub.hold["model.safetensors"] = threading.Event()
    argv = [sys.executable, str(LAUNCHER), "pull", REPO, "--confirm", "--preview-hash", preview_hash, "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=puller.env, cwd=puller.home)
    blobs = repo_dir(puller) / "blobs"
    wait_until(lambda: hub.halfway.is_set() and any(p.stat().st_size for p in blobs.glob("*.incomplete")), "half", 120)
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=60)
    envelope = documents(stdout)[-1]
    assert (proc.returncode, envelope["error"]["code"]) == (1, "download_interrupted")
    kept = envelope["error"]["details"]["bytes_kept"]
    assert kept > 0 and envelope["error"]["details"]["file"] == "model.safetensors"
    rc, envelope, _ = pull(puller, "--confirm", "--preview-hash", preview_hash)
    assert rc == 0, envelope
    assert [r for name, r in hub.requests if name == "model.safetensors"][-1] == f"bytes={kept}-"


def test_a_revision_moved_since_the_preview_is_stale_and_nothing_is_fetched(
    puller: Agent, hub: Hub, tiny_model: Path
) -> None:
    """A branch moved to a new commit after the preview is preview_stale naming both commits; no fetch."""
    preview_hash = previewed(puller)
    old = hub.repos[REPO]["main"]
    files = model_files(tiny_model)
    new = hub.publish(REPO, {**files, "config.json": files["config.json"].replace(b"{", b'{"moved": true, ', 1)})
    rc, envelope, _ = pull(puller, "--confirm", "--preview-hash", preview_hash)
    error = envelope["error"]
    assert (rc, error["code"]) == (1, "preview_stale")
    assert old in error["message"] and new in error["message"]
    assert {"field": "commit", "old": old, "new": new} in error["details"]["changes"]
    assert not repo_dir(puller).exists()


def test_bytes_that_do_not_match_the_listing_are_refused_and_deleted(puller: Agent, hub: Hub) -> None:
    """Weights whose bytes differ from the advertised sha256 are download_corrupt: no blob, no link, no ref."""
    preview_hash = previewed(puller)
    hub.wrong_bytes.add("model.safetensors")
    rc, envelope, _ = pull(puller, "--confirm", "--preview-hash", preview_hash)
    assert (rc, envelope["error"]["code"]) == (1, "download_corrupt")
    blobs = repo_dir(puller) / "blobs"
    sha256 = hashlib.sha256(hub.commits[hub.repos[REPO]["main"]]["model.safetensors"]).hexdigest()
    assert not list(blobs.glob(sha256 + "*"))
    snapshot = repo_dir(puller) / "snapshots" / hub.repos[REPO]["main"]
    assert not (snapshot / "model.safetensors").is_symlink()
    assert not (repo_dir(puller) / "refs" / "main").exists()
    hub.wrong_bytes.clear()
    rc, envelope, _ = pull(puller, "--confirm", "--preview-hash", preview_hash)
    assert rc == 0 and envelope["data"]["fetched"][0] == "model.safetensors"
    assert "config.json" in envelope["data"]["reused"]  # fetched before the bad file, and kept


def fill(disk: Path, leave: int = 0) -> Path:
    """Write a filler file on ``disk`` until it is full (or only ``leave`` bytes are free); return it."""
    import os

    filler = disk / "filler"
    block = b"\0" * 65536
    with filler.open("wb") as out:
        try:
            while os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize > leave:
                out.write(block)
                out.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_is_refused_before_the_fetch_and_halfway_through_it(
    puller: Agent, hub: Hub, tmp_path: Path
) -> None:
    """Too little room is not_enough_disk before a byte is fetched; a disk filling up halfway is the same, resumable."""
    with tmpfs(tmp_path, "12m") as disk:
        on_disk = Agent(puller.home, {**puller.env, "HF_HOME": str(disk / "hf")})
        preview_hash = previewed(on_disk)
        filler = fill(disk, leave=8 * 1024 * 1024)  # under the floor (8 MiB) once the model is added
        rc, envelope, _ = pull(on_disk, "--confirm", "--preview-hash", preview_hash)
        assert (rc, envelope["error"]["code"]) == (1, "not_enough_disk")
        assert hub.requests == [("config.json", None), ("model.safetensors.index.json", None)]  # the preview's
        filler.unlink()
        hub.hold["model.safetensors"] = go_on = threading.Event()
        argv = [sys.executable, str(LAUNCHER), "pull", REPO, "--confirm", "--preview-hash", preview_hash, "--json"]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=on_disk.env, cwd=on_disk.home)
        wait_until(hub.halfway.is_set, "the weights' transfer held halfway", timeout=120)
        filler = fill(disk)
        go_on.set()
        stdout, _ = proc.communicate(timeout=120)
        envelope = documents(stdout)[-1]
        assert (proc.returncode, envelope["error"]["code"]) == (1, "not_enough_disk")
        assert envelope["error"]["details"]["file"] == "model.safetensors"
        assert not (repo_dir(on_disk) / "snapshots" / hub.repos[REPO]["main"] / "model.safetensors").exists()
        filler.unlink()
        rc, envelope, _ = pull(on_disk, "--confirm", "--preview-hash", preview_hash)
        assert rc == 0, envelope
        assert [r for name, r in hub.requests if name == "model.safetensors"][-1] is not None  # resumed


def test_an_unknown_repo_and_an_offline_hub_are_refused_with_their_codes(puller: Agent) -> None:
    """An unknown repo is repo_not_found; no Hub listening or HF_HUB_OFFLINE=1 is hub_unreachable; a bad id usage."""
    argv = [sys.executable, str(LAUNCHER), "pull"]
    missing = subprocess.run([*argv, "org/absent", "--json"], capture_output=True, text=True, env=puller.env)
    assert (missing.returncode, json.loads(missing.stdout)["error"]["code"]) == (1, "repo_not_found")
    nobody = {**puller.env, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    closed = subprocess.run([*argv, REPO, "--json"], capture_output=True, text=True, env=nobody)
    assert (closed.returncode, json.loads(closed.stdout)["error"]["code"]) == (1, "hub_unreachable")
    offline = {**puller.env, "HF_HUB_OFFLINE": "1"}
    refused = subprocess.run([*argv, REPO, "--json"], capture_output=True, text=True, env=offline)
    assert (refused.returncode, json.loads(refused.stdout)["error"]["code"]) == (1, "hub_unreachable")
    bad = subprocess.run([*argv, "../etc", "--json"], capture_output=True, text=True, env=puller.env)
    assert (bad.returncode, json.loads(bad.stdout)["error"]["code"]) == (2, "invalid_arguments")
