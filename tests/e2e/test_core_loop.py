"""The core loop end to end: batch Emacs, the real server, the real SDK, the fake API.

Issue 2; RFC v4 §2, §3, §7, §8, §9.1; EPIC-002 IMP-017/018/019/021; IMP-038.
"""

import json
import os
import re
import signal
import subprocess

import pytest

from amacs_server.inference.parse import RETRY_PROMPT
from tests.context_items import chat_lines, parse_context, said, state, text_of
from tests.context_items import eval_result as eval_result_of
from tests.e2e.harness import TEST_KEY, elisp_string, finish_emacs, run_emacs, start_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e


def send(*texts):
    return " ".join(f"(amacs-e2e-send {elisp_string(t)})" for t in texts)


def session(*texts, setup=""):
    return f"{setup} (amacs-e2e-open) {send(*texts)} (amacs-e2e-finish)"


def git_log(home):
    return subprocess.run(["git", "-C", str(home), "log", "--format=%s"], capture_output=True, text=True, check=True).stdout.splitlines()


def test_two_plus_two_end_to_end(fake, home):
    """EPIC-002 IMP-021: the agent evals (+ 2 2), sees "4" on the next tick, then replies."""
    fake.script(
        Reply(agent_json(None, eval="(+ 2 2)", mood="🤔", monologue="Computing 2+2 in elisp")),
        Reply(agent_json("2 + 2 is 4.", mood="satisfied", monologue="Answered: 4")),
    )
    run = run_emacs(home, fake.url, session("what is 2+2?")).check()

    assert len(fake.requests) == 2
    first, second = fake.user_texts()
    assert chat_lines(first) == ["Human: what is 2+2?"]
    assert parse_context(first)["monologue"] == [] and "last-eval-result" not in parse_context(first)
    assert eval_result_of(second) == {"success": True, "result": "4", "error": None, "skipped": False}
    # The core skill is the cached system prompt (IMP-020).
    system = fake.requests[0]["body"]["system"]
    assert system[0]["cache_control"] == {"type": "ephemeral"}
    assert "Response format" in system[0]["text"] and "eval" in system[0]["text"]
    assert fake.requests[0]["body"]["stream"] is True

    # The shell shows the reply and the eval where it happened, never the JSON (RFC §9.1, issue 9).
    assert "amacs> what is 2+2?" in run.shell
    assert "▸ eval (+ 2 2) → 4\n" in run.shell
    assert run.shell.index("▸ eval (+ 2 2)") < run.shell.index("2 + 2 is 4.")
    for internal in ("🤔", "satisfied", "Computing", "monologue", "{"):
        assert internal not in run.shell
    assert run.shell.rstrip().endswith("amacs>")

    chat = (home / "agent-chat.org").read_text()
    assert re.search(r"\* Tick 1\n:PROPERTIES:\n:TIMESTAMP: \S+Z\n:END:\n\n\*\* Human\nwhat is 2\+2\?\n", chat)
    assert re.search(r"\* Tick 2\n:PROPERTIES:\n:TIMESTAMP: \S+Z\n:END:\n\n\*\* Agent\n2 \+ 2 is 4\.\n", chat)
    assert git_log(home) == [
        "[TICK 2][no-thread][satisfied] reply: 2 + 2 is 4. — Answered: 4",
        "[TICK 1][no-thread][🤔] «what is 2+2?» — Computing 2+2 in elisp",
    ]
    consciousness = (home / "consciousness.el").read_text()
    assert "(current-tick . 2)" in consciousness and '(mood . "satisfied")' in consciousness
    assert "(cost-so-far . 0.0012)" in consciousness  # 2 calls x (100 in x $3 + 20 out x $15)/1e6

    # Transcript: typed events with the full request, raw response, eval and result.
    events = [json.loads(x) for f in (home / "transcripts").glob("*.jsonl") for x in f.read_text().splitlines()]
    kinds = [e["event"] for e in events]
    for kind in ("tick_start", "model_request", "model_response", "parsed", "eval", "eval_result", "tick_end"):
        assert kind in kinds
    response = next(e for e in events if e["event"] == "model_response")
    assert response["data"]["usage"]["input_tokens"] == 100 and response["data"]["latency_ms"] > 0
    assert next(e for e in events if e["event"] == "eval_result")["data"]["result"] == "4"

    # The API key is in no file of the AMACS home, git objects and logs included.
    assert fake.api_key_of(0) == TEST_KEY
    for root, _dirs, files in os.walk(home):
        for name in files:
            assert TEST_KEY.encode() not in open(os.path.join(root, name), "rb").read(), name
    patches = subprocess.run(["git", "-C", str(home), "log", "-p"], capture_output=True, text=True).stdout
    assert TEST_KEY not in patches


def test_invalid_json_twice_then_valid(fake, home):
    """RFC §2.4: annotate, retry with the fixed prompt, at most twice."""
    fake.script(Reply("I think the answer is 4"), Reply("{not json"), Reply(agent_json("Fine: 4.")))
    run = run_emacs(home, fake.url, session("2+2?")).check()
    assert len(fake.requests) == 3
    for req in fake.requests[1:]:
        last = req["body"]["messages"][-1]
        assert last["role"] == "user" and said(text_of(last["content"])) == RETRY_PROMPT
        assert "notice.retry" in text_of(last["content"])  # the harness's words, an item of the primary's memory
    assert fake.requests[2]["body"]["messages"][1]["content"] == "I think the answer is 4"
    assert "retrying (1/2)" in run.shell and "retrying (2/2)" in run.shell
    assert "Fine: 4." in run.shell
    assert len(git_log(home)) == 1


def test_invalid_json_three_times_gives_fallback(fake, home):
    """IMP-017: after two retries, the fallback record; the loop goes on."""
    fake.script(Reply("nope 1"), Reply("nope 2"), Reply("nope 3"), Reply(agent_json("Back to normal.")))
    run = run_emacs(home, fake.url, session("hello", "again")).check()
    assert len(fake.requests) == 4
    assert "still not valid JSON after 2 retries" in run.shell and "nope 3" in run.shell
    assert "Back to normal." in run.shell
    log = git_log(home)
    assert log[1].startswith("[TICK 1][no-thread][uncertain] «hello» — [unparsed response] nope 3")
    assert chat_lines(fake.user_texts()[3]) == ["Human: hello", "Agent: ", "Human: again"]


def test_eval_errors_come_back_as_data(fake, home):
    """RFC §7: a signal, a loop past the time limit and unreadable elisp are results, not crashes."""
    fake.script(
        Reply(agent_json(None, eval="(car 1)")), Reply(agent_json("saw error 1")),
        Reply(agent_json(None, eval="(let ((i 0)) (while t (setq i (1+ i))))")), Reply(agent_json("saw error 2")),
        Reply(agent_json(None, eval="(+ 2")), Reply(agent_json("saw error 3")),
        Reply(agent_json(None, eval="(emacs-pid)")), Reply(agent_json("still alive")),
    )
    run = run_emacs(
        home, fake.url, session("one", "two", "three", "four", setup="(setq amacs-eval-timeout 1)")
    ).check()
    ctx = fake.user_texts()
    signal_result, loop_result, read_result, alive = (eval_result_of(ctx[i]) for i in (1, 3, 5, 7))
    assert signal_result == {"success": False, "result": None, "error": "Wrong type argument: listp, 1", "skipped": False}
    assert not loop_result["success"] and "time limit of 1 s" in loop_result["error"]
    assert not read_result["success"] and read_result["error"].startswith("Unreadable elisp")
    assert alive["success"] and int(alive["result"]) > 0
    for text in ("saw error 1", "saw error 2", "saw error 3", "still alive"):
        assert text in run.shell


def test_step_limit_stops_a_runaway_turn(fake, home):
    """Issue 2: after an eval the loop goes on, up to the step limit per human turn."""
    fake.script(*[Reply(agent_json(None, eval=f"(+ {i} 1)")) for i in range(10)])
    run = run_emacs(home, fake.url, session("loop", setup="(setq amacs-max-steps 3)")).check()
    assert len(fake.requests) == 3
    assert "Step limit reached (3 ticks this turn)" in run.shell


def test_kill_server_mid_tick_keeps_input_and_restart_continues(fake, home):
    """Issue 2: the human's input is on disk before the model call; a restart continues."""
    import threading

    hold = threading.Event()
    fake.script(Reply(agent_json("never seen"), hold=hold), Reply(agent_json("Here I am again.")))
    program = (
        "(amacs-e2e-open) (amacs-e2e-send-no-wait \"remember the milk\") "
        "(amacs-e2e-wait-disconnect) (amacs-e2e-send \"are you back?\") (amacs-e2e-finish)"
    )
    emacs = start_emacs(home, fake.url, program)
    try:
        assert fake.wait_for_requests(1, timeout=60)
        assert "** Human\nremember the milk" in (home / "agent-chat.org").read_text()
        pid = json.loads((home / "server.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
        run = finish_emacs(emacs, home).check()
    finally:
        hold.set()
        if emacs.poll() is None:
            emacs.kill()
    assert "AMACS server stopped" in run.shell
    assert "Here I am again." in run.shell
    # Said when the server stopped (it had confirmed the write-ahead), not again at the next hello.
    assert ("AMACS server stopped (killed) before the agent replied; your input is saved in agent-chat.org, not answered"
            in run.shell), run.shell
    assert run.shell.count("AMACS server stopped") == 1, run.shell  # one notice, not two
    assert "Your last message got no reply" not in run.shell
    assert chat_lines(fake.user_texts()[-1]) == [
        "Human: remember the milk", "Agent: (no reply: the tick was interrupted)", "Human: are you back?"]
    ticks = [int(t) for t in re.findall(r"^\* Tick (\d+)$", (home / "agent-chat.org").read_text(), re.M)]
    assert ticks == [1, 2]


def test_restart_resumes_history_tick_and_mood(fake, home):
    """RFC §8: after restarting Emacs and the server, chat, tick counter and mood come back."""
    fake.script(Reply(agent_json("First answer.", mood="😤")))
    run_emacs(home, fake.url, session("first question")).check()
    fake.script(Reply(agent_json("Second answer.")))
    run_emacs(home, fake.url, session("second question")).check()
    ctx = fake.user_texts()[1]
    assert chat_lines(ctx) == ["Human: first question", "Agent: First answer.", "Human: second question"]
    assert state(ctx, "current_tick") == 2 and state(ctx, "mood") == "😤"
    assert git_log(home)[0].startswith("[TICK 2]")


def test_missing_key_says_how_to_fix_and_keeps_input(fake, home):
    """Issue 2: without a key the shell opens and says in one line what to do; nothing is lost."""
    run = run_emacs(home, fake.url, session("hello there"), ANTHROPIC_API_KEY="").check()
    assert fake.requests == []
    notices = [line for line in run.shell.splitlines() if "ANTHROPIC_API_KEY" in line]
    # ANTHROPIC_BASE_URL points at the fake: the note names it, says only the key is missing,
    # offers a keyless backend and does not advise pointing the variable elsewhere.
    assert notices and all(f"No API key for {fake.url}" in n and "backend openai" in n
                           and "point ANTHROPIC_BASE_URL" not in n for n in notices)
    assert "** Human\nhello there" in (home / "agent-chat.org").read_text()
    assert run.shell.rstrip().endswith("amacs>")


def test_agent_may_not_change_harness_fields(fake, home):
    """RFC §3.2, enforced: a ROM write from an eval is refused by every road an eval has to it (the
    agent function, the memory tool on its MemId, the person's own budget method called over EPC);
    a RAM write takes effect (docs/ARCHITECTURE.md, Trust)."""
    def caught(form):
        return f"(condition-case err {form} (error (amacs-error-message err)))"

    fake.script(
        Reply(agent_json(None, eval="(agent-set-consciousness 'current-tick 999)")),
        Reply(agent_json(None, eval="(agent-set-consciousness 'chat-context-depth 1)")),
        Reply(agent_json(None, eval=caught("(amacs--call-sync 'set_budget (list 12345))"))),
        Reply(agent_json(None, eval=caught('(agent-memory-mutate "<EOT>amacs-instance-1:primary:budget<EOT>" '
                                           "'(:cost-so-far 0 :budget-limit 12345))"))),
        Reply(agent_json(None, eval=caught("(let ((amacs-current-eval nil)) (agent-set-consciousness 'budget 12345))"))),
        Reply(agent_json("done")),
    )
    run_emacs(home, fake.url, session("try")).check()
    ctx = fake.user_texts()
    refused = eval_result_of(ctx[1])
    assert not refused["success"] and "owned by the harness" in refused["error"]
    assert eval_result_of(ctx[2]) == {"success": True, "result": "1", "error": None, "skipped": False}
    assert state(ctx[2], "chat_context_depth") == 1 and state(ctx[2], "current_tick") == 3
    assert eval_result_of(ctx[3])["result"].startswith('"refused: set_budget acts for the person'), ctx[3]
    assert "harness" in eval_result_of(ctx[4])["result"] or "refused" in eval_result_of(ctx[4])["result"]
    assert "owned by the harness" in eval_result_of(ctx[5])["result"]
    assert state(ctx[5], "budget")["budget_limit"] != 12345
    assert not (home / "budget-limit").exists()


def test_imp038_depth_scenario_through_the_real_stack(fake, home):
    """IMP-038 'Depth limiting works', with DESIGN.md's append-only windows (issue 10).

    Depth 3 at the conversation's base; each later tick appends its exchange, and the window
    drops old exchanges in a block when the conversation restarts (every BLOCK_TICKS ticks),
    so the prefix stays cacheable.  After 10 exchanges the model sees at least the last 3
    pairs plus the pending message, never more than 3 + BLOCK_TICKS pairs; after a restart
    the base holds 3 pairs again.
    """
    from amacs_server.context.assemble import BLOCK_TICKS

    home.mkdir(parents=True)
    (home / "consciousness.el").write_text("((chat-context-depth . 3))\n")
    turns = BLOCK_TICKS + 3
    fake.script(*[Reply(agent_json(f"response {i}")) for i in range(1, turns + 1)])
    run_emacs(home, fake.url, session(*[f"message {i}" for i in range(1, turns + 1)]), timeout=240).check()
    lines = chat_lines(fake.user_texts()[10])
    assert lines[-7:] == [
        "Human: message 8", "Agent: response 8",
        "Human: message 9", "Agent: response 9",
        "Human: message 10", "Agent: response 10",
        "Human: message 11",
    ]
    assert (len(lines) - 1) // 2 <= 3 + BLOCK_TICKS
    sizes = [(len(chat_lines(text)) - 1) // 2 for text in fake.user_texts()]
    assert max(sizes) <= 3 + BLOCK_TICKS
    restarts = [i for i in range(1, len(sizes)) if sizes[i] < sizes[i - 1]]
    assert restarts, f"the window never dropped a block: {sizes}"
    assert all(sizes[i] == 3 for i in restarts), sizes


def test_headless_server_serves_a_batch_emacs(fake, home, tmp_path):
    """Issue 2: `python -m amacs_server --headless' serves an Emacs that connects with the token."""
    import sys

    from tests.e2e.harness import emacs_env

    env = emacs_env(home, fake.url, AMACS_TOKEN="c" * 64)
    server = subprocess.Popen([sys.executable, "-m", "amacs_server", "--headless"], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        fake.script(Reply(agent_json("Hello from headless.")), Reply(agent_json("Again.")))
        program = (f"(amacs-connect {port} \"{'c' * 64}\") (amacs-e2e-wait #'amacs-live-p \"connect\") "
                   "(amacs-shell) (amacs-e2e-send \"hi\") (amacs-e2e-dump) (kill-emacs 0)")
        run = run_emacs(home, fake.url, program).check()
        assert "Hello from headless." in run.shell
        assert server.poll() is None  # a headless server outlives its Emacs
        run = run_emacs(home, fake.url, "(amacs-connect) (amacs-e2e-wait #'amacs-live-p \"connect\") "
                        "(amacs-shell) (amacs-e2e-send \"again\") (amacs-e2e-dump) (kill-emacs 0)",
                        AMACS_TOKEN="c" * 64).check()
        assert "Again." in run.shell
        bad = run_emacs(home, fake.url, f"(amacs-connect {port} \"{'d' * 64}\") (sleep-for 1) "
                        "(princ (if (amacs-live-p) \"LIVE\" \"REFUSED\")) (kill-emacs 0)")
        assert "REFUSED" in bad.stdout
    finally:
        server.kill()
        server.wait()


def test_refused_key_is_explained_and_input_kept(fake, home):
    """A 401 is not retried; the shell says what to fix; the input stays in agent-chat.org."""
    fake.script(Reply(status=401), Reply(agent_json("Works now.")))
    run = run_emacs(home, fake.url, session("first try", "second try")).check()
    assert len(fake.requests) == 2
    assert "the API key was refused (401)" in run.shell and "Works now." in run.shell
    assert "** Human\nfirst try" in (home / "agent-chat.org").read_text()
    assert chat_lines(fake.user_texts()[1]) == [
        "Human: first try", "Agent: (no reply: the API key was refused (401): check ANTHROPIC_API_KEY or "
        "`amacs-api-key' (it said: scripted failure))", "Human: second try"]
