"""Transformers' index of its model files, saved by the first worker and read by later ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlx_agent.runtime import transformers_index

# A worker's import, in a fresh interpreter: the index hooked in first, then what mlx_lm.server imports and uses.
PROBE = """
import json, sys
from mlx_agent.runtime import transformers_index
hooked = transformers_index.install()
from transformers import AutoTokenizer, PreTrainedTokenizerFast
import transformers.models.llama
from transformers.utils import import_utils
define = import_utils.define_import_structure
print(json.dumps({"hooked": hooked, "defined": getattr(define, "defined", None),
                  "fast": PreTrainedTokenizerFast.__name__, "auto": AutoTokenizer.__name__}))
"""


def fast_tokenizer() -> str:
    """Return the class name an unhooked ``from transformers import PreTrainedTokenizerFast`` resolves."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.__name__


def worker_import(cache: Path) -> dict[str, object]:
    """Import transformers the way a worker does, with ``cache`` as the user's cache; return what it saw."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return seen


def saved(cache: Path) -> Path:
    """Return the one index file saved under ``cache``."""
    [path] = (cache / "mlx-agent").glob("transformers-index-*.json")
    return path


def test_the_first_worker_scans_and_saves_and_the_next_reads_it(tmp_path: Path) -> None:
    """The first import defines the models folder and saves the index privately; the second defines nothing."""
    first = worker_import(tmp_path)
    assert first["hooked"] is True
    assert first["fast"] == fast_tokenizer() and first["auto"] == "AutoTokenizer"
    assert isinstance(first["defined"], list) and first["defined"][0].endswith("transformers/models")
    path = saved(tmp_path)
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    second = worker_import(tmp_path)
    assert second["defined"] == [] and second["fast"] == fast_tokenizer()


def test_the_saved_index_is_what_transformers_defines() -> None:
    """Read back, the index equals transformers' own structure of its models folder, in its order, with the prefix."""
    from transformers.utils import import_utils

    define = getattr(import_utils.define_import_structure, "__wrapped__", import_utils.define_import_structure)
    folder = Path(import_utils.__file__).parent.parent / "models"
    real = define(folder, prefix="models")
    back = transformers_index.decode(json.loads(json.dumps(transformers_index.encode(real))))
    assert back == real and list(back) == list(real)
    assert all(list(back[backends]) == list(modules) for backends, modules in real.items())


@pytest.mark.fast
def test_one_process_gets_the_same_structure_each_call(tmp_path: Path) -> None:
    """As transformers' lru_cache does: a folder asked for twice is the same object, defined once."""
    calls: list[tuple[str, str | None]] = []

    def define(module_path: str, prefix: str | None = None) -> dict[frozenset[str], dict[str, set[str]]]:
        calls.append((module_path, prefix))
        return {frozenset(): {f"{prefix}.a": {"A"}}}

    wrapped = transformers_index.remembering(define, tmp_path / "index.json", tmp_path)
    assert wrapped("x", "p") is wrapped("x", prefix="p") and calls == [("x", "p")]
    again = transformers_index.remembering(define, tmp_path / "index.json", tmp_path)
    assert again("x", "p") == {frozenset(): {"p.a": {"A"}}} and calls == [("x", "p")]  # read from the file


def test_a_damaged_index_is_scanned_again_and_replaced(tmp_path: Path) -> None:
    """A truncated index file is not trusted: the worker scans as if it were absent and saves a whole one."""
    worker_import(tmp_path)
    path = saved(tmp_path)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    again = worker_import(tmp_path)
    assert again["defined"] and again["fast"] == fast_tokenizer()
    assert json.loads(path.read_bytes()) == json.loads(whole)


def test_a_damaged_entry_is_defined_again(tmp_path: Path) -> None:
    """One folder's entry that does not decode is defined by transformers again, the others still read."""
    worker_import(tmp_path)
    path = saved(tmp_path)
    index = json.loads(path.read_bytes())
    first = next(iter(index["folders"]))
    index["folders"][first] = [["not", "rows"]]
    path.write_text(json.dumps(index))
    again = worker_import(tmp_path)
    assert again["defined"] == [first] and again["fast"] == fast_tokenizer()


@pytest.mark.fast
def test_a_save_removes_the_indexes_of_installs_gone_or_changed(tmp_path: Path) -> None:
    """Saving prunes an earlier format's index, a removed install's and a changed one's; a current one stays."""
    root = tmp_path / "mlx-agent"
    root.mkdir(mode=0o700)
    package = transformers_index.installed_package()
    assert package is not None
    current = root / str(transformers_index.index_name(package))
    gone = root / "transformers-index-gone.json"
    gone.write_text(json.dumps({"package": str(tmp_path / "removed" / "transformers"), "folders": {}}))
    changed = root / "transformers-index-changed.json"  # the same install, saved before it was upgraded
    changed.write_text(json.dumps({"package": str(package), "folders": {}}))
    earlier = root / "transformers-index-earlier.json"
    earlier.write_text(json.dumps({str(package / "models"): {"dict": []}}))
    current.write_text(json.dumps({"package": str(package), "folders": {}}))  # a live install's, up to date
    unrelated = root / "notes.json"
    unrelated.write_text("{}")
    target = root / "transformers-index-new.json"
    transformers_index.remembering(lambda path, prefix=None: {frozenset(): {"m": {"A"}}}, target, package)("x")
    assert sorted(p.name for p in root.iterdir()) == sorted([current.name, target.name, unrelated.name])


def test_an_index_in_a_folder_others_can_write_is_not_read(tmp_path: Path) -> None:
    """A cache folder group- or world-writable could hold a planted index: it is neither read nor written."""
    worker_import(tmp_path)
    path = saved(tmp_path)
    path.parent.chmod(0o777)
    seen = worker_import(tmp_path)
    assert seen["defined"] and seen["fast"] == fast_tokenizer()
    path.parent.chmod(0o700)


@pytest.mark.fast
def test_a_process_that_already_imported_transformers_is_not_hooked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed after transformers defined its structure, the index would only be stale work: install says no."""
    monkeypatch.setitem(sys.modules, transformers_index.MODULE, sys.modules.get("json"))
    before = list(sys.meta_path)
    assert transformers_index.install() is False
    assert sys.meta_path == before


@pytest.mark.fast
def test_the_cache_is_the_users_own_cache_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``$XDG_CACHE_HOME/mlx-agent`` when set, else ``~/.cache/mlx-agent`` here (``~/Library/Caches`` on macOS)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert transformers_index.cache_root() == tmp_path / "mlx-agent"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert transformers_index.cache_root() == Path.home() / "Library" / "Caches" / "mlx-agent"
    monkeypatch.setattr(sys, "platform", "linux")
    assert transformers_index.cache_root() == Path.home() / ".cache" / "mlx-agent"
