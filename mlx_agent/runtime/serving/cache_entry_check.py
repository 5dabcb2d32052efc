"""Checks of one saved prompt-cache entry before it is loaded and used: header, metadata, binding, layout.

A saved entry is a safetensors file written by mlx_lm's ``save_prompt_cache`` with our metadata. Before
``mx.load`` sees it, its header is read with a bounded read and checked (length, JSON, tensors that exactly
tile the data that is there), and its metadata must name this identity, the classes of this model's cache
and the token ids it caches, bound by a sha256 (the ``binding``) and by the file's name. After loading, every
layer must have the class, dtype and shape of the layer this model builds (layers, KV heads, head dim), and
positions that the key's tokens account for. Whatever fails raises ``EntryRejected`` with one short reason.

The binding detects an entry relabelled with another prompt's tokens, a mix-up or damage; it is no signature
(anyone who can write the private directory can write a consistent entry).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own bound; a long conversation's tokens fit
ENTRY_FORMAT = "1"  # our metadata's layout: identity, tokens, cache_type, binding
CACHE_TYPES = ("assistant", "user", "system")  # mlx_lm's LRUPromptCache knows only these
SCALAR_KINDS = ("scalar", "string", "none")  # what load_prompt_cache turns back into Python values
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
    "C64": 8,
}
_CLASS_KEY = re.compile(r"1\.(\d+)")
_SCALAR_KEY = re.compile(r"2\.(\d+)\.([01])")


class EntryRejected(Exception):
    """A saved entry that is damaged or not this model's; ``reason`` says which check it failed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def binding(identity: str, tokens: list[int], cache_type: str) -> str:
    """Return the sha256 that binds an entry to its identity, the token ids it caches and its cache type."""
    text = json.dumps({"cache_type": cache_type, "identity": identity, "tokens": tokens}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def entry_name(tokens: list[int]) -> str:
    """Return the file name of the entry caching ``tokens``."""
    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:32] + ".safetensors"


@dataclass(frozen=True)
class Header:
    """What a safetensors header says: its string metadata and each tensor's dtype and shape."""

    metadata: dict[str, str]
    tensors: dict[str, tuple[str, tuple[int, ...]]]


def read_header(fd: int) -> Header:
    """Read and check the safetensors header of the open file ``fd`` without reading its data."""
    size = os.fstat(fd).st_size
    if size < 8:
        raise EntryRejected(f"{size} bytes: too short for a safetensors header")
    length = int.from_bytes(os.pread(fd, 8, 0), "little")
    if length > MAX_HEADER_BYTES or 8 + length > size:
        raise EntryRejected(f"header length {length} does not fit the file's {size} bytes")
    raw = os.pread(fd, length, 8)
    if len(raw) != length:
        raise EntryRejected("the header was cut short while reading")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise EntryRejected("the header is not JSON") from None
    if not isinstance(header, dict):
        raise EntryRejected("the header is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise EntryRejected("the header's metadata is not a table of strings")
    return Header(metadata, _tensors(header, size - 8 - length))


def _tensors(header: dict[str, Any], data_bytes: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Return each tensor's dtype and shape, refusing offsets that do not tile the ``data_bytes`` present."""
    spans: list[tuple[int, int]] = []
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, info in header.items():
        dtype = info.get("dtype") if isinstance(info, dict) else None
        shape = info.get("shape") if isinstance(info, dict) else None
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if (
            dtype not in DTYPE_BYTES
            or not isinstance(shape, list)
            or not all(isinstance(d, int) and d >= 0 for d in shape)
            or not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)
        ):
            raise EntryRejected(f"tensor {name!r} has a malformed description")
        count = 1
        for d in shape:
            count *= d
        begin, end = offsets
        if not 0 <= begin <= end or end - begin != count * DTYPE_BYTES[dtype]:
            raise EntryRejected(f"tensor {name!r}'s offsets do not match its shape")
        spans.append((begin, end))
        tensors[name] = (dtype, tuple(shape))
    position = 0
    for begin, end in sorted(spans):
        if begin != position:
            raise EntryRejected("the tensors overlap or leave a gap")
        position = end
    if position != data_bytes:
        raise EntryRejected(f"the tensors need {position} bytes of data and the file holds {data_bytes}")
    return tensors


@dataclass(frozen=True)
class EntryLabel:
    """What an entry's checked metadata says it caches."""

    tokens: list[int]
    cache_type: str


def check_label(header: Header, name: str, identity: str, classes: list[str], quantized: bool) -> EntryLabel:
    """Check the metadata of the entry file ``name`` against this identity and model; return its label.

    ``classes`` are the cache classes this model builds, one per layer; with ``quantized`` (KV bits) a
    ``KVCache`` layer may have been saved as the ``QuantizedKVCache`` it became.
    """
    meta = header.metadata
    if meta.get("0.identity") != identity:
        raise EntryRejected("made for another model identity")
    if meta.get("0.format") != ENTRY_FORMAT:
        raise EntryRejected("no binding to its tokens (saved by an older mlx-agent, or not by mlx-agent)")
    saved = {int(m.group(1)): v for k, v in meta.items() if (m := _CLASS_KEY.fullmatch(k))}
    if sorted(saved) != list(range(len(classes))):
        raise EntryRejected(f"{len(saved)} cache layers, and this model has {len(classes)}")
    for index, expected in enumerate(classes):
        if saved[index] != expected and not (
            quantized and expected == "KVCache" and saved[index] == "QuantizedKVCache"
        ):
            raise EntryRejected(f"layer {index} is a {saved[index][:40]}, and this model's is a {expected}")
    scalars: dict[int, dict[int, str]] = {}
    for key, value in meta.items():
        if m := _SCALAR_KEY.fullmatch(key):
            scalars.setdefault(int(m.group(1)), {})[int(m.group(2))] = value
    for parts in scalars.values():
        if parts.get(0) not in header.tensors or parts.get(1) not in SCALAR_KINDS:
            raise EntryRejected("a saved scalar names no tensor, or a kind mlx_lm does not know")
    try:
        tokens = json.loads(meta.get("0.tokens", ""))
    except ValueError:
        raise EntryRejected("its token ids are not JSON") from None
    if not isinstance(tokens, list) or not tokens or not all(type(t) is int and 0 <= t < 2**31 for t in tokens):
        raise EntryRejected("its token ids are not a list of token ids")
    cache_type = meta.get("0.cache_type", "")
    if cache_type not in CACHE_TYPES:
        raise EntryRejected(f"cache type {cache_type[:40]!r} is not one mlx_lm keeps")
    if meta.get("0.binding") != binding(identity, tokens, cache_type):
        raise EntryRejected("its binding does not match the token ids it names (relabelled or damaged)")
    if name != entry_name(tokens):
        raise EntryRejected("its file name is not that of the token ids it names (relabelled or moved)")
    return EntryLabel(tokens, cache_type)


@dataclass
class ExpectedLayout:
    """The cache layout this model builds, probed once and only when an entry is to be checked.

    ``probe`` returns one layer per cache slot after a one-token step (so each holds arrays of the model's
    KV heads, head dim and dtype); ``quantized`` is ``(group_size, bits)`` with KV bits, else None.
    """

    probe: Callable[[], list[Any]]
    quantized: tuple[int, int] | None = None
    _layers: list[Any] | None = field(default=None, init=False, repr=False)

    @property
    def layers(self) -> list[Any]:
        """Return the probed layers (probing the first time)."""
        if self._layers is None:
            self._layers = self.probe()
        return self._layers

    @property
    def classes(self) -> list[str]:
        """Return the class name of each probed layer."""
        return [type(layer).__name__ for layer in self.layers]


def check_layout(cache: list[Any], label: EntryLabel, expected: ExpectedLayout) -> None:
    """Check that each loaded layer has the probed layer's dtypes and shapes, and positions its tokens name."""
    from mlx_lm.models.cache import can_trim_prompt_cache

    if len(cache) != len(expected.layers):
        raise EntryRejected(f"{len(cache)} cache layers, and this model has {len(expected.layers)}")
    for index, (layer, probe) in enumerate(zip(cache, expected.layers, strict=True)):
        try:
            _check_layer(layer, probe, expected.quantized)
        except EntryRejected as exc:
            raise EntryRejected(f"layer {index}: {exc.reason}") from None
    if can_trim_prompt_cache(cache):  # a trimmable entry was cut to its key when stored (``align``)
        offsets = {layer.offset for layer in cache if isinstance(getattr(layer, "offset", None), int)}
        if offsets and offsets != {len(label.tokens)}:
            raise EntryRejected(f"it holds {sorted(offsets)[:4]} positions for {len(label.tokens)} token ids")


def _check_layer(layer: Any, probe: Any, quantized: tuple[int, int] | None) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    offset = getattr(layer, "offset", None)
    if hasattr(probe, "offset") and (not isinstance(offset, int) or isinstance(offset, bool) or offset < 0):
        raise EntryRejected("its position count is not a count")
    for attribute in ("keep", "max_size"):
        if getattr(layer, attribute, None) != getattr(probe, attribute, None):
            raise EntryRejected(f"its {attribute} differs from this model's")
    if type(layer).__name__ == "QuantizedKVCache" and type(probe).__name__ == "KVCache":
        _check_quantized(layer, probe, quantized)
        return
    held = offset
    if isinstance(offset, int) and isinstance(getattr(layer, "max_size", None), int):
        held = min(offset, layer.max_size)  # a rotating layer keeps at most max_size positions
    flat: Any = tree_flatten(layer.state)
    flat_probe: Any = tree_flatten(probe.state)
    leaves: list[Any] = [v for _, v in flat]
    wanted: list[Any] = [v for _, v in flat_probe]
    if len(leaves) != len(wanted):
        raise EntryRejected("its state has another structure")
    for have, want in zip(leaves, wanted, strict=True):
        if isinstance(want, mx.array) != isinstance(have, mx.array):
            raise EntryRejected("its state has another structure")
        if not isinstance(want, mx.array):
            continue
        if have.dtype != want.dtype or have.ndim != want.ndim:
            raise EntryRejected(f"an array of {have.dtype} x{have.ndim} where this model has {want.dtype} x{want.ndim}")
        _check_shape(tuple(have.shape), tuple(want.shape), held)


def _check_shape(have: tuple[int, ...], want: tuple[int, ...], offset: int | None) -> None:
    """Match a 4-D (batch, heads, positions, dim) array but its positions, which must hold ``offset``; else all."""
    if len(want) == 4:
        if have[:2] != want[:2] or have[3] != want[3]:
            raise EntryRejected(f"shape {list(have)} where this model has {list(want[:2])}, n, {want[3]}")
        if isinstance(offset, int) and have[2] < offset:
            raise EntryRejected(f"{have[2]} positions stored for {offset} used")
    elif have != want:
        raise EntryRejected(f"shape {list(have)} where this model has {list(want)}")


def _check_quantized(layer: Any, probe: Any, quantized: tuple[int, int] | None) -> None:
    """Check a KV layer saved quantized: packed values and scales of this model's heads and dims, at its bits."""
    import mlx.core as mx

    if quantized is None or (layer.group_size, layer.bits) != quantized:
        raise EntryRejected("quantized with other KV bits than this worker's")
    group_size, bits = quantized
    for parts, full in ((layer.keys, probe.keys), (layer.values, probe.values)):
        if not isinstance(parts, tuple | list) or len(parts) != 3 or not all(isinstance(p, mx.array) for p in parts):
            raise EntryRejected("its quantized state has another structure")
        batch, heads, _, dim = full.shape
        packed = (batch, heads, dim * bits // 32)
        grouped = (batch, heads, dim // group_size)
        dtypes = (mx.uint32, full.dtype, full.dtype)
        for part, (b, h, d), dtype in zip(parts, (packed, grouped, grouped), dtypes, strict=True):
            if part.dtype != dtype:
                raise EntryRejected(f"a quantized array of {part.dtype} where {dtype} is expected")
            if part.ndim != 4 or (part.shape[0], part.shape[1], part.shape[3]) != (b, h, d):
                raise EntryRejected(f"quantized shape {list(part.shape)} does not fit this model's heads and dims")
            if part.shape[2] < layer.offset:
                raise EntryRejected(f"{part.shape[2]} positions stored for {layer.offset} used")
