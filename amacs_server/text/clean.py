"""Any text from outside is data: what cannot be stored or sent is replaced, visibly.

A lone surrogate (``\\ud800`` in the model's JSON, or in a streamed delta) cannot be
encoded as UTF-8: written to a file, a transcript or Emacs it raised in the middle of
a tick.  A NUL in an org file makes git treat the chat log as binary.  Both become
U+FFFD, the replacement character, so the person sees that something was there.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_OR_NUL = re.compile("[\ud800-\udfff\x00]")


def storable(text: str) -> str:
    """TEXT with lone surrogates replaced: it encodes as UTF-8."""
    return _SURROGATE.sub(REPLACEMENT, text) if _SURROGATE.search(text) else text


def printable(text: str) -> str:
    """TEXT with lone surrogates and NULs replaced: fit for org files, the shell and git."""
    return _SURROGATE_OR_NUL.sub(REPLACEMENT, text) if _SURROGATE_OR_NUL.search(text) else text
