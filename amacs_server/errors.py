"""The project's expected failures share one base, :class:`AmacsError`.

An ``AmacsError`` is a failure the code foresees (a refused request, a bound
reached, a file that cannot be written, a model that cannot be called): its
message is written for the person or the agent, and a call from Emacs that
raises one answers with that message alone.  Any other exception is a bug: the
transport logs it with its traceback to ``logs/server.log`` and answers with a
one-line "internal error" (see :func:`amacs_server.transport.server.remote_method`).

Subclasses keep the builtin base their callers catch them by (``ValueError``,
``RuntimeError``, ``OSError``), so ``class AgentError(AmacsError, ValueError)``.
"""

from __future__ import annotations


class AmacsError(Exception):
    """An expected failure; its message says what is wrong (and what to do) in one line."""


class Refused(AmacsError, ValueError):
    """A call from Emacs refused: its arguments are wrong, or the state does not allow it now."""


class Stopping(AmacsError, RuntimeError):
    """The server is stopping: its loop is closed and takes no more work."""
