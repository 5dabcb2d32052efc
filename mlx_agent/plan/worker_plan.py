"""The wrapped worker's contract, filled from one model's plan: the one writer of every ``WorkerContract`` field.

``worker_contract`` names each field (the record has no defaults, so a field without a writer here fails every
plan); ``build_model_plan`` puts it in the worker's argv as one argument, which the plan's hash covers.
The front's body cap and read deadlines come from the plan's ``front`` record, so the front and its workers
read requests under the same values. The reply limits are per-model options (``--reasoning-budget``,
``--hedge-limit``, ``--repeat-limit``, ``--limit-answers``) for a runtime whose recipe has ``reply_limits``.
"""

from __future__ import annotations

from mlx_agent.errors.commands import UnsupportedRuntime
from mlx_agent.wire import HEDGE_LIMIT, REASONING_BUDGET, REPEAT_LIMIT
from mlx_agent.worker_contract import FileCheck, WorkerContract

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.plan.requests import ModelRequest
    from mlx_agent.records.plan import (
        ChatTemplateRecord,
        FrontRecord,
        PromptCacheRecord,
        Recipe,
        ReplyLimitsRecord,
        RuntimeRecord,
    )
    from mlx_agent.worker_contract import ModelCheck


def reply_limits_plan(spec: ModelRequest, recipe: Recipe, runtime: RuntimeRecord) -> ReplyLimitsRecord | None:
    """Return the model's reply limits (the defaults where none is given), or None where its worker applies none.

    A limit given for a runtime that does not apply it is refused: ignoring it would serve replies it would cut.
    """
    given = {
        "--reasoning-budget": spec.reasoning_budget is not None,
        "--hedge-limit": spec.hedge_limit is not None,
        "--repeat-limit": spec.repeat_limit is not None,
        "--limit-answers": spec.limit_answers,
    }
    asked = [flag for flag, value in given.items() if value]
    if not recipe["capabilities"].get("reply_limits") or runtime["launcher"] != "wrapped":
        if asked:
            raise UnsupportedRuntime(
                f"{' and '.join(asked)}: only mlx-agent's own entry of a runtime that applies reply limits (mlx_lm) "
                f"cuts replies; runtime {recipe['name']} ({runtime['launcher']}) does not",
                details={"runtime": recipe["name"], "launcher": runtime["launcher"], "options": asked},
            )
        return None

    def chosen(value: int | None, default: int) -> int:
        return default if value is None else value

    return {
        "reasoning_budget": chosen(spec.reasoning_budget, REASONING_BUDGET),
        "hedge_limit": chosen(spec.hedge_limit, HEDGE_LIMIT),
        "repeat_limit": chosen(spec.repeat_limit, REPEAT_LIMIT),
        "limit_answers": spec.limit_answers,
    }


def bound_template(template: ChatTemplateRecord | None) -> FileCheck | None:
    """Return the contract's check of a ``--chat-template`` file (None for the checkpoint's own template)."""
    if template is None or template["source"] != "file":
        return None
    return FileCheck(template["path"], template.get("sha256", ""), template.get("size", 0))


def worker_contract(
    *,
    front: FrontRecord,
    file_checks: tuple[FileCheck, ...],
    chat_template: FileCheck | None,
    model_checks: tuple[ModelCheck, ...],
    tool_parser: str | None,
    accel: tuple[bool, bool, dict[str, str | None], dict[str, str | None]],
    context_window: int | None,
    prompt_cache: PromptCacheRecord | None,
    reply_limits: ReplyLimitsRecord | None,
) -> WorkerContract:
    """Return the contract of one model's wrapped worker, every field from the plan (module docstring)."""
    prompt_lookup, m5_prefill, versions, sources = accel
    limits = reply_limits or {
        "reasoning_budget": REASONING_BUDGET,
        "hedge_limit": HEDGE_LIMIT,
        "repeat_limit": REPEAT_LIMIT,
        "limit_answers": False,
    }  # a worker that applies none is given the defaults it would not read
    return WorkerContract(
        file_checks=file_checks,
        chat_template=chat_template,
        model_checks=model_checks,
        tool_parser=tool_parser,
        prompt_lookup=prompt_lookup,
        m5_prefill=m5_prefill,
        versions=versions,
        sources=sources,
        context_window=context_window,
        prompt_cache_disk_gb=0.0 if prompt_cache is None else float(prompt_cache["disk_gb"]),
        max_body_bytes=front["max_body_bytes"],
        header_timeout=front["header_timeout"],
        body_timeout=front["body_timeout"],
        reasoning_budget=limits["reasoning_budget"],
        hedge_limit=limits["hedge_limit"],
        repeat_limit=limits["repeat_limit"],
        limit_answers=limits["limit_answers"],
    )
