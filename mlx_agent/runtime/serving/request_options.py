"""A request body, checked and prepared before mlx_lm reads it, and the options only the wrapper reads.

Pure: no mlx, no sockets. ``prepare_body`` answers a bad field with an ``HttpError`` (400, or 404 for an
unknown model), adapts the conversation to what the served template accepts (``conversation``: the leading
system messages fold into one, later ones stay at their place, ids, alternation and parallel calls written as
the template takes them), carries a top-level
``reasoning_effort`` into ``chat_template_kwargs``, and takes ``add_generation_prompt`` and
``continue_final_message`` out of ``chat_template_kwargs`` (mlx_lm passes ``add_generation_prompt=True``
itself, so either key there used to fail the request).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mlx_agent.api_errors import Code
from mlx_agent.bodies import ChatBody, CompletionBody, check
from mlx_agent.errors import BodyInvalid
from mlx_agent.runtime.reply.structured import format_is_enforced, grammar_for
from mlx_agent.runtime.serving.conversation import Conversations, unadapted
from mlx_agent.runtime.serving.errors_http import bad_request, model_not_found
from mlx_agent.runtime.serving.limits import Limits, limits_from_body

TOOL_CHOICES = ("none", "auto", "required")


@dataclass(frozen=True)
class RequestOptions:
    """What the wrapper does for one request beyond mlx_lm."""

    limits: Limits = field(default_factory=Limits)
    grammar: str | None = None  # llguidance grammar of an enforced response_format
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    one_tool_call: bool = False  # parallel_tool_calls: false: the reply carries at most its first call

    @property
    def custom_template_call(self) -> bool:
        """Whether the chat template is called differently from mlx_lm's own call."""
        return self.continue_final_message or not self.add_generation_prompt


@dataclass(frozen=True)
class Served:
    """What this server serves: the names a request may use for its model."""

    model_names: frozenset[str]
    limit_defaults: Limits
    conversations: Conversations | None = None  # the served template's adapter (None: no chat template)


def prepare_body(body: Mapping[str, Any], served: Served, *, chat: bool) -> tuple[dict[str, Any], RequestOptions]:
    """Check ``body`` and return the body mlx_lm should see, with this request's options."""
    try:
        check(ChatBody if chat else CompletionBody, dict(body))  # types and bounds: the endpoint's declaration
    except BodyInvalid as error:
        raise bad_request(error.message, param=error.param, code=error.code) from None
    body = dict(body)
    model = body.get("model") or "default_model"
    if model not in served.model_names:
        raise model_not_found(model)
    for name in ("adapters", "draft_model"):
        if body.get(name) not in (None, "default_model"):
            raise bad_request(
                f"{name} is fixed when the server starts; this server cannot switch it per request.",
                param=name,
                code=Code.UNSUPPORTED_PARAMETER,
            )
    if chat:
        # adapted for the tools the template will see (none when tool_choice is "none")
        sent_tools = None if body.get("tool_choice") == "none" else body.get("tools")
        conversations, messages = served.conversations, _messages(body)
        body["messages"] = conversations.adapt(messages, sent_tools) if conversations else unadapted(messages)
    kwargs = dict(body.get("chat_template_kwargs") or {})
    add_generation_prompt = _flag(kwargs.pop("add_generation_prompt", None), "add_generation_prompt")
    continue_final = _flag(kwargs.pop("continue_final_message", None), "continue_final_message") or False
    if add_generation_prompt is None:
        add_generation_prompt = not continue_final
    if continue_final:
        if add_generation_prompt:
            raise bad_request(
                "continue_final_message and add_generation_prompt cannot both be true.", param="chat_template_kwargs"
            )
        if not chat or body["messages"][-1].get("role") != "assistant":
            raise bad_request("continue_final_message needs an assistant message last.", param="chat_template_kwargs")
    effort = body.get("reasoning_effort")
    if effort is not None:
        if not isinstance(effort, str) or not effort:
            raise bad_request(
                "reasoning_effort must be a string such as 'low', 'medium' or 'high'.", param="reasoning_effort"
            )
        kwargs.setdefault("reasoning_effort", effort)  # an explicit template kwarg wins
    body["chat_template_kwargs"] = kwargs or None

    tool_choice = body.get("tool_choice")
    if isinstance(tool_choice, str) and tool_choice not in TOOL_CHOICES:
        raise bad_request("tool_choice must be 'none', 'auto', 'required' or an object.", param="tool_choice")
    tools = body.get("tools")
    if tool_choice == "required" or isinstance(tool_choice, Mapping):
        # Forcing a call needs the model's own call syntax as a grammar; the runtime cannot, and ignoring it
        # would hand the client text where it relies on a call.
        raise bad_request(
            "tool_choice 'required' or a named tool forces a tool call, which the local runtime cannot "
            "enforce; use 'auto' or 'none'.",
            param="tool_choice",
            code=Code.UNSUPPORTED_TOOL_CHOICE,
        )
    parallel = body.pop("parallel_tool_calls", None)
    if parallel is not None and not isinstance(parallel, bool):
        raise bad_request("parallel_tool_calls must be true or false.", param="parallel_tool_calls")
    if tool_choice == "none" and tools:
        body.pop("tools")  # the model does not see tools it may not call, so it cannot call one
        tools = None
    grammar = grammar_for(body.get("response_format"))
    if grammar is not None and not format_is_enforced(tools, tool_choice):
        grammar = None  # a tool call is not JSON; the caller rules one out with tool_choice "none"
    options = RequestOptions(
        limits=limits_from_body(body, served.limit_defaults),
        grammar=grammar,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final,
        one_tool_call=parallel is False,
    )
    return body, options


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = body["messages"]
    for index, message in enumerate(messages):
        if not isinstance(message.get("role"), str):
            raise bad_request(f"messages[{index}] must have a string role.", param=f"messages.{index}.role")
    return [dict(m) for m in messages]


def _flag(value: object, name: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise bad_request(f"chat_template_kwargs.{name} must be true or false.", param="chat_template_kwargs")
