"""Agent config edits, planned: which files a wiring touches, what each would become, and the plan's hash.

Pure: files are read and hashed, never written (``supervise/wiring.py`` writes). An edit is a list of leaf
keys (a path of names from the document's root) and the value each gets; everything else in the file is
kept. TOML goes through tomlkit, which keeps comments, order and formatting. JSON has no such library in the
standard one, so a JSON file is re-serialised with its own indentation and key order: only whitespace inside
its arrays and its escaped characters can change, and the plan says so (``normalised``) when they would.

A config file is read only up to ``MAX_CONFIG_BYTES`` and parsed only to ``MAX_DEPTH`` levels: an agent's
settings are kilobytes a few levels deep, and a file past either bound (a 200 MB or a 100,000-deep one) is
refused at once as ``agent_config_unparsable`` saying which bound, before it is hashed, diffed or re-serialised.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_agent.errors.commands import AgentConfigUnparsable, ConfigSymlinkEscapes, UnknownAgent, WireScopeUnsupported
from mlx_agent.plan.agent_settings import AGENTS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from mlx_agent.plan.agent_settings import ServedFacts

SCOPES = ("user", "project")
WIRED_FORMAT = "1.0"
Key = tuple[str, ...]
Edit = tuple[Key, Any]  # a leaf key and the value it gets
MAX_CONFIG_BYTES = 4 * 1024 * 1024  # the largest config file wire, unwire and wire status read
MAX_DEPTH = 64  # the deepest nesting of objects and arrays they parse (re-serialising recurses per level)


@dataclass(frozen=True)
class ConfigFile:
    """One agent config file: where it is, its syntax, and the directory no symlink of it may leave."""

    path: Path
    kind: str  # "json" | "toml"
    root: Path


def config_files(agent: str, scope: str, env: Mapping[str, str], cwd: Path, default: bool = False) -> list[ConfigFile]:
    """Return the files wiring ``agent`` at ``scope`` edits.

    Codex gets two unless ``default``: its provider goes in ``config.toml`` and the profile that selects it
    in ``mlx-agent.config.toml`` (Codex 0.171 layers ``--profile NAME`` from ``NAME.config.toml``; its
    ``[profiles.*]`` tables are legacy there); with ``default`` the top-level keys of ``config.toml`` select it.
    """
    if agent not in AGENTS:
        raise UnknownAgent(f"unknown agent {agent!r}", details={"agent": agent, "agents": list(AGENTS)})
    home = Path(env.get("HOME") or Path.home()).absolute()
    if agent == "claude":
        base = home if scope == "user" else cwd.absolute()
        return [ConfigFile(base / ".claude" / "settings.json", "json", base / ".claude")]
    if agent == "codex":
        if scope != "user":
            raise WireScopeUnsupported(
                "Codex reads its providers and profiles from CODEX_HOME only; there is no project scope to wire",
                details={"agent": agent, "scope": scope},
            )
        codex_home = Path(env["CODEX_HOME"]).absolute() if env.get("CODEX_HOME") else home / ".codex"
        from mlx_agent.plan.agent_settings import CODEX_PROFILE

        main = ConfigFile(codex_home / "config.toml", "toml", codex_home)
        if default:
            return [main]
        return [main, ConfigFile(codex_home / f"{CODEX_PROFILE}.config.toml", "toml", codex_home)]
    if scope == "project":
        return [ConfigFile(cwd.absolute() / "opencode.json", "json", cwd.absolute())]
    xdg = Path(env["XDG_CONFIG_HOME"]).absolute() if env.get("XDG_CONFIG_HOME") else home / ".config"
    return [ConfigFile(xdg / "opencode" / "opencode.json", "json", xdg / "opencode")]


def record_stem(agent: str, scope: str, files: Sequence[ConfigFile]) -> str:
    """Return the wired record's name for this agent, scope and main file: one wiring of a file at a time."""
    digest = hashlib.sha256(str(files[0].path).encode()).hexdigest()[:12]
    return f"{agent}-{scope}-{digest}"


def write_target(cf: ConfigFile) -> Path:
    """Return the file a write replaces: ``cf.path`` or, if it is a link, its target inside the config directory."""
    if not os.path.islink(cf.path):
        return cf.path
    target = cf.path.resolve()
    root = cf.root.resolve()
    if not target.is_relative_to(root):
        raise ConfigSymlinkEscapes(
            f"{cf.path} is a symbolic link to {target}, outside {cf.root}; mlx-agent edits no file through it",
            details={"path": str(cf.path), "target": str(target), "root": str(cf.root)},
        )
    return target


def read_current(cf: ConfigFile) -> bytes | None:
    """Return the file's bytes (None when it does not exist), refusing a link out of its directory."""
    target = write_target(cf)
    if not target.exists():
        return None
    if not target.is_file():
        raise AgentConfigUnparsable(f"{cf.path} is not a regular file", details={"path": str(cf.path)})
    with open(target, "rb") as fh:
        data = fh.read(MAX_CONFIG_BYTES + 1)  # never more: a file that grows while read is refused the same way
    if len(data) > MAX_CONFIG_BYTES:
        size = max(len(data), os.stat(target).st_size)
        why = f"the file is {size} bytes, over the {MAX_CONFIG_BYTES} bytes mlx-agent reads of an agent config"
        raise AgentConfigUnparsable(
            f"{cf.path}: {why}; nothing was written",
            details={"path": str(cf.path), "line": None, "error": why, "size": size, "limit_bytes": MAX_CONFIG_BYTES},
        )
    return data


def sha256_bytes(data: bytes | None) -> str | None:
    """Return the sha256 hex of ``data``, or None for a file that does not exist."""
    return None if data is None else hashlib.sha256(data).hexdigest()


def _unparsable(cf: ConfigFile, why: str, line: int | None) -> AgentConfigUnparsable:
    where = f"{cf.path}:{line}" if line is not None else str(cf.path)
    return AgentConfigUnparsable(
        f"{where}: {why}; nothing was written", details={"path": str(cf.path), "line": line, "error": why}
    )


def _indent(text: str) -> str | int:
    """Return the indentation a JSON file uses (its first indented line's), 2 when it has none."""
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            lead = line[: len(line) - len(stripped)]
            return "\t" if lead.startswith("\t") else len(lead)
    return 2


class JsonDoc:
    """A JSON config held as Python objects, written back with its own indentation and key order."""

    def __init__(self, cf: ConfigFile, data: bytes | None) -> None:
        text = "" if data is None else data.decode("utf-8")
        self.indent = _indent(text)
        self.newline = text.endswith("\n") or not text.strip()
        if not text.strip():
            self.root: dict[str, Any] = {}
            return
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _unparsable(cf, exc.msg, exc.lineno) from None
        if not isinstance(parsed, dict):
            raise _unparsable(cf, "the document is not a JSON object", 1)
        self.root = parsed

    def dumps(self) -> str:
        """Return the document as text, the way this file writes it."""
        return json.dumps(self.root, indent=self.indent, ensure_ascii=False) + ("\n" if self.newline else "")


class TomlDoc:
    """A TOML config held by tomlkit, which writes back everything it did not change as it was."""

    def __init__(self, cf: ConfigFile, data: bytes | None) -> None:
        import tomlkit
        from tomlkit.exceptions import ParseError

        self.text = "" if data is None else data.decode("utf-8")
        self.spaced: set[Key] = set()  # tables added to a table the user had
        try:
            self.root: Any = tomlkit.parse(self.text)
        except ParseError as exc:
            raise _unparsable(cf, str(exc).split(" at line ")[0], exc.line) from None

    def dumps(self) -> str:
        """Return the document as text."""
        import tomlkit

        for key in self.spaced:
            # A table added among existing ones (``[model_providers.x]`` after the user's providers) ends with
            # a blank line, as the table it was put after did; at the end of the file that blank line goes.
            node = self.root
            for name in key:
                node = node[name]
            node.add(tomlkit.nl())
        self.spaced.clear()
        text = tomlkit.dumps(self.root)
        return text[:-1] if text.endswith("\n\n") and not self.text.endswith("\n\n") else text


def depth(value: object) -> int:
    """Return how deeply objects and arrays nest in ``value`` (a scalar is 0), without recursing."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, Mapping):
            children: Iterable[object] = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level + 1)
        if deepest > MAX_DEPTH:
            break  # deep enough to refuse: the rest need not be walked
        stack.extend((child, level + 1) for child in children)
    return deepest


def load(cf: ConfigFile, data: bytes | None) -> JsonDoc | TomlDoc:
    """Parse a config file's bytes by its kind; refuse one that does not parse (naming its line) or nests too deep."""
    too_deep = f"objects and arrays nest deeper than the {MAX_DEPTH} levels mlx-agent reads of an agent config"
    try:
        doc = JsonDoc(cf, data) if cf.kind == "json" else TomlDoc(cf, data)
    except UnicodeDecodeError as exc:
        raise _unparsable(cf, f"not UTF-8 text ({exc.reason})", None) from None
    except RecursionError:  # the parsers recurse once per level: far deeper than MAX_DEPTH
        raise _unparsable(cf, too_deep, None) from None
    if depth(doc.root) > MAX_DEPTH:
        raise _unparsable(cf, too_deep, None)
    return doc


def _plain(value: Any) -> Any:
    """Return a value as plain Python (tomlkit items unwrapped) for comparing and recording."""
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value


def _new_table(doc: JsonDoc | TomlDoc, depth: int) -> Any:
    if isinstance(doc, JsonDoc):
        return {}
    import tomlkit

    # A table that only holds tables (``model_providers``) gets no header line of its own.
    return tomlkit.table(is_super_table=depth == 0)


def _parent(doc: JsonDoc | TomlDoc, key: Key, created: list[Key] | None) -> Any:
    """Return the table holding ``key``'s leaf, making missing tables when ``created`` collects them."""
    node = doc.root
    for depth, name in enumerate(key[:-1]):
        if name not in node:
            if created is None:
                return None
            node[name] = _new_table(doc, depth)
            created.append(key[: depth + 1])
        node = node[name]
        if not hasattr(node, "keys"):
            return None
    return node


def apply_edits(doc: JsonDoc | TomlDoc, edits: Sequence[Edit]) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """Set each edit's key in ``doc``; return the keys set (each with what it held before) and tables made."""
    keys: list[dict[str, Any]] = []
    created: list[Key] = []
    for key, value in edits:
        parent = _parent(doc, key, created)
        if parent is None:
            raise ValueError(f"{'.'.join(key)}: a parent of this key is not a table")
        before = {"present": key[-1] in parent, "value": _plain(parent[key[-1]]) if key[-1] in parent else None}
        parent[key[-1]] = value
        if isinstance(doc, TomlDoc) and len(key) > 1 and key[:-1] in created[-1:] and key[:-2] not in created:
            doc.spaced.add(key[:-1])
        keys.append({"key": list(key), "value": value, "before": before})
    return keys, [list(k) for k in created]


def remove_edits(
    doc: JsonDoc | TomlDoc, keys: Sequence[Mapping[str, Any]], created: Sequence[Sequence[str]]
) -> dict[str, list[list[str]]]:
    """Undo a wiring's keys in a file edited since; return the keys ``restored`` and ``kept``.

    A key still holding the wired value gets its old value back (or goes), a key the user changed is left;
    tables the wiring made go when nothing is left in them.
    """
    restored: list[list[str]] = []
    kept: list[list[str]] = []
    for entry in keys:
        key = tuple(entry["key"])
        parent = _parent(doc, key, None)
        if parent is None or key[-1] not in parent or _plain(parent[key[-1]]) != entry["value"]:
            kept.append(list(key))
            continue
        if entry["before"]["present"]:
            parent[key[-1]] = entry["before"]["value"]
        else:
            del parent[key[-1]]
        restored.append(list(key))
    for table in sorted((tuple(t) for t in created), key=len, reverse=True):
        parent = _parent(doc, table, None)
        if (
            parent is not None
            and table[-1] in parent
            and hasattr(parent[table[-1]], "keys")
            and not len(parent[table[-1]])
        ):
            del parent[table[-1]]
    return {"restored": restored, "kept": kept}


def drift(doc: JsonDoc | TomlDoc, keys: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return each wired key whose value is no longer the one written (``changed``) or is gone (``removed``)."""
    drifted: list[dict[str, Any]] = []
    for entry in keys:
        key = tuple(entry["key"])
        parent = _parent(doc, key, None)
        if parent is None or key[-1] not in parent:
            drifted.append({"key": list(key), "state": "removed", "wired": entry["value"]})
        elif (now := _plain(parent[key[-1]])) != entry["value"]:
            drifted.append({"key": list(key), "state": "changed", "wired": entry["value"], "now": now})
    return drifted


def normalised(cf: ConfigFile, data: bytes | None) -> bool:
    """Say whether re-serialising the file, unchanged, would already change bytes (JSON whitespace, escapes)."""
    if data is None:
        return False
    return load(cf, data).dumps().encode("utf-8") != data


def unified_diff(path: Path, old: bytes | None, new: bytes | None) -> str:
    """Return the unified diff from ``old`` to ``new`` (None: the file is absent)."""
    before = [] if old is None else old.decode("utf-8").splitlines(keepends=True)
    after = [] if new is None else new.decode("utf-8").splitlines(keepends=True)
    lines = difflib.unified_diff(
        before,
        after,
        fromfile="/dev/null" if old is None else str(path),
        tofile="/dev/null" if new is None else str(path),
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def file_edit(cf: ConfigFile, edits: Sequence[Edit]) -> tuple[dict[str, Any], bytes]:
    """Plan one file's edit: its record for the plan (hashes, diff, keys) and the bytes it would hold."""
    current = read_current(cf)
    doc = load(cf, current)
    try:
        keys, created = apply_edits(doc, edits)
    except ValueError as exc:  # "env": "..." where a table must be: the file is not what the agent reads either
        raise _unparsable(cf, str(exc), None) from None
    new = doc.dumps().encode("utf-8")
    target = write_target(cf)
    entry = {
        "path": str(cf.path),
        "target": str(target),
        "mode": target.stat().st_mode & 0o7777 if current is not None else None,
        "kind": cf.kind,
        "root": str(cf.root),
        "exists": current is not None,
        "sha256_before": sha256_bytes(current),
        "sha256_after": sha256_bytes(new),
        "normalised": cf.kind == "json" and normalised(cf, current),
        "keys": keys,
        "created": created,
        "diff": unified_diff(cf.path, current, new),
    }
    return entry, new


def wire_plan(
    agent: str,
    scope: str,
    server: Mapping[str, Any],
    edits: Sequence[tuple[ConfigFile, Sequence[Edit]]],
    wired: Path,
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Plan a wiring: each file's edit and backup, and the record naming the server; return it and the new bytes.

    ``server`` names the endpoint (``port``, ``base_url``, ``runtime``, ``model``, ``served``, ``identity``).
    The plan has no time or random value, so the same files and server give the same ``preview_hash``.
    """
    stem = record_stem(agent, scope, [cf for cf, _ in edits])
    files: list[dict[str, Any]] = []
    new_bytes: dict[str, bytes] = {}
    for index, (cf, file_edits) in enumerate(edits):
        entry, new = file_edit(cf, file_edits)
        entry["backup"] = str(wired / "originals" / f"{stem}.{index}.orig") if entry["exists"] else None
        files.append(entry)
        new_bytes[entry["path"]] = new
    plan = {
        "format_version": WIRED_FORMAT,
        "operation": "wire",
        "agent": agent,
        "scope": scope,
        "record": str(wired / f"{stem}.json"),
        "server": dict(server),
        "files": files,
    }
    return plan, new_bytes


def unwire_file(entry: Mapping[str, Any], original: bytes | None) -> tuple[dict[str, Any], bytes | None]:
    """Plan how one wired file is undone; return its plan entry and the bytes it gets (None: the file goes).

    Unchanged since the wire (its sha256 is the one written): the original bytes come back, or the file goes if
    the wire made it. Edited since: only the wired keys still holding the wired values are undone.
    """
    cf = ConfigFile(Path(entry["path"]), entry["kind"], Path(entry["root"]))
    current = read_current(cf)
    out: dict[str, Any] = {"path": entry["path"], "sha256_current": sha256_bytes(current), "restored": [], "kept": []}
    if current is None:
        out.update(action="absent", sha256_new=None, diff="")
        return out, None
    new: bytes | None
    if sha256_bytes(current) == entry["sha256_after"]:
        new = original
        out["action"] = "restore" if original is not None else "delete"
        out["restored"] = [k["key"] for k in entry["keys"]]
    else:
        doc = load(cf, current)
        out.update(remove_edits(doc, entry["keys"], entry["created"]))
        new = doc.dumps().encode("utf-8")
        out["action"] = "remove_keys"
    out.update(sha256_new=sha256_bytes(new), diff=unified_diff(cf.path, current, new))
    return out, new


def file_drift(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Return whether a wired file still holds what was written: ``unchanged``, ``edited`` (with drift) or gone."""
    cf = ConfigFile(Path(entry["path"]), entry["kind"], Path(entry["root"]))
    try:
        current = read_current(cf)
    except (AgentConfigUnparsable, ConfigSymlinkEscapes) as exc:
        return {"path": entry["path"], "state": "unreadable", "error": exc.code, "drift": []}
    digest = sha256_bytes(current)
    if current is None:
        return {"path": entry["path"], "state": "missing", "sha256": None, "drift": []}
    if digest == entry["sha256_after"]:
        return {"path": entry["path"], "state": "unchanged", "sha256": digest, "drift": []}
    try:
        drifted = drift(load(cf, current), entry["keys"])
    except AgentConfigUnparsable as exc:
        return {"path": entry["path"], "state": "unreadable", "error": exc.code, "sha256": digest, "drift": []}
    return {"path": entry["path"], "state": "edited", "sha256": digest, "drift": drifted}


def _leaves(prefix: Key, value: Mapping[str, Any]) -> list[Edit]:
    """Return a nested table as one edit per leaf key, so undoing leaves the user's own keys beside them."""
    out: list[Edit] = []
    for name, inner in value.items():
        out.extend(_leaves((*prefix, name), inner) if isinstance(inner, dict) else [((*prefix, name), inner)])
    return out


def agent_edits(
    agent: str, files: Sequence[ConfigFile], facts: ServedFacts, model: str | None, default: bool
) -> tuple[list[tuple[ConfigFile, list[Edit]]], list[str]]:
    """Return the edits of each file that point ``agent`` at the server (agent_settings' table), and warnings.

    Claude Code: its settings' ``env`` block takes ``claude_env``, except that a server's key is read from its
    key file by ``apiKeyHelper`` rather than written. Codex: the provider table (a keyed server's key read from
    its key file by the provider's ``auth`` command), and the selecting keys in the profile file (or at the top,
    ``default``). opencode: the ``provider`` entry (and ``model``, ``default``).
    """
    from mlx_agent.plan import agent_settings as settings

    warnings = settings.agent_notes(agent)
    if agent == "claude":
        env = settings.claude_env(facts, model)
        edits: list[Edit] = []
        if facts.api_key is not None and facts.key_file is not None:
            import shlex

            del env[settings.CLAUDE_TOKEN]  # the helper's output is sent as the token; the file holds no key
            edits.append((("apiKeyHelper",), settings.KEY_COMMAND + shlex.quote(facts.key_file)))
        edits += [(("env", name), value) for name, value in env.items()]
        return [(files[0], edits)], warnings
    if agent == "codex":
        provider = settings.codex_provider(facts, model)
        tables = {"model_providers": provider.pop("model_providers")}
        if settings.codex_env(facts):  # only for facts without a key file: `served_facts` always has one
            warnings.append(
                f"Codex reads the server's key from ${settings.KEY_VAR} (its provider's env_key): set it "
                "where Codex runs (`mlx-agent wire env --agent codex` prints it); the key is in no file"
            )
        if default:
            return [(files[0], _leaves((), {**provider, **tables}))], warnings
        return [(files[0], _leaves((), tables)), (files[1], _leaves((), provider))], warnings
    entry = settings.opencode_provider(facts, model)
    edits = [(("provider", name), value) for name, value in entry.items()]
    if default:
        edits.append((("model",), settings.opencode_model(facts, model)))
    return [(files[0], edits)], warnings
