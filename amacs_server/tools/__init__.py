"""The functions an agent calls from its evals, one module per family.

``agents`` (tasks, viewpoints, compulsions, talk and wait), ``memory`` (the
memory tools), ``work`` (threads and skills), ``mcp`` (an MCP server's tool,
``agent-tool``); ``kit`` is what they share (:class:`~.kit.ToolError`, refusals).
They sit above the agents and memory they act on; ``methods.py`` publishes them
to Emacs.
"""
