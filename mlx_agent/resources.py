"""Where mlx-agent's data files are: ``recipes/`` and ``schemas/`` at the top of a checkout, or inside the wheel.

The wheel carries both folders inside the package (pyproject's hatch ``force-include``); a checkout, and an
editable install of it, keeps them beside the package. ``data_dir`` finds them either way.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def checkout_root() -> str | None:
    """Return the source tree this package runs from when it is not installed (a checkout), else None.

    A child this process starts with the same interpreter imports mlx_agent from there only if told so
    (``PYTHONPATH``): a checkout's launcher put it on this process's own path, not the child's.
    """
    import sysconfig

    root = str(PACKAGE_DIR.parent)
    installed = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    return None if root in installed else root


def data_dir(name: str) -> Path:
    """Return the directory of one data folder (``recipes`` or ``schemas``), installed or in a checkout."""
    inside = PACKAGE_DIR / name
    return inside if inside.is_dir() else PACKAGE_DIR.parent / name


def recipes_dir() -> Path:
    """Return the folder of runtime recipes."""
    return data_dir("recipes")


def schemas_dir() -> Path:
    """Return the folder of JSON Schemas."""
    return data_dir("schemas")
