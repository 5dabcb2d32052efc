"""Every saved prompt-cache entry is checked before use: a damaged or foreign one is quarantined, never loaded."""

from __future__ import annotations

import json
import os
import stat
import struct
import time
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache, QuantizedKVCache

from mlx_agent.kept_cache import kept_cache_health
from mlx_agent.runtime.serving.cache_entry_check import (
    MAX_HEADER_BYTES,
    EntryLabel,
    EntryRejected,
    ExpectedLayout,
    binding,
    check_layout,
    entry_name,
    read_header,
)
from mlx_agent.runtime.serving.prompt_cache import AlignedPromptCache, enforce_limit, restore_entries, save_entries
from mlx_agent.wire import PROMPT_CACHE_QUARANTINE

IDENTITY = "a" * 64
TOKENS = list(range(10))


def filled(positions: int, heads: int = 2, dim: int = 4, dtype: mx.Dtype = mx.float32) -> KVCache:
    """Return one KV cache layer holding ``positions`` positions of ``heads`` heads of ``dim``."""
    layer = KVCache()  # type: ignore[no-untyped-call]
    keys = mx.zeros((1, heads, positions, dim), dtype=dtype)
    layer.update_and_fetch(keys, keys)  # type: ignore[no-untyped-call]
    return layer


def layout() -> ExpectedLayout:
    """Return the layout of a two-layer model of 2 KV heads of dim 4, probed as the worker probes."""
    return ExpectedLayout(lambda: [filled(1), filled(1)])


def saved(tmp_path: Path, tokens: list[int] = TOKENS, layers: list[Any] | None = None) -> Path:
    """Save one entry caching ``tokens`` as a worker does; return its file."""
    store = AlignedPromptCache(max_size=4)
    store.insert_cache("m", tokens, layers or [filled(len(tokens)), filled(len(tokens))])
    directory = tmp_path / "prompt-cache" / IDENTITY
    assert save_entries(store, "m", store.held_keys("m"), directory, IDENTITY).saved == 1
    return directory / entry_name(tokens)


def restore(path: Path, expected: ExpectedLayout | None = None) -> tuple[int, list[tuple[str, str]]]:
    """Restore the directory of ``path`` into a fresh store; return how many came back and which were refused."""
    result = restore_entries(AlignedPromptCache(max_size=4), "m", path.parent, IDENTITY, expected or layout())
    assert result.refused is None
    return result.restored, result.quarantined


def loaded(path: Path) -> tuple[dict[str, mx.array], dict[str, str]]:
    """Return the arrays and the metadata of the safetensors file ``path``."""
    arrays, meta = cast("tuple[dict[str, mx.array], dict[str, str]]", mx.load(str(path), return_metadata=True))
    return arrays, meta


def rewrite(path: Path, **metadata: str) -> None:
    """Rewrite ``path`` with the same arrays and its metadata changed as given."""
    arrays, meta = loaded(path)
    mx.save_safetensors(str(path), arrays, {**meta, **{f"0.{k}": v for k, v in metadata.items()}})


def assert_quarantined(path: Path, quarantined: list[tuple[str, str]], words: str) -> None:
    """Assert the entry left for the private quarantine beside it, refused for a reason naming ``words``."""
    assert [name for name, _ in quarantined] == [path.name]
    assert words in quarantined[0][1], quarantined
    moved = path.parent / PROMPT_CACHE_QUARANTINE / path.name
    assert not path.exists() and moved.is_file()
    assert stat.S_IMODE(moved.parent.stat().st_mode) == 0o700


def test_an_entry_a_worker_saved_passes_and_comes_back(tmp_path: Path) -> None:
    """The entry a worker saves carries its binding, passes every check and is restored usable."""
    path = saved(tmp_path)
    fresh = AlignedPromptCache(max_size=4)
    result = restore_entries(fresh, "m", path.parent, IDENTITY, layout())
    assert (result.restored, result.quarantined, result.refused) == (1, [], None)
    cache, rest = fresh.fetch_nearest_cache("m", [*TOKENS, 42])
    assert cache is not None and cache[0].offset == 10 and rest == [42]


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda raw: raw[: len(raw) // 2], "data"),  # truncated inside the data
        (lambda raw: raw[:20], "header length"),  # truncated inside the header
        (lambda raw: b"", "too short"),
        (lambda raw: os.urandom(len(raw)), "header"),  # garbage: a random header length
        (lambda raw: struct.pack("<Q", 8) + b"not json" + raw[16:], "not JSON"),
        (lambda raw: struct.pack("<Q", 2**40) + raw[8:], "header length 1099511627776"),
    ],
    ids=["truncated", "cut-in-header", "empty", "garbage", "not-json", "huge-header-length"],
)
def test_a_damaged_file_is_quarantined_before_mlx_reads_it(tmp_path: Path, damage: object, words: str) -> None:
    """Truncated, empty, garbage or huge-header files are refused by the bounded header read, then moved aside."""
    path = saved(tmp_path)
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    restored, quarantined = restore(path)
    assert restored == 0
    assert_quarantined(path, quarantined, words)


def test_the_header_read_is_bounded_and_the_tensors_must_tile_the_data(tmp_path: Path) -> None:
    """A header length past the bound, or tensors that overlap, leave a gap or outrun the file, is refused."""
    path = tmp_path / "x.safetensors"

    def header(tensors: dict[str, Any], extra: bytes = b"") -> None:
        raw = json.dumps(tensors).encode()
        path.write_bytes(struct.pack("<Q", len(raw)) + raw + extra)

    cases = {
        "overlap": {
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
        },
        "gap": {"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}},
        "shape": {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
        "dtype": {"a": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}},
    }
    for tensors in cases.values():
        header(tensors, b"\0" * 8)
        fd = os.open(path, os.O_RDONLY)
        with pytest.raises(EntryRejected):
            read_header(fd)
        os.close(fd)
    path.write_bytes(struct.pack("<Q", MAX_HEADER_BYTES + 1) + b" " * 64)
    fd = os.open(path, os.O_RDONLY)
    with pytest.raises(EntryRejected, match="does not fit"):
        read_header(fd)
    os.close(fd)
    header({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "__metadata__": {"k": "v"}}, b"\0" * 8)
    fd = os.open(path, os.O_RDONLY)
    assert read_header(fd).tensors == {"a": ("F32", (2,))}
    os.close(fd)


def test_an_entry_relabelled_with_another_prompts_tokens_is_refused(tmp_path: Path) -> None:
    """Another prompt's token ids under the entry's binding, or a recomputed binding under the old name, are refused."""
    other = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    path = saved(tmp_path)
    rewrite(path, tokens=json.dumps(other))
    restored, quarantined = restore(path)
    assert restored == 0
    assert_quarantined(path, quarantined, "binding")

    path = saved(tmp_path / "again")
    rewrite(path, tokens=json.dumps(other), binding=binding(IDENTITY, other, "assistant"))
    restored, quarantined = restore(path)
    assert restored == 0
    assert_quarantined(path, quarantined, "file name")


def test_an_entry_without_a_binding_or_of_another_identity_is_refused(tmp_path: Path) -> None:
    """An entry saved without a binding (older format), or for another identity, is quarantined."""
    path = saved(tmp_path)
    arrays, meta = loaded(path)
    mx.save_safetensors(str(path), arrays, {k: v for k, v in meta.items() if k not in ("0.format", "0.binding")})
    assert_quarantined(path, restore(path)[1], "binding")
    path = saved(tmp_path / "again")
    rewrite(path, identity="b" * 64)
    assert_quarantined(path, restore(path)[1], "another model identity")


def test_an_entry_of_the_wrong_shape_or_dtype_is_refused_before_use(tmp_path: Path) -> None:
    """Another head dim, head count, dtype or layer count than the model's is refused; nothing is inserted."""
    for index, layers in enumerate(
        [
            [filled(10, dim=8), filled(10, dim=8)],
            [filled(10, heads=3), filled(10, heads=3)],
            [filled(10, dtype=mx.float16), filled(10, dtype=mx.float16)],
            [filled(10), filled(10), filled(10)],
        ]
    ):
        path = saved(tmp_path / str(index), layers=layers)
        store = AlignedPromptCache(max_size=4)
        result = restore_entries(store, "m", path.parent, IDENTITY, layout())
        assert result.restored == 0 and len(store) == 0
        assert_quarantined(path, result.quarantined, "")


def test_an_entry_whose_positions_are_not_its_tokens_is_refused(tmp_path: Path) -> None:
    """Stored positions that the key's tokens do not account for (fewer or more) are refused."""
    cache = [filled(10), filled(10)]
    with pytest.raises(EntryRejected, match="positions"):
        check_layout(cache, EntryLabel(list(range(7)), "assistant"), layout())
    short = filled(10)
    assert short.keys is not None
    short.keys = short.keys[..., :5, :]
    with pytest.raises(EntryRejected, match="5 positions stored for 10"):
        check_layout([short, filled(10)], EntryLabel(TOKENS, "assistant"), layout())


def test_a_class_name_mlx_lm_would_look_up_blindly_is_refused(tmp_path: Path) -> None:
    """A layer naming another class (mlx_lm resolves names in its module) is refused before loading."""
    path = saved(tmp_path)
    arrays, meta = loaded(path)
    mx.save_safetensors(str(path), arrays, {**meta, "1.0": "deque"})
    assert_quarantined(path, restore(path)[1], "layer 0 is a deque")


def test_a_quantized_layer_passes_only_at_the_workers_kv_bits(tmp_path: Path) -> None:
    """A KV layer saved as a QuantizedKVCache fits with the worker's KV bits, and is refused at others."""

    def quantized(bits: int) -> list[QuantizedKVCache]:
        layers = []
        for _ in range(2):
            layer = QuantizedKVCache(group_size=32, bits=bits)
            keys = mx.zeros((1, 2, 10, 32))
            layer.update_and_fetch(keys, keys)  # type: ignore[no-untyped-call]
            layers.append(layer)
        return layers

    probe = ExpectedLayout(lambda: [filled(1, dim=32), filled(1, dim=32)], quantized=(32, 8))
    good = saved(tmp_path / "good", layers=quantized(8))
    assert restore(good, probe) == (1, [])
    bad = saved(tmp_path / "bad", layers=quantized(4))
    assert_quarantined(bad, restore(bad, probe)[1], "KV bits")


def test_an_unsafe_directory_is_neither_restored_nor_written(tmp_path: Path) -> None:
    """A 0777 kept-cache directory (or root) is refused for restore and save, its files untouched; status says so."""
    path = saved(tmp_path)
    for unsafe in (path.parent, path.parent.parent):
        os.chmod(unsafe, 0o777)
        result = restore_entries(AlignedPromptCache(max_size=4), "m", path.parent, IDENTITY, layout())
        assert (
            result.restored == 0 and result.quarantined == [] and "writable by group or others" in str(result.refused)
        )
        assert path.is_file()
        store = AlignedPromptCache(max_size=4)
        store.insert_cache("m", [1, 2, 3], [filled(3), filled(3)])
        assert save_entries(store, "m", store.held_keys("m"), path.parent, IDENTITY).saved == 0
        health = kept_cache_health(path.parent)
        assert health["quarantined"] == 0 and "writable by group or others" in health["refused"]
        os.chmod(unsafe, 0o700)
    assert kept_cache_health(path.parent) == {"quarantined": 0, "refused": None}


def test_a_link_in_place_of_an_entry_is_quarantined_and_counted(tmp_path: Path) -> None:
    """An entry that is a symbolic link is never followed: the link is moved aside and counted."""
    path = saved(tmp_path)
    target = tmp_path / "elsewhere.safetensors"
    path.rename(target)
    path.symlink_to(target)
    restored, quarantined = restore(path)
    assert restored == 0 and "symbolic link" in quarantined[0][1]
    assert (path.parent / PROMPT_CACHE_QUARANTINE / path.name).is_symlink() and target.is_file()
    assert kept_cache_health(path.parent)["quarantined"] == 1


def test_quarantined_entries_go_first_under_the_disk_limit(tmp_path: Path) -> None:
    """The disk limit deletes quarantined entries before any usable one, however recent."""
    good = saved(tmp_path / "a", tokens=[1, 2, 3])
    time.sleep(0.01)
    bad = saved(tmp_path / "a", tokens=[4, 5, 6])
    bad.write_bytes(b"junk" * 1000)
    restore(bad)
    quarantined = bad.parent / PROMPT_CACHE_QUARANTINE / bad.name
    assert quarantined.is_file() and good.is_file()
    enforce_limit(good.parent.parent, good.stat().st_size)
    assert good.is_file() and not quarantined.exists()
