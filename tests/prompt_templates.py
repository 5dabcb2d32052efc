"""Chat templates the prompt-prefix tests render, and the check that a session's prompts only grow (no tests here).

ChatML (the tiny model's), a Qwen3-style thinking template, a Llama-3-style one, one that raises on a late system
message (as some Qwen templates do), one that leaves it out, one that insists on
alternating roles (as Gemma and Mistral templates do), the cut-down Harmony template and the VLM's ChatML.
"""

from __future__ import annotations

import functools
from typing import Any

from mlx_agent.runtime.serving.conversation import Conversations
from tests.e2e.harmony_support import HARMONY_TEMPLATE
from tests.fixtures.tiny_model import CHAT_TEMPLATE
from tests.fixtures.tiny_vlm import VLM_CHAT_TEMPLATE

# Qwen3-style: the system message first, a late one in place, tool results grouped into one user turn, earlier
# thinking stripped from assistant turns, and a generation prompt that opens the thinking.
QWEN3_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] in ('user', 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' %}{%- set content = message['content'] or '' %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>assistant\\n' + content }}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{{- '<tool_call>\\n' + ({'name': call['function']['name'], 'arguments': call['function']['arguments']} | tojson)"
    " + '\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
)

# Llama-3-style: the system message taken out first, every other message under its role's header.
LLAMA3_TEMPLATE = (
    "{{- '<|begin_of_text|>' }}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set system = '' %}{%- set rest = messages %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system + '<|eot_id|>' }}"
    "{%- for message in rest %}"
    "{%- if message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- for call in message['tool_calls'] %}"
    "{{- {'name': call['function']['name'], 'parameters': call['function']['arguments']} | tojson }}{%- endfor %}"
    "{{- '<|eot_id|>' }}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + ('ipython' if message['role'] == 'tool' else message['role'])"
    " + '<|end_header_id|>\\n\\n' + (message['content'] or '') + '<|eot_id|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

RAISING_TEMPLATE = (
    "{%- for message in messages %}{%- if message['role'] == 'system' and not loop.first %}"
    "{{- raise_exception('System message must be at the beginning.') }}{%- endif %}{%- endfor %}" + CHAT_TEMPLATE
)

DROPPING_TEMPLATE = (
    "{%- for message in messages %}{%- if message['role'] != 'system' or loop.first %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{{- message['content'] if message['content'] is string else '' }}{{- '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

ALTERNATING_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{%- set rest = messages[1:] %}{%- else %}{%- set rest = messages %}"
    "{%- endif %}"
    "{%- for message in rest %}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}{%- endfor %}" + CHAT_TEMPLATE
)

TEMPLATES = {
    "chatml": CHAT_TEMPLATE,
    "qwen3": QWEN3_TEMPLATE,
    "llama3": LLAMA3_TEMPLATE,
    "raising": RAISING_TEMPLATE,
    "dropping": DROPPING_TEMPLATE,
    "alternating": ALTERNATING_TEMPLATE,
    "harmony": HARMONY_TEMPLATE,
    "vlm": VLM_CHAT_TEMPLATE,
}


def renderer(template: str) -> Any:
    """Return a ``Render`` calling ``template`` as transformers' ``apply_chat_template`` does (its jinja setup)."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    compiled = _compile_jinja_template(template)

    def render(messages: list[dict[str, Any]], generation: bool) -> str:
        return str(compiled.render(messages=messages, add_generation_prompt=generation, tools=None))

    return render


RENDERS = {name: renderer(template) for name, template in TEMPLATES.items()}


@functools.cache
def conversations(name: str) -> Conversations:
    """Return the worker's adapter for the hand-written template ``name`` (its probes rendered without tools)."""
    render = RENDERS[name]
    return Conversations(lambda messages, _tools, generation: str(render(messages, generation)))


def rendered(name: str, messages: list[dict[str, Any]], generation: bool = False) -> str:
    """Render ``messages`` as the worker would: adapted for the template (system messages placed), then rendered."""
    return str(RENDERS[name](conversations(name).adapt(messages, None), generation))


def assert_grows(name: str, turns: list[list[dict[str, Any]]]) -> None:
    """Check every turn's prompt starts with the previous one's and shows each late system message once."""
    previous = ""
    for messages in turns:
        prompt = rendered(name, messages)
        assert prompt.startswith(previous), (name, previous, prompt)
        rendered(name, messages, generation=True)  # the request itself renders
        for message in messages[1:]:
            if message["role"] == "system":
                assert prompt.count(message["content"]) == 1, (name, message, prompt)
        previous = prompt
