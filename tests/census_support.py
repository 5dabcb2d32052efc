"""scripts/census_tests.py as a module, for its tests (scripts/ is no package)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def census_module() -> Any:
    """Import scripts/census_tests.py (its dataclasses look their module up by name, so it is registered first)."""
    spec = importlib.util.spec_from_file_location("census_tests", REPO_ROOT / "scripts" / "census_tests.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
