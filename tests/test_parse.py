"""Response parsing (RFC v4 §2.3-2.4, EPIC-002 IMP-017)."""

import json

import pytest

from amacs_server.inference.parse import ResponseFormatError, fallback_response, parse_response

VALID = {"eval": "(+ 2 2)", "reply": "hi", "mood": "🤔", "confidence": 0.85, "monologue": "one line"}


def test_plain_json():
    r = parse_response(json.dumps(VALID))
    assert (r.eval, r.reply, r.mood, r.confidence, r.monologue) == ("(+ 2 2)", "hi", "🤔", 0.85, "one line")


def test_fenced_json_with_prose_around():
    r = parse_response("Here you go:\n```json\n" + json.dumps(VALID) + "\n```\nthanks")
    assert r.reply == "hi"


def test_mood_kept_exactly():
    assert parse_response(json.dumps(dict(VALID, mood="Focused 😤 "))).mood == "Focused 😤 "


@pytest.mark.parametrize("missing", ["mood", "confidence", "monologue"])
def test_mandatory_fields(missing):
    data = dict(VALID)
    del data[missing]
    with pytest.raises(ResponseFormatError, match=missing):
        parse_response(json.dumps(data))


def test_optional_fields_may_be_absent():
    r = parse_response(json.dumps({"mood": "ok", "confidence": 1, "monologue": "m"}))
    assert r.eval is None and r.reply is None and r.scratchpad is None


@pytest.mark.parametrize("text", ["not json", "{\"mood\": ", "[1, 2]", '{"mood": 1, "confidence": 1, "monologue": "m"}'])
def test_invalid(text):
    with pytest.raises(ResponseFormatError):
        parse_response(text)


def test_scratchpad_parsed():
    r = parse_response(json.dumps(dict(VALID, scratchpad={"heading": "H", "thread": None, "content": "c"})))
    assert r.scratchpad is not None and r.scratchpad.heading == "H"


def test_fallback_record():
    r = fallback_response("garbage text\nmore")
    assert r.fallback and r.mood == "uncertain" and "garbage text more" in r.monologue and r.eval is None
