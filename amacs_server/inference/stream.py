"""Stream the ``reply`` out of a JSON response while it is still arriving.

The model answers with one JSON object; only its ``reply`` string is for the
person.  Each delta, the text so far is parsed with jiter's partial mode
(which the anthropic SDK already depends on) and whatever the reply gained is
passed on: no JSON punctuation ever reaches the shell.
"""

from __future__ import annotations

import jiter


class ReplyStreamer:
    """Feed it the raw text as it comes; it returns what the reply gained each time."""

    def __init__(self) -> None:
        self.raw = ""
        self.shown = ""
        self.complete = False  # the reply's string has closed: nothing more of it will come

    def reset(self) -> None:
        """Start again (the call is retried): nothing shown, nothing complete."""
        self.raw = self.shown = ""
        self.complete = False

    def feed(self, delta: str) -> str:
        """Add DELTA; return the new part of the reply (often empty)."""
        self.raw += delta
        start = self.raw.find("{")
        if start == -1:
            return ""
        try:
            data = jiter.from_json(self.raw[start:].encode(), partial_mode="trailing-strings")
        except ValueError:
            return ""  # not JSON (yet, or at all): show nothing
        reply = data.get("reply") if isinstance(data, dict) else None
        if isinstance(reply, str) and not self.complete:
            # Parsed again without the unfinished strings: the reply is there once its string closed.
            whole = jiter.from_json(self.raw[start:].encode(), partial_mode="on")
            self.complete = isinstance(whole, dict) and whole.get("reply") == reply
        if not isinstance(reply, str) or not reply.startswith(self.shown) or len(reply) == len(self.shown):
            return ""
        gained = reply[len(self.shown):]
        self.shown = reply
        return gained
