"""``mlx-agent pull``'s effects: ask the Hub, keep the preview, and at confirm fetch exactly the reviewed files.

The confirm rebuilds the plan (asking the Hub again what the revision names), so a revision that moved since
the review is refused ``preview_stale`` before a byte is fetched. Files land in the Hugging Face cache the way
huggingface_hub lays it out (``blobs/<id>``, ``snapshots/<commit>/<name>`` linking to it, ``refs/<revision>``
naming the commit), the ref last, once every file is there and checked: ``serve start --repo`` (which reads
``refs/main``) never sees a half-fetched snapshot as the model. A receipt in ``receipts/pull/`` records it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mlx_agent.errors import PreviewStale
from mlx_agent.errors.commands import DownloadInterrupted, LockTimeout
from mlx_agent.plan import pull as planning
from mlx_agent.supervise import hub

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from mlx_agent.plan.pull_records import PullDisk, PullFile, PullPlan, PullPreview, PullProgress, PullResult

LOCK_WAIT_S = 2.0
METADATA_MAX_BYTES = 16 * 1024 * 1024  # a config or weight index larger than this is not a model's: not fetched
STEP_BYTES = 8 * 1024 * 1024  # a progress line at least every this many bytes of a file, and at each file's end


def build(repo: str, revision: str, allow_code: bool = False) -> PullPlan:
    """Return the plan of pulling ``repo`` at what ``revision`` names on the Hub now (without its hash)."""
    from mlx_agent.plan.source import hf_hub_cache

    planning.check_request(repo, revision)
    commit, files = hub.listing(repo, revision)
    return planning.pull_plan(repo, revision, commit, hub.endpoint(), hf_hub_cache(), files, allow_code)


def _disk(plan: PullPlan) -> PullDisk:
    from mlx_agent.disk import disk_space

    return planning.disk_record(plan, disk_space(plan["cache_dir"]))


def preview(repo: str, revision: str, allow_code: bool = False) -> PullPreview:
    """Return the hashed plan with the disk and what the model would be here; keep it for a stale confirm."""
    from mlx_agent.canonical import with_hash
    from mlx_agent.files import private_dir
    from mlx_agent.home import previews_dir
    from mlx_agent.load_memory import available_memory
    from mlx_agent.plan.catalog import Runtimes
    from mlx_agent.supervise.previews import save_preview

    plan = with_hash(build(repo, revision, allow_code))
    with tempfile.TemporaryDirectory(prefix="mlx-agent-pull-") as meta:
        for record in plan["files"]:
            if record["name"] in planning.METADATA and record["size"] <= METADATA_MAX_BYTES:
                url = hub.file_url(repo, plan["commit"], record["name"])
                hub.download(url, Path(meta) / record["name"], record, lambda _n: None)
        servable = planning.servable(plan, Path(meta), Runtimes(), available_memory())
    save_preview(private_dir(previews_dir()), plan)
    return {"plan": plan, "disk": _disk(plan), "servable": servable, "requires_confirmation": True}


def _reviewed(repo: str, revision: str, allow_code: bool, preview_hash: str | None) -> PullPlan:
    """Rebuild the plan and return it if it is the reviewed one; a moved revision says so first."""
    from mlx_agent.supervise.previews import reviewed_plan

    try:
        return reviewed_plan(lambda: build(repo, revision, allow_code), preview_hash)
    except PreviewStale as exc:
        moved = [c for c in exc.details.get("changes") or [] if c["field"] == "commit"]
        if moved:
            exc.message = (
                f"{repo}@{revision} moved from {moved[0]['old']} to {moved[0]['new']} since the preview; "
                "nothing was fetched"
            )
            exc.args = (exc.message,)
        raise


def _link(snapshot: Path, name: str, blob: Path) -> None:
    """Point ``snapshots/<commit>/<name>`` at its blob with a relative link, as huggingface_hub does."""
    link = snapshot / name
    link.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(blob, link.parent)
    if link.is_symlink() and os.readlink(link) == target:
        return
    temp = link.with_name(f".{link.name}.mlx-agent-link")
    temp.unlink(missing_ok=True)
    os.symlink(target, temp)
    os.replace(temp, link)


def _write_ref(plan: PullPlan) -> str | None:
    """Name the commit in ``refs/<revision>`` (not for a revision that is itself the commit); return the ref."""
    from mlx_agent.files import replace_atomically

    if plan["revision"] == plan["commit"]:
        return None
    ref = Path(plan["snapshot"]).parent.parent / "refs" / plan["revision"]
    ref.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(ref, plan["commit"].encode(), 0o644)
    return str(ref)


class Progress:
    """Counts the bytes of a fetch and reports a ``PullProgress`` line at each step of a file and at its end."""

    def __init__(self, fetch_bytes: int, report: Callable[[PullProgress], None]) -> None:
        self.fetch_bytes = fetch_bytes
        self.done = 0
        self.report = report

    def file(self, record: PullFile) -> Callable[[int], None]:
        """Return the byte counter of one file's transfer."""
        state = {"held": 0, "reported": -1}

        def on_bytes(count: int) -> None:
            state["held"] += count
            self.done += count
            if state["held"] - state["reported"] >= STEP_BYTES or state["held"] >= record["size"]:
                state["reported"] = state["held"]
                self.report(
                    {
                        "event": "progress",
                        "file": record["name"],
                        "file_done_bytes": state["held"],
                        "file_bytes": record["size"],
                        "done_bytes": self.done,
                        "fetch_bytes": self.fetch_bytes,
                    }
                )

        return on_bytes


def fetch(plan: PullPlan, report: Callable[[PullProgress], None]) -> tuple[list[str], list[str], int]:
    """Fetch each file of ``plan`` not in the cache yet, check it, and link the snapshot; return what it did."""
    blobs = planning.blobs_dir(plan)
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot = Path(plan["snapshot"])
    held = set(planning.present(plan))
    missing = [f for f in plan["files"] if f["name"] not in held]
    progress = Progress(sum(f["size"] for f in missing), report)
    for record in missing:
        url = hub.file_url(plan["repo"], plan["commit"], record["name"])
        partial = blobs / f"{record['blob']}.incomplete"
        try:
            hub.download(url, partial, record, progress.file(record))
        except KeyboardInterrupt:  # Ctrl-C or SIGINT: said as an error (an agent gets its envelope), kept to resume
            kept = partial.stat().st_size if partial.is_file() else 0
            raise DownloadInterrupted(
                f"interrupted while fetching {record['name']}", details={"file": record["name"], "bytes_kept": kept}
            ) from None
        hub.place(partial, blobs / record["blob"])
    for record in plan["files"]:
        _link(snapshot, record["name"], blobs / record["blob"])
    return [f["name"] for f in missing], sorted(held), progress.done


def confirm(
    repo: str,
    revision: str,
    allow_code: bool,
    preview_hash: str | None,
    receipts_dir: str | None,
    report: Callable[[PullProgress], None],
) -> PullResult:
    """Fetch the reviewed plan under the repo's pull lock, write the ref and the receipt, and say what was done."""
    from mlx_agent.files import utc_now, write_json_atomic
    from mlx_agent.home import receipts_dir as kind_dir
    from mlx_agent.supervise.locks import file_lock

    directory = kind_dir("pull", receipts_dir)
    stem = repo.replace("/", "--")
    busy = LockTimeout(f"another pull of {repo} is running", details={"repo": repo})
    busy.remediation = "Another mlx-agent pull of this repo is running; retry when it has finished."
    with file_lock(directory / f"{stem}.lock", timeout=LOCK_WAIT_S, busy=busy):
        plan = _reviewed(repo, revision, allow_code, preview_hash)
        planning.check_disk(_disk(plan))
        fetched, reused, fetched_bytes = fetch(plan, report)
        ref = _write_ref(plan)
        receipt_path = directory / f"{stem}.json"
        write_json_atomic(
            receipt_path,
            {"format_version": plan["format_version"], "plan": plan, "ref": ref, "fetched": fetched, "at": utc_now()},
        )
    return {
        "repo": repo,
        "commit": plan["commit"],
        "snapshot": plan["snapshot"],
        "ref": ref,
        "fetched": fetched,
        "reused": reused,
        "fetched_bytes": fetched_bytes,
        "receipt_path": str(receipt_path),
        "requires_confirmation": False,
    }
