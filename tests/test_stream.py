"""Streaming the reply out of partial JSON (issue 6)."""

import json

from amacs_server.inference.stream import ReplyStreamer

FULL = json.dumps({"eval": None, "reply": "Hello, \"world\" \\ ünï 🤔\nline two", "mood": "ok",
                   "confidence": 0.5, "monologue": "m"}, ensure_ascii=False)


def shown_prefixes(text, step):
    streamer, out = ReplyStreamer(), []
    for i in range(0, len(text), step):
        gained = streamer.feed(text[i:i + step])
        if gained:
            out.append(gained)
    return streamer, out


def test_any_chunking_yields_exactly_the_reply_and_no_json():
    reply = json.loads(FULL)["reply"]
    for step in (1, 2, 3, 7, 50, len(FULL)):
        streamer, parts = shown_prefixes(FULL, step)
        assert "".join(parts) == reply, step
        for part in parts:
            assert '"' not in part.replace('"world"', "") or '"world"' in reply  # only the reply's own quotes
            assert "{" not in part and "mood" not in part


def test_fenced_json_and_prose_before_it_stream_too():
    streamer, parts = shown_prefixes("Sure!\n```json\n" + FULL + "\n```", 5)
    assert "".join(parts) == json.loads(FULL)["reply"]


def test_no_reply_key_or_not_json_shows_nothing():
    assert shown_prefixes('{"mood": "ok", "eval": "(+ 1 2)", "reply": null}', 3)[1] == []
    assert shown_prefixes("I am not JSON at all", 3)[1] == []


def test_the_reply_is_complete_once_its_string_closed_at_any_chunking():
    """The shell is sent what waits of the reply once nothing more of it can come: the streamer says
    when, at the chunk that closes the reply's string (not at the JSON's end, not before)."""
    reply = json.loads(FULL)["reply"]
    closed = FULL.index(json.dumps(reply, ensure_ascii=False)) + len(json.dumps(reply, ensure_ascii=False))
    for step in (1, 2, 3, 7, 50, len(FULL)):
        streamer = ReplyStreamer()
        for i in range(0, len(FULL), step):
            streamer.feed(FULL[i:i + step])
            assert streamer.complete == (i + step >= closed), (step, i)
        assert streamer.shown == reply
        streamer.reset()
        assert (streamer.raw, streamer.shown, streamer.complete) == ("", "", False)


def test_the_agent_is_told_once_when_the_reply_is_complete():
    """A chunk that only closes the reply's string still yields a Streamed step (with no text), once."""
    from amacs_server.inference.model_call import Streamed, gained

    streamer = ReplyStreamer()
    told = [gained(streamer, chunk) for chunk in ('{"reply": "Hel', 'lo', '", "mo', 'od": "ok"', ', "confidence": 1}')]
    assert told == [Streamed("Hel"), Streamed("lo"), Streamed("", last=True), None, None]
