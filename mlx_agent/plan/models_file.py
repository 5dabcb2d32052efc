"""A models file (``serve start --models FILE``): one ``[[model]]`` TOML table per model of a fleet.

A table's keys are ``plan.requests.ModelRequest``'s options, named as their fields (``served_model_name``, ``alias``,
one of ``path``, ``repo`` or ``training_receipt``, ``runtime``, ``max_tokens``, ``kv_bits``, ``hosts``, ...), and
its policy (``idle_timeout``, ``keep_loaded``, ``preload``); ``name`` and ``aliases`` are still read as the
older spellings of ``served_model_name`` and ``alias``. The validator is built from those options, so a table
takes exactly what the command line takes, with the same bounds, choices and defaults (pydantic, unknown keys
refused); a refusal names the line and key. Relative paths are read from the file's directory. Names and
aliases must not collide: a request's ``model`` must reach one model, whatever the order. The plan binds the
file's bytes (``models_file``) and every model's identity as a single-model plan does.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mlx_agent.errors.commands import ModelsFileInvalid, ModelsNameConflict
from mlx_agent.plan.requests import ModelRequest

if TYPE_CHECKING:
    from mlx_agent.plan.options import Opt
    from mlx_agent.records.plan import ModelsFileRecord

DECODE_POSITION = re.compile(r"at line (\d+), column (\d+)")
NAME, ALIAS = "served_model_name", "alias"


def table_options() -> tuple[Opt, ...]:
    """Return the options a ``[[model]]`` table may set: every per-model one but those given once for all."""
    return tuple(opt for opt in ModelRequest.OPTIONS if opt.scope != "cli")


def _field(opt: Opt) -> tuple[Any, Any]:
    """Return the pydantic type and default of a table key, from its option's kind, bounds and choices."""
    from pydantic import Field

    kind: Any
    if opt.choices is not None:
        kind = Literal[opt.choices]
    elif opt.values is not None:
        kind = Literal[opt.values]
    elif opt.kind == "int":
        kind = Annotated[int, Field(ge=opt.minimum, le=opt.maximum)]
    elif opt.kind == "float":
        low, high = opt.minimum, opt.maximum
        kind = Annotated[
            float,
            Field(gt=low if opt.min_open else None, ge=None if opt.min_open else low, le=high, allow_inf_nan=False),
        ]
    elif opt.kind == "flag":
        kind = bool
    elif opt.kind in ("multi", "list"):
        kind = list[Annotated[str, Field(min_length=1)]]
    elif opt.kind == "json":
        kind = dict[str, Any]
    else:
        kind = Annotated[str, Field(min_length=1)]
    if opt.file_required:
        return kind, ...
    if opt.default is None:
        return kind | None, None
    return kind, list(opt.default) if isinstance(opt.default, tuple) else opt.default


@functools.cache
def _document_model() -> Any:
    """Return the declaration of the file, built from the options (pydantic is imported only when one is read)."""
    from pydantic import ConfigDict, Field, create_model

    strict = ConfigDict(extra="forbid", strict=True)
    fields: dict[str, Any] = {opt.dest: _field(opt) for opt in table_options()}
    entry = create_model("ModelEntry", __config__=strict, **fields)
    annotated: Any = Annotated  # subscripted with a class built just now: a value here, not a type to check
    document: dict[str, Any] = {"model": (annotated[list.__class_getitem__(entry), Field(min_length=1)], ...)}
    return create_model("ModelsDocument", __config__=strict, **document)


def _spelled(doc: Any) -> dict[tuple[int, str], str]:
    """Rename the older keys of each table to the options' names in place; return {(index, new): old}."""
    renamed: dict[tuple[int, str], str] = {}
    tables = doc.get("model") if isinstance(doc, dict) else None
    if not isinstance(tables, list):
        return renamed
    for index, table in enumerate(tables):
        if not isinstance(table, dict):
            continue
        for opt in table_options():
            for old in opt.synonyms:
                if old in table and opt.dest not in table:
                    table[opt.dest] = table.pop(old)
                    renamed[(index, opt.dest)] = old
    return renamed


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


class ModelsFile:
    """A read and checked models file: its tables (keys as the options' names), its text and plan record."""

    __slots__ = ("base", "path", "record", "renamed", "tables", "text")

    def __init__(
        self, path: Path, data: bytes, tables: list[dict[str, Any]], renamed: dict[tuple[int, str], str]
    ) -> None:
        self.path = path
        self.base = path.parent
        self.text = data.decode("utf-8")
        self.tables = tables
        self.renamed = renamed
        self.record: ModelsFileRecord = {
            "path": str(path),
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
        }

    def line(self, index: int, key: str) -> int | None:
        """Return the line of a table's key, as the file spells it."""
        return key_line(self.text, index, self.spelled(index, key))

    def spelled(self, index: int, key: str) -> str:
        """Return the key as the ``index``-th table spells it (an older synonym, or the option's name)."""
        return self.renamed.get((index, key), key)


def read_models_file(raw: str) -> ModelsFile:
    """Return the checked file: every table's keys valid and its names and aliases apart."""
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

    renamed = _spelled(doc)
    try:
        checked = _document_model().model_validate(doc)
    except ValidationError as exc:
        errors = exc.errors()
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])  # a stray key explains most
        loc = [str(part) for part in first["loc"]]
        index = int(loc[1]) if len(loc) > 1 and loc[0] == "model" and loc[1].isdigit() else None
        key = loc[2] if len(loc) > 2 else (loc[0] if index is None and loc else None)
        if index is not None and key is not None:
            key = renamed.get((index, key), key)
        name = doc["model"][index].get(NAME) if index is not None else None
        where = f"[[model]] {index + 1}" if index is not None else "the file"
        message = "expected [[model]] tables" if loc == ["model"] else first["msg"]
        raise _invalid(
            path,
            f"{where}{f', key {key!r}' if key else ''}: {message}",
            line=key_line(text, index, key),
            key=key,
            model=name if isinstance(name, str) else None,
        ) from exc
    models = ModelsFile(path, data, [entry.model_dump() for entry in checked.model], renamed)
    check_names(models)
    return models


def check_names(models: ModelsFile) -> None:
    """Refuse names and aliases that collide: the same name twice, or an alias that reaches another model's name."""
    tables = models.tables
    seen: dict[str, int] = {}
    for index, table in enumerate(tables):
        for name in (table[NAME], *table[ALIAS]):
            if name in seen and seen[name] != index:
                key = NAME if name == table[NAME] else ALIAS
                why = f"'{name}' is also a name or alias of [[model]] {seen[name] + 1}"
                _conflict(models, index, key, name, why)
            seen.setdefault(name, index)
    for index, table in enumerate(tables):
        for pattern in table[ALIAS]:
            for other, target in enumerate(tables):
                if other != index and fnmatch.fnmatchcase(target[NAME], pattern):
                    _conflict(
                        models,
                        index,
                        ALIAS,
                        pattern,
                        f"the alias '{pattern}' of {table[NAME]} matches the name of [[model]] {other + 1} "
                        f"({target[NAME]})",
                    )


def _conflict(models: ModelsFile, index: int, key: str, name: str, why: str) -> None:
    line = models.line(index, key)
    raise ModelsNameConflict(
        f"{models.path}:{line}: {why}",
        details={
            "path": str(models.path),
            "line": line,
            "key": models.spelled(index, key),
            "name": name,
            "model_index": index,
        },
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


def _value(opt: Opt, value: Any, base: Path) -> Any:
    """Return a table's value as the command line gives it: paths read from the file's directory, JSON as text."""
    import json

    if opt.file_path == "path":
        return _relative(value, base)
    if opt.file_path == "path_or_repo":
        return _path_or_repo(value, base)
    if opt.kind == "json" and value is not None:
        return json.dumps(value, sort_keys=True)
    return value


def model_requests(models: ModelsFile, given: dict[str, Any]) -> list[ModelRequest]:
    """Return each table's model record; ``given`` holds the options the command line gives every model."""
    return [
        ModelRequest(**{opt.dest: _value(opt, table[opt.dest], models.base) for opt in table_options()}, **given)
        for table in models.tables
    ]


def eager_conflict(models: ModelsFile) -> None:
    """Refuse a table that asks an eager front to unload or defer its model."""
    for index, table in enumerate(models.tables):
        for key, asks in (
            ("preload", table["preload"] is False),
            ("keep_loaded", table["keep_loaded"] is False),
            ("idle_timeout", bool(table["idle_timeout"])),
        ):
            if asks:
                line = models.line(index, key)
                raise ModelsFileInvalid(
                    f"{models.path}:{line}: [[model]] {index + 1} ({table[NAME]}) sets {key!r}, which asks for "
                    "loading on request or unloading: add --jit (an eager front loads every model and keeps it)",
                    details={"path": str(models.path), "line": line, "key": key, "model": table[NAME]},
                )


def older_spellings(raw: str) -> list[str]:
    """Return a warning per key a models file spells the older way (``name``, ``aliases``): still read."""
    models = read_models_file(raw)
    return [
        f"{models.path}:{models.line(index, new)}: '{old}' is the older spelling of '{new}'; "
        f"it is still read, but rename it to match the --{new.replace('_', '-')} flag"
        for (index, new), old in sorted(models.renamed.items())
    ]
