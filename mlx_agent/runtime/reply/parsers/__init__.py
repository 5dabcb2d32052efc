"""Tool-call parsers for families mlx_lm 0.32 has none for, each a module shaped like ``mlx_lm.tool_parsers.*``.

A module here holds what mlx_lm's ``tokenizer_utils.load`` reads from a parser module: ``parse_tool_call(text,
tools)``, ``tool_call_start`` and ``tool_call_end``. ``family_parsers.install`` makes each importable under
``mlx_lm.tool_parsers.<name>``, so mlx_lm loads it as one of its own (``mlx_agent.tool_formats.OUR_RULES`` says
which template gets which).
"""


class NotACall(ValueError):
    """The text a call marker started is not a call at all: the formatter hands it back as content, unmarked.

    Only where the marker is ordinary text a model writes in an answer (Llama's ``{"name":``): a reply to a
    request without tools, or a JSON object that names no parameters.
    """
