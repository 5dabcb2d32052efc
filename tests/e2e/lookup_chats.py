"""Prompt lookup's test chats (code to edit, plain chats) and the line the server logs of each request's lookup."""

from __future__ import annotations

import re

CODE = (
    'def load_config(path: Path) -> dict[str, object]:\n    with open(path, "r", encoding="utf-8") as f:\n'
    "        return json.load(f)\n\nclass Stack:\n    def __init__(self) -> None:\n"
    "        self.items: list[int] = []\n\n    def push(self, item: int) -> None:\n"
    "        self.items.append(item)\n"
)

CHATS = {
    "code_edit": [{"role": "user", "content": f"Rename Stack to Pile in this code:\n{CODE}"}],
    "code_edit_system": [
        {"role": "system", "content": "You edit code."},
        {"role": "user", "content": f"Add type hints:\n{CODE}\nReturn the whole file."},
    ],
    "chat": [{"role": "user", "content": "Could you explain why the sky looks blue during the day?"}],
    "chat_short": [{"role": "user", "content": "Hello! How are you today?"}],
}

LOOKUP_LINE = re.compile(
    r"(chatcmpl-\S+|cmpl-\S+) prompt lookup: (\d+) tokens in (\d+) forward passes, "
    r"(\d+) of (\d+) drafted tokens accepted"
)
