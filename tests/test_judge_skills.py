"""Judge skills read and checked, a judge's answer read, the report's bootstrap interval, the experiment's
early stop and its summary per reason (units of ``amacs-server judge`` and ``experiment``)."""

from __future__ import annotations

import random

import pytest

from amacs_server.research.experiment import SAME_FAILURES, same_failures, summary
from amacs_server.research.judge import JudgeError, find_judge, read_answer, read_judge
from amacs_server.research.report import bootstrap_interval
from amacs_server.research.runs import INTERRUPTED, Outcome

JUDGE = "---\nname: j\nkind: judge\nscale: {scale}\ninput: {input}\n---\nScore it.\n"


def test_the_shipped_judges_are_judges():
    for name, reads in (("answer-quality", "final"), ("viewpoints-used", "turns")):
        judge = read_judge(find_judge(name))
        assert (judge.name, judge.low, judge.high, judge.input, judge.model) == (name, 1, 5, reads, None)
        assert "5:" in judge.rubric and "1:" in judge.rubric


@pytest.mark.parametrize(("text", "message"), [
    (JUDGE.replace("judge\n", "viewpoint\n", 1).format(scale="1-5", input="final"), "kind: must be judge"),
    (JUDGE.format(scale="5-1", input="final"), "scale: must be LOW-HIGH"),
    (JUDGE.format(scale="good", input="final"), "scale: must be LOW-HIGH"),
    (JUDGE.format(scale="1-5", input="all"), "input: must be final or turns, got 'all'"),
    (JUDGE.format(scale="1-5", input="final").replace("Score it.\n", ""), "the rubric"),
    (JUDGE.format(scale="1-99999999999999999999999", input="final"), "each within ±1000000"),
    (JUDGE.format(scale="1-5", input="final").replace("name: j", "name: ../../outside"),
     "name: must be letters, digits.*got '../../outside'"),
    (JUDGE.format(scale="1-5", input="final").replace("name: j", "name: /tmp/abs"), "name: must be"),
])
def test_a_wrong_judge_is_named(tmp_path, text, message):
    (tmp_path / "SKILL.md").write_text(text)
    with pytest.raises(JudgeError, match=message):
        read_judge(find_judge(str(tmp_path)))


def test_an_unknown_judge_lists_the_shipped_ones():
    with pytest.raises(JudgeError, match="answer-quality, viewpoints-used"):
        find_judge("no-such-judge")


def test_the_judges_answer_is_read_strictly(tmp_path):
    (tmp_path / "SKILL.md").write_text(JUDGE.format(scale="1-5", input="final"))
    judge = read_judge(find_judge(str(tmp_path)))
    assert read_answer('Sure. ```json\n{"score": 4, "rationale": "good"}\n```', judge) == (4, "good")
    assert read_answer('{"score": 2.0}', judge) == (2, "")
    for bad, why in (("no json here", "no JSON object"), ('{"score": 6}', "from 1 to 5"),
                     ('{"score": 3.5}', "whole number"), ('{"score": "4"}', "whole number"),
                     ('{"score": true}', "whole number"), ("{score: 4}", "not JSON")):
        with pytest.raises(ValueError, match=why):
            read_answer(bad, judge)


def test_bootstrap_interval_holds_the_mean_and_narrows_with_more_runs():
    rng = random.Random(1)
    few = [rng.choice([2, 3, 4, 5]) for _ in range(5)]
    many = [rng.choice([2, 3, 4, 5]) for _ in range(200)]
    for values in (few, many):
        lo, hi = bootstrap_interval(values)
        assert lo <= sum(values) / len(values) <= hi and min(values) <= lo and hi <= max(values)
    assert bootstrap_interval(many)[1] - bootstrap_interval(many)[0] < bootstrap_interval(few)[1] - \
        bootstrap_interval(few)[0]
    assert bootstrap_interval([3.0]) == (3.0, 3.0) and bootstrap_interval([4, 4, 4]) == (4, 4)
    assert bootstrap_interval(few) == bootstrap_interval(few)  # seeded: the same report twice


def outcome(status: str, error: str | None = None, turn: int | None = None) -> Outcome:
    return Outcome(run_id="r", status=status, cost=0.0, seconds=1.0, turns_done=0, started_at=0.0, ended_at=1.0,
                   error=error, failed_turn=turn)


def test_same_failures_stop_only_when_alike_and_in_a_row():
    dead = outcome("failed", "model endpoint unreachable: http://127.0.0.1:9", 1)
    assert same_failures([dead] * (SAME_FAILURES - 1)) is None
    assert same_failures([dead] * SAME_FAILURES) == dead.error
    assert same_failures([dead, outcome("done"), dead]) is None
    assert same_failures([dead, dead, outcome("failed", "reply never parsed", 1)]) is None
    assert same_failures([outcome("failed", INTERRUPTED)] * SAME_FAILURES) is None  # C-c is not a cause


def test_summary_is_one_line_per_reason():
    lines = summary([outcome("failed", "401: invalid API key", 1), outcome("done"),
                     outcome("failed", "401: invalid API key", 2), outcome("failed", "timed out after 6 s", 1)])
    assert lines == ["  2 runs failed (at turn 1, 2): 401: invalid API key",
                     "  1 run failed (at turn 1): timed out after 6 s"]


def test_a_turn_without_a_reply_names_the_shells_last_error(tmp_path):
    """No model error, no parse failure, no budget in the transcript (an internal error in the turn): the
    reason is what the shell said, not a bare 'no reply'."""
    from amacs_server.research.outcome import Turn, reason

    shell = tmp_path / "shell.txt"
    shell.write_text("amacs> hello\n;; Step limit reached\n;; Internal error in this turn: InvalidURL('x'). "
                     "The server goes on; server.log has the details.\n\namacs> ")
    said = reason(Turn(human="hello"), None, None, shell)
    assert said == ("the turn ended without a reply: Internal error in this turn: InvalidURL('x'). "
                    "The server goes on; server.log has the details.")
    assert reason(Turn(human="hello"), None, None, tmp_path / "none.txt") == "the turn ended without a reply"
    assert reason(Turn(human="hello", model_error="the API key was refused (401): check it"), None, None,
                  shell) == "401: invalid API key"


def test_a_judge_that_is_not_utf8_is_one_line(tmp_path):
    (tmp_path / "SKILL.md").write_bytes(JUDGE.format(scale="1-5", input="final").encode() + b"caf\xe9\n")
    with pytest.raises(JudgeError, match=r"SKILL.md: not UTF-8 text \(byte \d+\); save it as UTF-8"):
        read_judge(find_judge(str(tmp_path)))


def test_an_openai_compatible_judge_is_asked_for_its_answers_form_in_the_form_its_server_takes(tmp_path, monkeypatch):
    """A judge on an OpenAI-compatible endpoint asks for the answer's form (json_schema, OpenAI's);
    refused (llama-cpp-python says so with a 500 the backend reads as 422), its json_object form
    with the schema, which a grammar holds a small model to; refused again, none.  The Messages
    API is sent no form.  Each ask is in the judge's transcript."""
    import asyncio
    import json

    from amacs_server.inference.pricing import Usage
    from amacs_server.inference.retry import InferenceError
    from amacs_server.research import judge as judging

    (tmp_path / "SKILL.md").write_text(JUDGE.format(scale="1-5", input="final"))
    judge = read_judge(find_judge(str(tmp_path)))
    asked: list[object] = []

    from amacs_server.inference.backend import ModelResult

    result = ModelResult(text='{"score": 3, "rationale": "ok"}', usage=Usage(10, 5), latency_ms=1.0, stop_reason="stop")

    class Server:
        def __init__(self, takes: set[str | None]) -> None:
            self.takes = takes

        async def answer(self, request, stream=True):
            form = (request.get("extra_body") or {}).get("response_format")
            asked.append(form and form["type"])
            if (form and form["type"]) not in self.takes:
                raise InferenceError("the endpoint refused the request as invalid", 422)
            yield result

        async def aclose(self):
            pass

    def ask(backend: str, takes: set[str | None]) -> dict[str, object]:
        asked.clear()
        monkeypatch.setattr(judging, "_backend", lambda job: Server(takes))
        job = judging.Job(run_id="r", material="m", backend=backend, model="smollm2", base_url="http://127.0.0.1:9/v1")
        return asyncio.run(judging._ask(judge, job, tmp_path / backend / "-".join(map(str, sorted(takes, key=str)))))

    assert ask("openai", {"json_schema"})["score"] == 3 and asked == ["json_schema"]
    assert ask("openai", {"json_object"})["score"] == 3 and asked == ["json_schema", "json_object"]
    assert ask("openai", {None})["score"] == 3 and asked == ["json_schema", "json_object", None]
    assert ask("anthropic", {None})["score"] == 3 and asked == [None]
    schema_form = judging.answer_format(judge, "json_schema")
    assert schema_form is not None and schema_form["json_schema"]["schema"]["properties"]["score"]["enum"] == [1, 2, 3, 4, 5]
    object_form = judging.answer_format(judge, "json_object")
    assert object_form is not None and object_form["schema"]["properties"]["rationale"]["maxLength"] == judging.RATIONALE_MAX
    written = [json.loads(line) for line in (tmp_path / "openai" / "json_object" / "judge.jsonl").read_text().splitlines()]
    assert [e["event"] for e in written].count("model_error") == 1  # the refused form, said
    assert ask("openai", set())["status"] == "failed" and asked == ["json_schema", "json_object", None]
