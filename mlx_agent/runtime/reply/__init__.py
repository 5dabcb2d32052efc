"""Watching and shaping a reply as it is generated: structured output, limits, Harmony, tool calls."""
