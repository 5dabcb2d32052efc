"""Claude Code's auto-mode ``safeguards`` field: refused at once, saying why (docs/decisions.md, "Auto mode").

In auto mode Claude Code (2.1.332, its bundle read) sends the beta ``dangerous-tool-use-2026-09-03`` and
``safeguards: [{"type": "dangerous_tool_use", "classifier_context": {rules, git_state, refused_calls, ...}}]``,
asking the API to judge each ``tool_use`` of the reply with Anthropic's classifier and to answer the verdicts
in the stream's ``message_delta`` (``safeguard_results``: ``evaluated`` ``flagged`` / ``not_flagged`` per
tool use id). No such classifier runs here, and a served model judging its own calls would be a verdict
Claude Code trusts as that check without being it, so the field is refused before any prompt reaches a
worker. Claude Code reads a 400 whose message starts ``safeguards:`` as this refusal, sends the request
again without the field and the beta, and keeps both off for the session; what it does then in auto mode is
what ``agent_settings.CLAUDE_AUTO_MODE_NOTE`` tells the user. The beta header alone asks for nothing and is
accepted, like every ``anthropic-beta``.
"""

from __future__ import annotations

from mlx_agent.api_errors import Code
from mlx_agent.gateway.anthropic.bodies import PromptBody
from mlx_agent.gateway.door.http_errors import refused

PARAM = "safeguards"
# Starts "safeguards:", the wording Claude Code matches (with param and code) to stop sending the field.
MESSAGE = (
    "safeguards: the dangerous_tool_use check is Anthropic's server-side classifier, which a local model "
    "server does not have, so no tool call is judged here; send the request without the field"
)


def refuse_safeguards(body: PromptBody) -> None:
    """Refuse a request that asks for the server-side check of its tool calls (``unsupported_parameter``)."""
    if body.safeguards is not None:
        raise refused(Code.UNSUPPORTED_PARAMETER, MESSAGE, param=PARAM)
