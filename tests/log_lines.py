"""ComfyUI's console lines as tests read them: since 0.33 each line starts with a coloured level tag
(`\\x1b[1m\\x1b[33m[WARNING]\\x1b[0m ...`, app/logger.py's ColoredFormatter) and some whole lines are
coloured; patterns over the log match the text without the colour codes."""

from __future__ import annotations

import re

ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def strip_colours(text: str) -> str:
    return ANSI_COLOUR.sub("", text)
