"""Which models the running servers of this home serve, from their receipts (as ``serve status`` reads them).

Only the receipt and the process table are read (``process.classify``): no server is asked anything, so a
listing stays fast with many servers. A receipt that does not read, or whose process is not ours and running, is
left out.
"""

from __future__ import annotations

from pathlib import Path

from mlx_agent.errors import ReceiptError
from mlx_agent.supervise import process
from mlx_agent.supervise.receipts import has_front, is_unit, read_receipt, receipt_files

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.plan.catalog_records import Served


def served_models(directory: Path) -> dict[str, list[Served]]:
    """Return, by model path (resolved), the running servers of ``directory``'s receipts that serve it."""
    found: dict[str, list[Served]] = {}
    for path in receipt_files(directory):
        try:
            receipt = read_receipt(path)
        except ReceiptError:
            continue
        if is_unit(receipt) or not has_front(receipt) or process.classify(receipt) != "running":
            continue
        for model in receipt["models"]:
            where = model.get("model")
            if isinstance(where, str):
                entry: Served = {"port": int(receipt["port"]), "served_model_name": model.get("served_model_name")}
                found.setdefault(str(Path(where).resolve()), []).append(entry)
    return found
