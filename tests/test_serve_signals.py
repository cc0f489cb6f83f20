"""The server's stop on SIGTERM/SIGHUP: its handler writes nothing, what it caught is logged after."""

from __future__ import annotations

import logging
import signal

import pytest

from amacs_server.serve import _SignalStop


def test_the_signal_handler_writes_nothing_and_what_it_caught_is_logged_after(caplog):
    """Was: the handler logged "stopping on signal SIGTERM" while the server was inside a write
    to the same stderr; Python raised "reentrant call" instead of the stop, and a fork whose
    launcher was killed never stopped."""
    signals = _SignalStop()
    try:
        with caplog.at_level(logging.INFO):
            with pytest.raises(KeyboardInterrupt):
                signals._on_signal(signal.SIGTERM, None)
            signals._on_signal(signal.SIGHUP, None)  # during the clean-up: only noted
            assert caplog.records == []
            signals.log_caught()
            assert [r.getMessage() for r in caplog.records] == [
                "stopping on signal SIGTERM", "signal SIGHUP while stopping: the clean-up goes on"]
            signals.log_caught()
            assert len(caplog.records) == 2
    finally:
        signals.restore()
