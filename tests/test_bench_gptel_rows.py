"""bench_gptel's "whole reply at once -> last word visible" rows count each kind from the write of
the text delta that holds the last text it shows: AMACS's last word comes two deltas before the
end of the fake's 100-chunk reply, gptel's ("null}") in the last one."""

from __future__ import annotations

import json
import urllib.request

import tests.fake_anthropic as fa
from bench.bench_gptel import SHOWN_END, phase_rows
from bench.bench_transport import LAST_WORD, REPLY_TEXT, TimedFake, written_at


def test_the_fake_notes_each_text_deltas_write_and_the_reference_is_the_delta_with_the_last_word() -> None:
    fake = TimedFake().start()
    try:
        fake.respond_with(lambda _body: fa.Reply(REPLY_TEXT, chunks=100))
        body = json.dumps({"model": "claude-fake", "max_tokens": 10, "stream": True,
                           "messages": [{"role": "user", "content": "go"}]}).encode()
        request = urllib.request.Request(f"{fake.url}/v1/messages", body, {
            "content-type": "application/json", "x-api-key": "sk-test", "anthropic-version": "2023-06-01"})
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
    finally:
        fake.stop()
    (timing,) = fake.timings
    chunks = timing["chunks"]
    assert len(chunks) == 100 and chunks[-1][1] == len(REPLY_TEXT)
    holding = next(i for i, (_at, sent) in enumerate(chunks) if sent >= SHOWN_END["amacs"])
    assert holding == 97 and REPLY_TEXT[:chunks[holding - 1][1]].count(LAST_WORD) == 0
    assert written_at(timing, SHOWN_END["amacs"]) == chunks[97][0]
    assert written_at(timing, SHOWN_END["gptel"]) == chunks[99][0] == timing["last"]


def test_each_kind_counts_from_its_own_last_words_delta() -> None:
    # The fake was descheduled 5 ms between AMACS's last word (delta 98 of 100) and the last delta.
    chunks = [[100.0 + i * 0.0001, round(len(REPLY_TEXT) * (i + 1) / 100)] for i in range(100)]
    chunks[98][0] = chunks[99][0] = chunks[97][0] + 0.005
    timing = {"start": 99.9, "first": chunks[0][0], "last": chunks[99][0], "end": chunks[99][0] + 0.001,
              "chunks": chunks}
    shown = chunks[97][0] + 0.002  # 2 ms after its delta was written: 3 ms before the last delta
    record = {"t0": 99.8, "first": chunks[0][0] + 0.001, "reply": shown + 0.05, "done": shown + 0.06, "last": shown}
    amacs = phase_rows([record], [timing], SHOWN_END["amacs"])["last_byte_to_last_word_visible"]
    assert round(amacs[0], 3) == 2.0  # not -3.0, as from the last delta
    gptel = phase_rows([dict(record, last=None, reply=chunks[99][0] + 0.004)], [timing],
                       SHOWN_END["gptel"])["last_byte_to_last_word_visible"]
    assert round(gptel[0], 3) == 4.0
