"""A models file (``serve start --models FILE``): one ``[[model]]`` TOML table per model of a fleet.

Each table names one model as ``serve start``'s options do (``name``, ``aliases``, one of ``path``, ``repo``
or ``training_receipt``, ``runtime``, ``adapter_path``, ``thinking``, ``max_tokens``, ``prompt_lookup``,
``draft_model``, ``kv_bits``, ...) and its policy (``idle_timeout``, ``keep_loaded``, ``preload``). Relative
paths are read from the file's directory. The tables are checked declaratively (pydantic, unknown keys
refused); a refusal names the line and key. Names and aliases must not collide: a request's ``model`` must
reach one model, whatever the order. The plan binds the file's bytes (``models_file``) and every model's
identity as a single-model plan does.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mlx_agent.errors import ModelsFileInvalid, ModelsNameConflict
from mlx_agent.plan.model_spec import ModelSpec

if TYPE_CHECKING:
    from mlx_agent.records import ModelsFileRecord

DECODE_POSITION = re.compile(r"at line (\d+), column (\d+)")


@functools.cache
def _entry_model() -> Any:
    """Return the declaration of one ``[[model]]`` table (pydantic is imported only when a file is read)."""
    from pydantic import BaseModel, ConfigDict, Field

    Text = Annotated[str, Field(min_length=1)]

    class ModelEntry(BaseModel):
        """One ``[[model]]`` table."""

        model_config = ConfigDict(extra="forbid", strict=True)

        name: Text
        aliases: list[Text] = []
        path: Text | None = None
        repo: Text | None = None
        training_receipt: Text | None = None
        runtime: Text = "mlx_lm"
        runtime_executable: Text | None = None
        adapter_path: Text | None = None
        thinking: Literal["on", "off"] | None = None
        chat_template_args: dict[str, Any] | None = None
        max_tokens: Annotated[int, Field(ge=1)] = 512
        max_tokens_ceiling: Annotated[int, Field(ge=1)] | None = None
        prompt_lookup: bool = False
        m5_prefill: bool = False
        draft_model: Text | None = None
        num_draft_tokens: Annotated[int, Field(ge=1)] | None = None
        kv_bits: Literal[2, 3, 4, 5, 6, 8] | None = None
        kv_group_size: Literal[32, 64, 128] | None = None
        hosts: Annotated[list[Text], Field(min_length=2)] | None = None
        hostfile: Text | None = None
        backend: Literal["ring", "jaccl"] = "ring"
        pipeline: bool = False
        ring_port: Annotated[int, Field(ge=1, le=65535)] | None = None
        idle_timeout: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
        keep_loaded: bool | None = None
        preload: bool | None = None

    class ModelsDocument(BaseModel):
        """The whole file: its ``[[model]]`` tables and nothing else."""

        model_config = ConfigDict(extra="forbid", strict=True)

        model: Annotated[list[ModelEntry], Field(min_length=1)]

    return ModelsDocument


def key_line(text: str, index: int | None, key: str | None) -> int | None:
    """Return the line of ``key`` in the ``index``-th ``[[model]]`` table (or of that table's header)."""
    lines = text.splitlines()
    header = re.compile(r"^\s*\[\[\s*model\s*\]\]")
    table = re.compile(r"^\s*\[")
    if index is None:  # a key at the top of the file, or a table of its own
        pattern = re.compile(rf"^\s*(\[+\s*)?[\"']?{re.escape(key or '')}[\"']?\s*[=.\]]")
        return next((n + 1 for n, line in enumerate(lines) if key and pattern.match(line)), None)
    starts = [n for n, line in enumerate(lines) if header.match(line)]
    if index >= len(starts):
        return None
    start = starts[index]
    end = next((n for n in range(start + 1, len(lines)) if table.match(lines[n])), len(lines))
    if key is not None:
        pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*[=.]")
        for n in range(start + 1, end):
            if pattern.match(lines[n]):
                return n + 1
    return start + 1


def _invalid(path: Path, message: str, *, line: int | None, key: str | None, model: str | None = None) -> Exception:
    where = f"{path}:{line}" if line is not None else str(path)
    details: dict[str, Any] = {"path": str(path), "line": line, "key": key}
    if model is not None:
        details["model"] = model
    return ModelsFileInvalid(f"{where}: {message}", details=details)


def read_models_file(raw: str) -> tuple[list[dict[str, Any]], ModelsFileRecord, Path]:
    """Return the file's checked tables, its record for the plan (path, sha256, size) and its directory."""
    import tomllib

    path = Path(raw).expanduser().absolute()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _invalid(path, f"cannot be read: {exc.strerror or exc}", line=None, key=None) from exc
    try:
        text = data.decode("utf-8")
        doc = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise _invalid(path, "is not UTF-8 text", line=None, key=None) from exc
    except tomllib.TOMLDecodeError as exc:
        found = DECODE_POSITION.search(str(exc))
        line = int(found.group(1)) if found else None
        raise _invalid(path, f"is not valid TOML: {exc}", line=line, key=None) from exc
    from pydantic import ValidationError

    try:
        checked = _entry_model().model_validate(doc)
    except ValidationError as exc:
        errors = exc.errors()
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])  # a stray key explains most
        loc = [str(part) for part in first["loc"]]
        index = int(loc[1]) if len(loc) > 1 and loc[0] == "model" and loc[1].isdigit() else None
        key = loc[2] if len(loc) > 2 else (loc[0] if index is None and loc else None)
        name = doc["model"][index].get("name") if index is not None else None
        where = f"[[model]] {index + 1}" if index is not None else "the file"
        message = "expected [[model]] tables" if loc == ["model"] else first["msg"]
        raise _invalid(
            path,
            f"{where}{f', key {key!r}' if key else ''}: {message}",
            line=key_line(text, index, key),
            key=key,
            model=name if isinstance(name, str) else None,
        ) from exc
    record: ModelsFileRecord = {
        "path": str(path),
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }
    tables = [entry.model_dump() for entry in checked.model]
    check_names(tables, path, text)
    return tables, record, path.parent


def check_names(tables: list[dict[str, Any]], path: Path, text: str) -> None:
    """Refuse names and aliases that collide: the same name twice, or an alias that reaches another model's name."""
    seen: dict[str, int] = {}
    for index, table in enumerate(tables):
        for name in (table["name"], *table["aliases"]):
            if name in seen and seen[name] != index:
                key = "name" if name == table["name"] else "aliases"
                why = f"'{name}' is also a name or alias of [[model]] {seen[name] + 1}"
                _conflict(path, text, index, key, name, why)
            seen.setdefault(name, index)
    for index, table in enumerate(tables):
        for pattern in table["aliases"]:
            for other, target in enumerate(tables):
                if other != index and fnmatch.fnmatchcase(target["name"], pattern):
                    _conflict(
                        path,
                        text,
                        index,
                        "aliases",
                        pattern,
                        f"the alias '{pattern}' of {table['name']} matches the name of [[model]] {other + 1} "
                        f"({target['name']})",
                    )


def _conflict(path: Path, text: str, index: int, key: str, name: str, why: str) -> None:
    line = key_line(text, index, key)
    raise ModelsNameConflict(
        f"{path}:{line}: {why}",
        details={"path": str(path), "line": line, "key": key, "name": name, "model_index": index},
    )


def _relative(value: str | None, base: Path) -> str | None:
    """Return a path of the file made absolute against the file's directory (a repo id is left alone)."""
    if value is None:
        return None
    expanded = Path(value).expanduser()
    return str(expanded if expanded.is_absolute() else base / expanded)


def _path_or_repo(value: str | None, base: Path) -> str | None:
    """Return a path made absolute against the file's directory where it exists there, else the repo id given."""
    beside = _relative(value, base)
    return beside if beside is not None and Path(beside).exists() else value


def model_specs(
    tables: list[dict[str, Any]], base: Path, *, jit: bool, verify_weights: bool, prompt_cache_disk_gb: float
) -> list[ModelSpec]:
    """Return the plan's model specs: the mode's policy defaults, overridden per model by the file."""
    import json

    specs = []
    for table in tables:
        keep = table["keep_loaded"]
        preload = table["preload"]
        specs.append(
            ModelSpec(
                path=_relative(table["path"], base),
                repo=table["repo"],
                training_receipt=_relative(table["training_receipt"], base),
                adapter_path=_relative(table["adapter_path"], base),
                runtime=table["runtime"],
                runtime_executable=table["runtime_executable"],
                served_model_name=table["name"],
                alias=tuple(table["aliases"]),
                thinking=table["thinking"],
                chat_template_args=None
                if table["chat_template_args"] is None
                else json.dumps(table["chat_template_args"], sort_keys=True),
                prompt_lookup=table["prompt_lookup"],
                m5_prefill=table["m5_prefill"],
                draft_model=_path_or_repo(table["draft_model"], base),
                num_draft_tokens=table["num_draft_tokens"],
                kv_bits=table["kv_bits"],
                kv_group_size=table["kv_group_size"],
                hosts=None if table["hosts"] is None else ",".join(table["hosts"]),
                hostfile=_relative(table["hostfile"], base),
                backend=table["backend"],
                pipeline=table["pipeline"],
                ring_port=table["ring_port"],
                max_tokens=table["max_tokens"],
                max_tokens_ceiling=table["max_tokens_ceiling"],
                idle_timeout=table["idle_timeout"] or 0,
                keep_loaded=(not jit) if keep is None else keep,
                preload=(not jit) if preload is None else preload,
                verify_weights=verify_weights,
                prompt_cache_disk_gb=prompt_cache_disk_gb,
            )
        )
    return specs


def eager_conflicts(tables: list[dict[str, Any]]) -> tuple[int, str] | None:
    """Return the first (model index, key) that asks an eager front to unload or defer a model, if any."""
    for index, table in enumerate(tables):
        if table["preload"] is False:
            return index, "preload"
        if table["keep_loaded"] is False:
            return index, "keep_loaded"
        if table["idle_timeout"]:
            return index, "idle_timeout"
    return None
