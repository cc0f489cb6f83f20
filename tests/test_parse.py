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


# -- any bytes the model sends are data (issue 12, item 5) ---------------------------------


def test_lone_surrogates_and_nuls_become_replacement_characters_that_encode():
    text = ('{"reply": "a\\ud800b\\u0000c", "mood": "ok\\udfff", "confidence": 0.5, "monologue": "m\\u0000",'
            ' "eval": "(insert \\"\\udc00\\")", "scratchpad": {"heading": "h\\ud800", "content": "c\\u0000"}}')
    r = parse_response(text)
    assert (r.reply, r.mood, r.monologue, r.eval) == ("a\ufffdb\ufffdc", "ok\ufffd", "m\ufffd", '(insert "\ufffd")')
    assert r.scratchpad is not None and (r.scratchpad.heading, r.scratchpad.content) == ("h\ufffd", "c\ufffd")
    json.dumps(r.to_dict(), ensure_ascii=False).encode("utf-8")  # storable everywhere


def test_deep_nesting_is_a_format_error_not_a_crash():
    text = '{"mood": "ok", "confidence": 0.5, "monologue": "m", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(ResponseFormatError, match="nested too deeply"):
        parse_response(text)


@pytest.mark.parametrize("value, expected", [("1e400", 1.0), ("-1e400", 0.0), ("NaN", 0.0)])
def test_confidence_out_of_any_range_is_clamped(value, expected):
    r = parse_response('{"mood": "ok", "confidence": ' + value + ', "monologue": "m"}')
    assert r.confidence == expected


def test_a_fallback_of_hostile_text_is_printable():
    assert "\x00" not in fallback_response("junk \x00 \ud800").monologue


def test_an_integer_too_large_for_a_float_is_clamped():
    assert parse_response('{"mood": "ok", "confidence": 1' + "0" * 400 + ', "monologue": "m"}').confidence == 1.0
    assert parse_response('{"mood": "ok", "confidence": -1' + "0" * 400 + ', "monologue": "m"}').confidence == 0.0


def test_every_wrong_field_is_named_in_one_line_from_the_declared_model():
    """The response is checked by one declared model (issue 14); the message lists what is wrong."""
    text = '{"mood": " ", "confidence": true, "reply": 3, "scratchpad": {"content": "c"}, "done": "yes"}'
    with pytest.raises(ResponseFormatError) as err:
        parse_response(text)
    assert str(err.value) == ("reply must be a string or null; mood must be a non-empty string; "
                              "confidence must be a number; monologue is missing; scratchpad.heading is missing; "
                              "done must be true or false or null")


def test_fields_the_skill_does_not_ask_for_are_ignored():
    r = parse_response('{"mood": "ok", "confidence": 0.5, "monologue": "m", "plan": ["x"], "eval": null}')
    assert (r.mood, r.eval, r.done) == ("ok", None, False)


def test_a_raw_newline_inside_a_string_is_read_as_itself():
    """A constrained decoder's grammar let a raw newline into a string (SmolLM2 on
    llama-cpp-python's server, 0.3.36): unambiguous, so read, not sent back as invalid JSON."""
    response = parse_response('{"mood": "ok", "confidence": 0.5, "monologue": "m", "eval": "(+ 1\n 2)"}')
    assert response.eval == "(+ 1\n 2)"
