"""The model SDK, once imported, is out of the cyclic collector's sight (issue 11, the pool
bound): a full collection walked its ~150,000 objects, holding the event loop 60-170 ms
in the middle of fifty subagents' calls."""

from __future__ import annotations

import gc

from amacs_server.inference import sdk


def test_the_sdk_import_freezes_what_it_made():
    sdk.anthropic.load()
    assert gc.get_freeze_count() > 50_000  # the SDK's modules, classes and functions among them
