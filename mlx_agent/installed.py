"""What is installed in an environment, read from its files without importing (or running) any of it.

Versions come from ``*.dist-info`` directory names, and the model types a runtime supports from its
``models/`` package and its ``MODEL_REMAPPING`` literal (read with ``ast``): importing mlx_lm or
``importlib.metadata`` would cost seconds or tens of milliseconds on every preview.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import sys
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.media_kinds import MediaSupport


def _normalise(dist: str) -> str:
    return re.sub(r"[-_.]+", "_", dist).lower()


def own_site_paths() -> list[str]:
    """Return this interpreter's package directories, in import order."""
    return [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]


def env_site_paths(interpreter: Path) -> list[str]:
    """Return the package directories of the environment an interpreter belongs to (venv or prefix).

    The symlink chain is followed one link at a time: a venv's ``bin/python`` links to the base
    interpreter, and it is the first environment along the chain that has packages which counts.
    """
    current = interpreter
    for _ in range(16):
        found = sorted(glob.glob(str(current.parent.parent / "lib" / "python3*" / "site-packages")))
        if found or not current.is_symlink():
            return found
        current = current.parent / os.readlink(current)
    return []


def dist_version(dist: str, paths: list[str]) -> str | None:
    """Return the installed version of a distribution found in ``paths``, or None."""
    wanted = _normalise(dist)
    for entry in paths:
        for info in glob.glob(os.path.join(glob.escape(entry), "*.dist-info")):
            name, _, version = os.path.basename(info)[: -len(".dist-info")].partition("-")
            if _normalise(name) == wanted:
                return version
    return None


def package_dir(package: str, paths: list[str] | None) -> Path | None:
    """Return the directory of an importable package, in this environment (None) or in ``paths``."""
    if paths is None:
        spec = importlib.util.find_spec(package)
        locations = list(spec.submodule_search_locations or []) if spec else []
        return Path(locations[0]) if locations else None
    for entry in paths:
        candidate = Path(entry) / package
        if (candidate / "__init__.py").is_file():
            return candidate
    return None


def _literal_dict(source: str, name: str) -> dict[str, str]:
    """Return the dict literal assigned to ``name`` at module level, parsing only that statement.

    Parsing the whole module (mlx_lm's utils.py) would cost most of a preview's time.
    """
    import ast

    match = re.search(rf"^{re.escape(name)}\s*(?::[^=\n]*)?=\s*{{", source, re.MULTILINE)
    if match is None:
        return {}
    start = match.end() - 1
    # The statement ends at the first line that makes the text from the brace a complete expression.
    for end in (m.end() for m in re.finditer(r"^}", source[start:], re.MULTILINE)):
        try:
            value = ast.literal_eval(source[start : start + end])
        except (SyntaxError, ValueError):
            continue
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
    return {}


def model_support(package: str, paths: list[str] | None) -> tuple[set[str], dict[str, str]] | None:
    """Return the model types a runtime package ships modules for and its remapping, or None if absent."""
    root = package_dir(package, paths)
    if root is None:
        return None
    models = root / "models"
    types = {p.stem for p in models.glob("*.py") if not p.stem.startswith("_")}
    types |= {p.name for p in models.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    utils = root / "utils.py"
    remapping = _literal_dict(utils.read_text(encoding="utf-8"), "MODEL_REMAPPING") if utils.is_file() else {}
    return types, remapping


def embedding_support(paths: list[str] | None) -> set[str] | None:
    """Return the model types mlx_vlm's embedding loader can load (its remapping applied), or None if absent.

    A type is one the loader maps onto a module under ``mlx_vlm/models`` whose code returns mlx_vlm's
    ``EmbeddingOutput`` (an embedding model, not a chat model of the same family); nothing is imported.
    """
    root = package_dir("mlx_vlm", paths)
    if root is None:
        return None
    loader = root / "embedding_loader.py"
    remapping = (
        _literal_dict(loader.read_text(encoding="utf-8"), "EMBEDDING_MODEL_REMAPPING") if loader.is_file() else {}
    )
    models = root / "models"
    embedders = {
        (p.parent.name if p.parent != models else p.stem)
        for p in [*models.glob("*.py"), *models.glob("*/*.py")]
        if p.stem != "pooling" and "EmbeddingOutput" in p.read_text(encoding="utf-8", errors="replace")
    }
    return {t for t, module in remapping.items() if module in embedders} | embedders


IMAGE_MARKER = re.compile(r"^\s*is_image_generation_model\b[^=\n]*=\s*True\b", re.MULTILINE)


def _audio_models(root: Path, category: str) -> tuple[frozenset[str], dict[str, str]]:
    """Return mlx-audio's model modules of a category (``tts``, ``stt``) and that category's remapping."""
    models = root / category / "models"
    types = frozenset(p.name for p in models.glob("*") if p.is_dir() and (p / "__init__.py").is_file())
    utils = root / category / "utils.py"
    remapping = _literal_dict(utils.read_text(encoding="utf-8"), "MODEL_REMAPPING") if utils.is_file() else {}
    return types, remapping


def media_support(paths: list[str] | None) -> MediaSupport | None:
    """Return what the installed mlx-audio (through mlx-vlm) speaks and transcribes and mlx-vlm draws, or None.

    None where mlx-vlm or mlx-audio is absent. An image family is a module under ``mlx_vlm/models`` whose model
    class (in its ``model.py``) sets ``is_image_generation_model = True``; nothing is imported.
    """
    from mlx_agent.media_kinds import MediaSupport

    vlm, audio = package_dir("mlx_vlm", paths), package_dir("mlx_audio", paths)
    if vlm is None or audio is None:
        return None
    speech, speech_remapping = _audio_models(audio, "tts")
    heard, heard_remapping = _audio_models(audio, "stt")
    image = frozenset(
        p.parent.name
        for p in (vlm / "models").glob("*/model.py")  # where every pipeline class sets it
        if IMAGE_MARKER.search(p.read_text(encoding="utf-8", errors="replace"))
    )
    return MediaSupport(speech, speech_remapping, heard, heard_remapping, image)


def own_requirement(dist: str, paths: list[str]) -> str | None:
    """Return mlx-agent's own requirement on ``dist`` (name and range, as its METADATA has it), or None.

    The range is the one pyproject.toml declares (for mlx-vlm, the ``vlm`` extra's), so a remediation names the
    tested versions without a second copy of them.
    """
    wanted = _normalise(dist)
    for entry in paths:
        for info in glob.glob(os.path.join(glob.escape(entry), "mlx_agent-*.dist-info")):
            try:
                text = Path(info, "METADATA").read_text(encoding="utf-8")
            except OSError:
                continue
            for line in text.splitlines():
                if not line.startswith("Requires-Dist:"):
                    continue
                requirement = line.partition(":")[2].partition(";")[0].strip()
                name = re.match(r"[A-Za-z0-9._-]+", requirement)
                if name and _normalise(name.group(0)) == wanted:
                    return requirement
    return None


def _uv_tool_command(prefix: Path, requirement: str) -> str | None:
    """Return the ``uv tool install`` that redoes a uv tool environment's install with ``requirement`` added.

    It is rebuilt from the tool's ``uv-receipt.toml``, so the package source and every ``--with`` are kept; None
    where the receipt holds a source this does not spell (a git or editable requirement).
    """
    import shlex
    import tomllib

    try:
        tool = tomllib.loads((prefix / "uv-receipt.toml").read_text(encoding="utf-8"))["tool"]
    except (OSError, ValueError, KeyError):
        return None
    words = ["uv", "tool", "install"]
    for index, item in enumerate(tool.get("requirements", [])):
        if not isinstance(item, dict) or set(item) - {"name", "extras", "specifier", "path", "url"}:
            return None
        extras = f"[{','.join(item['extras'])}]" if item.get("extras") else ""
        source = item.get("url") or (Path(item["path"]).as_uri() if item.get("path") else None)
        if source is None:
            spec = f"{item.get('name', '')}{extras}{item.get('specifier', '')}"
        else:  # a wheel or URL keeps its extras only in the PEP 508 spelling
            spec = f"{item.get('name', '')}{extras} @ {source}" if extras else item.get("path") or source
        words += [spec] if index == 0 else ["--with", spec]
    if len(words) == 3:
        return None
    if isinstance(tool.get("python"), str):
        words += ["--python", tool["python"]]
    return shlex.join([*words, "--with", requirement])


def install_command(requirement: str, prefix: Path, interpreter: Path) -> str:
    """Return the shell command that installs ``requirement`` into the environment at ``prefix``, as it was made.

    A pipx venv gets ``pipx inject``, a uv tool environment ``uv tool install`` with its receipt's requirements
    plus this one, a venv uv made ``uv pip install --python``, and anything else pip through its interpreter.
    """
    import shlex

    if (prefix / "pipx_metadata.json").is_file():
        return shlex.join(["pipx", "inject", prefix.name, requirement])
    if (prefix / "uv-receipt.toml").is_file():
        command = _uv_tool_command(prefix, requirement)
        if command is not None:
            return command
    try:
        made_by_uv = re.search(r"^uv\s*=", (prefix / "pyvenv.cfg").read_text(encoding="utf-8"), re.MULTILINE)
    except OSError:
        made_by_uv = None
    if made_by_uv:
        return shlex.join(["uv", "pip", "install", "--python", str(interpreter), requirement])
    return shlex.join([str(interpreter), "-m", "pip", "install", requirement])
