"""The demo model shipped in the package (amacs_server/demo_model.py): ``AMACS_DEMO=1`` makes the
AMACS server serve it itself, from its start to its stop, with no key; it answers over real HTTP
through the real SDK, costs nothing, and the status names it as the endpoint."""

from __future__ import annotations

import asyncio
import json
import socket
from urllib.parse import urlsplit

import anthropic
import pytest

from amacs_server import views
from amacs_server.config import DEMO_MODEL, ConfigError, demo_as_left, load_config
from amacs_server.demo_model import (
    DEMO_AGAIN_NOTE,
    DEMO_LEAVE,
    DEMO_LEAVE_KEYED,
    DEMO_NOTE,
    DemoModel,
    answer,
)
from amacs_server.inference.pricing import Usage
from amacs_server.runtime import Runtime
from tests.test_memory import SilentFace


def ask(base_url: str, text: str) -> tuple[int, str]:
    """Stream the demo's answer to the person's TEXT; return (deltas, the whole text)."""
    client = anthropic.Anthropic(api_key="none", base_url=base_url)
    content = json.dumps({"human": text})
    with client.messages.stream(model=DEMO_MODEL, max_tokens=100,
                                messages=[{"role": "user", "content": content}]) as stream:
        deltas = sum(1 for _ in stream.text_stream)
        return deltas, stream.get_final_message().content[0].text  # type: ignore[union-attr]


def port_open(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as probe:
        return probe.connect_ex((parts.hostname or "", parts.port or 0)) == 0


def test_the_demo_answers_help_streamed_with_an_eval_and_lists_its_words():
    demo = DemoModel().start()
    try:
        deltas, text = ask(demo.base_url, "help")
    finally:
        demo.stop()
    assert deltas > 5  # streamed, not whole
    reply = json.loads(text)
    assert "agent-create-thread" in reply["eval"]
    for word in ("eval", "note", "todo", "thread", "task", "slow", "steps", "amacs-rewind", "amacs-fork"):
        assert word in reply["reply"], word
    assert not port_open(demo.base_url)


def test_steps_is_a_turn_of_three_evals_then_a_reply():
    body = {"messages": [{"role": "user", "content": json.dumps({"human": "steps"})}]}
    forms = []
    for _ in range(5):
        reply = json.loads(answer(body).text)
        if not reply["eval"]:
            break
        forms.append(reply["eval"])
        result = f'<last-eval-result>"{reply["eval"].split(chr(34))[1]}"</last-eval-result>'
        body["messages"].append({"role": "user", "content": result})
    assert forms == [f'(format "demo step {n} of 3")' for n in (1, 2, 3)]
    assert "Done in 4 ticks" in reply["reply"]


def test_amacs_demo_serves_the_demo_from_the_servers_start_to_its_stop(tmp_path):
    config = load_config({"AMACS_HOME": str(tmp_path / "h"), "AMACS_DEMO": "1"})
    assert config.demo and config.model == DEMO_MODEL and config.backend == "anthropic" and config.has_credentials
    rt = Runtime(config, SilentFace())
    try:
        assert rt.slot.demo is not None and port_open(rt.slot.demo.base_url)
        status = views.status(rt)
        assert status["model"] == "demo" and status["endpoint"] == "demo" and status["key_ok"] is True
        assert DEMO_NOTE in str(status["notice"]) and "No API key" not in str(status["notice"])
        assert rt.ledger.charge(Usage(input_tokens=1_000_000, output_tokens=1_000_000)) == 0.0  # nothing paid
        # Another model leaves the demo: its endpoint is the provider's again, and it needs a key.
        switched = rt.set_model("anthropic", "claude-x", None)
        assert switched["endpoint"] is None and switched["key_ok"] is False
        assert rt.set_model("anthropic", DEMO_MODEL, None)["endpoint"] == "demo"
        url = rt.slot.demo.base_url
    finally:
        rt.stop(grace=0)
    assert not port_open(url)


def test_the_demo_tells_a_person_with_a_key_how_to_leave_it_not_to_set_one(tmp_path):
    """A newcomer's finding: M-x amacs-demo in a shell started with ANTHROPIC_API_KEY set said "For
    real work set an API key and M-x amacs-restart", and a restart stays on the demo chosen."""
    for env, leave in (({}, DEMO_LEAVE), ({"ANTHROPIC_API_KEY": "k"}, DEMO_LEAVE_KEYED)):
        rt = Runtime(load_config({"AMACS_HOME": str(tmp_path / "h"), "AMACS_DEMO": "1", **env}), SilentFace())
        try:
            notice = str(views.status(rt)["notice"])
        finally:
            rt.stop(grace=0)
        assert DEMO_NOTE in notice and leave in notice and "amacs-restart" not in notice, notice
        assert ("set an API key" in notice) == (not env), notice


def test_the_demo_is_not_asked_what_it_accepts(tmp_path):
    """A new home asks the model's capabilities before its first call; the demo's first reply
    waited for the scripted model's 404."""
    rt = Runtime(load_config({"AMACS_HOME": str(tmp_path / "h"), "AMACS_DEMO": "1"}), SilentFace())

    async def learn() -> object:
        rt.slot.learn()  # as at start, in the running loop
        return rt.slot.catalog._task

    try:
        assert asyncio.run(learn()) is None
    finally:
        rt.stop(grace=0)


def test_the_no_key_note_offers_the_demo_first(tmp_path):
    note = load_config({"AMACS_HOME": str(tmp_path / "h")}).missing_key_message()
    assert note.startswith("No API key: try M-x amacs-demo")
    assert len(";; " + note) < 120, note  # one row of a 120-column terminal, as README says
    assert note.index("M-x amacs-demo") < note.index("ANTHROPIC_API_KEY") < note.index("docs/local-models.md")


def test_an_input_with_no_key_is_told_what_to_do_with_it(tmp_path):
    """The welcome says to ask "what can you do?"; with no key that re-printed the no-key note under
    the same note (a newcomer's finding).  The input is told, in one row, the two steps that get it
    answered: M-x amacs-demo, then M-p RET (another newcomer read "M-x amacs-demo answers this now"
    and waited: the demo does not send it by itself); with ANTHROPIC_BASE_URL set, only the key is
    missing: that note."""
    config = load_config({"AMACS_HOME": str(tmp_path / "h")})
    answer = config.no_key_answer()
    assert answer != config.missing_key_message()
    assert "answers this" not in answer and "ANTHROPIC_API_KEY" in answer
    assert answer.index("M-x amacs-demo starts a demo model") < answer.index("then M-p RET sends this again")
    assert len(";; " + answer) < 120, answer
    chosen = load_config({"AMACS_HOME": str(tmp_path / "h"), "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    assert chosen.no_key_answer() == chosen.missing_key_message()


def test_the_demo_and_the_local_model_are_not_both_chosen(tmp_path):
    with pytest.raises(ConfigError, match="AMACS_DEMO and AMACS_LOCAL_MODEL"):
        load_config({"AMACS_HOME": str(tmp_path), "AMACS_DEMO": "1", "AMACS_LOCAL_MODEL": "m.gguf",
                     "AMACS_LOCAL_PYTHON": "python"})


def eval_result_message(success: bool, error: str | None) -> dict[str, str]:
    """The user message that carries the agent's eval result, as the context writes it."""
    from amacs_server.context.assemble import eval_result_section
    from amacs_server.memory.items import Kind, MemoryItem, Tier
    from amacs_server.memory.memid import MemId

    item = MemoryItem(mem_id=MemId("amacs-instance-1", "primary", "last_eval_result", 1), tier=Tier.ROM,
                      kind=Kind.TOOL_RESULT,
                      content={"success": success, "result": None, "error": error, "skipped": False})
    return {"role": "user", "content": eval_result_section(item)}


def test_the_demo_says_a_refused_or_failed_eval_did_not_happen():
    """Was: with amacs-eval-confirm at writes, the person declined the todo's write, and the
    demo answered "Done: the file … has a new line" and pointed at a changed line not there."""
    declined = "The person declined to let this eval write /tmp/amacs-demo-todo-x.org"
    for word in ("todo", "note", "thread", "2+2"):
        asked = {"role": "user", "content": json.dumps({"human": word})}
        failed = json.loads(answer({"messages": [asked, eval_result_message(False, declined)]}).text)["reply"]
        assert failed.startswith("That did not happen: " + declined), failed
        assert "Done" not in failed and "changed line below" not in failed, failed
        ran = json.loads(answer({"messages": [asked, eval_result_message(True, None)]}).text)["reply"]
        assert ran.startswith("Done"), ran
    asked = {"role": "user", "content": json.dumps({"human": "error"})}
    reply = json.loads(answer({"messages": [asked, eval_result_message(False, "wrong-type-argument")]}).text)
    assert reply["reply"].startswith("That eval failed, as it was meant to"), reply


def test_the_demo_echoes_a_question_with_its_own_mark_not_another_full_stop():
    """A newcomer read "You said: hello, can you summarise my org agenda?." """
    def said(text: str) -> str:
        body = {"messages": [{"role": "user", "content": json.dumps({"human": text})}]}
        return str(json.loads(answer(body).text)["reply"])
    assert said("can you summarise my agenda?").startswith("You said: can you summarise my agenda? (I am")
    assert said("what is this").startswith("You said: what is this. (I am")


def test_the_demo_does_not_say_both_researchers_answered_when_one_was_cancelled():
    """A newcomer cancelled task-3 in the hub (k) and read "Done: both researchers answered" under
    its ✗ line.  The wake-up's events, as a real session's request carried them."""
    def event(talk: int, content: dict[str, str]) -> str:
        return json.dumps({"mem_id": f"<EOT>amacs-instance-1:primary:event.{talk}:1<EOT>", "kind": "event",
                           "content": {"type": "Agent", "source": f"task-{talk}", "talk_id": talk,
                                       "content": content}})
    done = {"handle": "task-4", "template": "researcher", "status": "done", "reply": "three sources"}
    cancelled = {"handle": "task-3", "template": "researcher", "status": "cancelled",
                 "error": "the task was cancelled"}

    def reply(*events: str) -> str:
        wake = "<events>\n" + "\n".join(events) + "\n</events>\n<last-eval-result>{}</last-eval-result>"
        body = {"messages": [{"role": "user", "content": json.dumps({"human": "task"})},
                             {"role": "user", "content": wake}]}
        return str(json.loads(answer(body).text)["reply"])
    assert reply(event(3, cancelled), event(4, done)).startswith("Not both: a researcher did not answer")
    assert reply(event(3, done), event(4, done)).startswith("Done: both researchers answered")


def test_a_home_last_on_the_demo_is_on_it_again_while_nothing_else_is_chosen(tmp_path):
    """A newcomer's home talked to the demo; ./amacs again, still no key, reopened on Claude with
    "No API key".  The home's last tick state says demo: with nothing else chosen, the demo again."""
    env = {"AMACS_HOME": str(tmp_path / "h")}
    again = demo_as_left(load_config(env), env, DEMO_MODEL)
    assert again.demo and again.demo_again and again.model == DEMO_MODEL and again.has_credentials
    rt = Runtime(again, SilentFace())
    try:
        notice = str(views.status(rt)["notice"])
        assert DEMO_AGAIN_NOTE in notice and DEMO_NOTE not in notice and "No API key" not in notice, notice
    finally:
        rt.stop(grace=0)
    # A fork of it is given the demo's backend and model by name: the same.
    fork_env = {**env, "AMACS_BACKEND": "anthropic", "AMACS_MODEL": DEMO_MODEL}
    assert demo_as_left(load_config(fork_env), fork_env, DEMO_MODEL).demo
    # A key, a base URL, another model or backend is the person's newer choice; a last tick on Claude is no demo.
    for other in ({"ANTHROPIC_API_KEY": "k"}, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"},
                  {"AMACS_MODEL": "claude-opus-4-1"}, {"AMACS_BACKEND": "openai", "OPENAI_BASE_URL": "http://x"}):
        chosen = {**env, **other}
        assert not demo_as_left(load_config(chosen), chosen, DEMO_MODEL).demo, other
    assert not demo_as_left(load_config(env), env, "claude-sonnet-5-5").demo
    assert not demo_as_left(load_config(env), env, None).demo


def reply_to(said: str) -> dict[str, object]:
    """The demo's first answer (as the agent's JSON) to SAID typed at the prompt."""
    reply: dict[str, object] = json.loads(answer({"messages": [{"role": "user",
                                                                 "content": json.dumps({"human": said})}]}).text)
    return reply


def test_the_demo_answers_what_the_greeting_suggests_as_a_person_types_it():
    """The greeting says to ask "what can you do?"; a newcomer typed "hello, what can you do?" and
    the demo only echoed it.  Case, a greeting before it and the end's punctuation do not matter,
    for it and for the words help lists."""
    tour = reply_to("help")
    for said in ("what can you do?", "What can you do", "hello, what can you do?", "Hi! What can you do?",
                 "Help.", "  hello  "):
        assert reply_to(said) == tour, said
    assert reply_to("Note.")["eval"] == reply_to("note")["eval"] is not None
    assert reply_to("What is 2+2?")["eval"] == "(+ 2 2)"
    assert str(reply_to("what is the capital of France?")["reply"]).startswith("You said: what is the capital")


def test_the_demo_s_monologue_says_what_it_is_doing():
    """Every commit of the demo's ticks ended "— thinking" (its monologue): a newcomer could not tell
    what the word named.  Each answer's monologue now says what that tick does."""
    thoughts = {said: str(reply_to(said)["monologue"]) for said in ("help", "note", "slow", "steps", "task", "hmm")}
    assert "thinking" not in thoughts.values() and "" not in thoughts.values(), thoughts
    assert len(set(thoughts.values())) == len(thoughts), thoughts
    assert thoughts["note"] == "do note in Emacs"
