"""How the server entry reports a refusal to the supervisor: one ``mlx-agent-error {json}`` line, then exit.

Kept free of imports beyond the standard library's json and sys, because the supervisor imports the prefix
on every ``serve status``.
"""

from __future__ import annotations

import json
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

ERROR_PREFIX = "mlx-agent-error "
EXIT_REFUSED = 3


def refuse(code: str, message: str, details: dict[str, object]) -> NoReturn:
    """Print the refusal line (its code is an mlx-agent error code) and exit without serving."""
    print(ERROR_PREFIX + json.dumps({"code": code, "message": message, "details": details}), file=sys.stderr,
          flush=True)
    sys.exit(EXIT_REFUSED)
