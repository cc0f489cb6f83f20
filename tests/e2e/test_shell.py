"""The shell people prefer (issue 6): streaming, retries with status, interrupt, cost, backends."""

import json
import re

import pytest

from tests.e2e.harness import run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e

REPLY = ("Streaming works: this reply arrives in many small pieces, and the shell shows each "
         "piece as it comes, so you read while the model is still writing.")

SAMPLER = r"""
(setq amacs-max-steps 4)
(amacs-e2e-open)
(amacs-e2e-send-no-wait "stream please")
(let ((samples nil) (deadline (+ (float-time) 30)))
  (while (and amacs-shell-busy (< (float-time) deadline))
    (push (with-current-buffer amacs-shell-buffer-name
            (let ((text (buffer-substring-no-properties (point-min) amacs-shell--out)))
              (if (string-match "stream please\n" text) (substring text (match-end 0)) "")))
          samples)
    (accept-process-output nil 0.02))
  (with-temp-file (getenv "AMACS_E2E_SAMPLES") (insert (json-encode (vconcat (nreverse samples))))))
(amacs-e2e-finish)
"""


def test_reply_streams_as_a_growing_prefix_without_json(fake, home, tmp_path):
    """The buffer holds a growing prefix of the reply before the response is complete."""
    text = agent_json(REPLY, mood="🙂", monologue="streamed a long reply")
    fake.script(Reply(text, chunks=60, chunk_delay=0.03))
    samples_file = tmp_path / "samples.json"
    run = run_emacs(home, fake.url, SAMPLER, AMACS_E2E_SAMPLES=str(samples_file)).check()
    samples = [s.strip() for s in json.loads(samples_file.read_text())]
    partial = [s for s in samples if s and s != REPLY]
    assert len(set(partial)) >= 10, "the reply did not appear piece by piece"
    for shown in samples:
        assert REPLY.startswith(shown), shown  # always a prefix of the reply: never JSON
        assert not re.search(r'[{}]|"reply"|"mood"|🙂', shown)
    lengths = [len(s) for s in samples]
    assert lengths == sorted(lengths)  # it only grows
    assert run.shell.count(REPLY) == 1 and run.shell.rstrip().endswith("amacs>")


def test_streamed_text_of_invalid_json_is_marked_then_the_retry_answers(fake, home):
    """If the streamed JSON turns out invalid, the streamed text is marked and the retry follows."""
    broken = json.dumps({"reply": "A first try that streams", "mood": "ok"})  # no confidence, no monologue
    fake.script(Reply(broken, chunks=8), Reply(agent_json("The valid answer.")))
    program = (
        "(amacs-e2e-open) (amacs-e2e-send \"go\") "
        "(with-current-buffer amacs-shell-buffer-name (goto-char (point-min)) "
        "(search-forward \"A first try\") "
        "(princ (format \"FACE<<%S>>\\n\" (get-text-property (match-beginning 0) 'font-lock-face)))) "
        "(amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program).check()
    assert "FACE<<amacs-shell-abandoned>>" in run.stdout
    assert "(the agent keeps none of the text above: not valid JSON)" in run.shell
    assert "retrying (1/2)" in run.shell and run.shell.count("The valid answer.") == 1


def test_overloaded_twice_then_success_shows_status_lines(fake, home):
    """529 twice, then success: one reply, with a one-line status per retry."""
    fake.script(Reply(status=529), Reply(status=529), Reply(agent_json("Third time lucky.")))
    run = run_emacs(home, fake.url, "(amacs-e2e-open) (amacs-e2e-send \"hi\") (amacs-e2e-finish)").check()
    assert len(fake.requests) == 3
    statuses = [line for line in run.shell.splitlines() if "overloaded (529)" in line]
    assert statuses == [";; Model API overloaded (529); retrying now (attempt 2 of 5)",
                        ";; Model API overloaded (529); retrying now (attempt 3 of 5)"]
    assert run.shell.count("Third time lucky.") == 1


def test_overloaded_mid_stream_is_retried_and_the_broken_text_discarded(fake, home):
    """An SSE error event after half the reply: its text is marked discarded, the call retried once."""
    first = agent_json("A first answer that the API breaks off halfway through its stream.")
    fake.script(Reply(first, chunks=10, stream_error="overloaded_error"), Reply(agent_json("The whole answer.")))
    run = run_emacs(home, fake.url, "(amacs-e2e-open) (amacs-e2e-send \"hi\") (amacs-e2e-finish)").check()
    assert len(fake.requests) == 2
    # The wait is jittered from a base the tests keep short: "retrying in 0.1 s" or "retrying now".
    assert re.search(r";; Model API overloaded \(mid-stream\); retrying (in [0-9.]+ s|now) \(attempt 2 of", run.shell)
    assert "(the agent keeps none of the text above: the call is retried)" in run.shell
    assert run.shell.count("The whole answer.") == 1


def test_invalid_request_mid_stream_fails_at_once_with_what_to_do(fake, home):
    fake.script(Reply(agent_json("Half of this arrives, then the API refuses."), chunks=10,
                      stream_error="invalid_request_error"))
    run = run_emacs(home, fake.url, "(amacs-e2e-open) (amacs-e2e-send \"hi\") (amacs-e2e-finish)").check()
    assert len(fake.requests) == 1
    assert ("Model call failed: the API broke off its answer (invalid_request_error: scripted mid-stream "
            "failure). Your input is saved; send again to retry.") in run.shell


def test_unauthorized_is_not_retried(fake, home):
    fake.script(Reply(status=401))
    run = run_emacs(home, fake.url, "(amacs-e2e-open) (amacs-e2e-send \"hi\") (amacs-e2e-finish)").check()
    assert len(fake.requests) == 1
    assert "the API key was refused (401): check ANTHROPIC_API_KEY" in run.shell


def test_interrupt_a_slow_stream_then_the_next_input_works(fake, home):
    """C-c C-c during a slow streamed reply: recorded as interrupted, prompt back, nothing lost."""
    from tests.context_items import chat_lines

    slow = agent_json("This reply is slow and will be cut off long before it ends, " * 3)
    fake.script(Reply(slow, chunks=80, chunk_delay=0.1), Reply(agent_json("Next works.")))
    program = (
        "(amacs-e2e-open) (amacs-e2e-send-no-wait \"tell me slowly\") "
        "(amacs-e2e-wait (lambda () (buffer-local-value (quote amacs-shell--stream-start) (get-buffer amacs-shell-buffer-name))) \"streaming\") "
        "(accept-process-output nil 0.3) "
        "(with-current-buffer amacs-shell-buffer-name (call-interactively (key-binding (kbd \"C-c C-c\")))) "
        "(amacs-e2e-wait (lambda () (not amacs-shell-busy)) \"the prompt\") "
        "(amacs-e2e-send \"and now?\") (amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program).check()
    assert "Interrupted. Your input is kept in agent-chat.org; the tick is recorded as interrupted." in run.shell
    assert "(the agent keeps none of the text above: interrupted)" in run.shell
    assert "Next works." in run.shell
    assert len(fake.requests) == 2
    assert chat_lines(fake.user_texts()[1]) == [
        "Human: tell me slowly", "Agent: (no reply: interrupted by the person)", "Human: and now?"]
    # Marked in agent-chat.org too, not only in the transcript (a newcomer's finding).
    assert "** Human\ntell me slowly\n\n** No reply\ninterrupted by the person\n" in (home / "agent-chat.org").read_text()
    # The next turn does not see an old eval as its last result (found in tmux), nor a failed eval
    # that never ran (found by a newcomer): no eval was under way, so there is no last result; the
    # chat says the tick was interrupted.
    from tests.context_items import parse_context, request_text

    assert "last-eval-result" not in parse_context(request_text(fake.requests[1]["body"]))


USAGE = {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 5000,
         "cache_creation_input_tokens": 2000}
# By hand, Sonnet prices per million tokens: 3 in, 15 out, 3.75 cache write, 0.30 cache read.
TICK_COST = (1000 * 3 + 200 * 15 + 2000 * 3.75 + 5000 * 0.30) / 1e6  # = 0.015


def test_cost_figures_match_a_hand_computation(fake, home):
    """Tokens, cache reads/writes and dollars per tick and per session, in the mode line and hub."""
    fake.script(Reply(agent_json(None, eval="(+ 1 1)"), usage=USAGE), Reply(agent_json("Two."), usage=USAGE))
    program = ("(amacs-e2e-open) (amacs-e2e-send \"count\") "
               "(princ (format \"MODE<<%s>>\\n\" (amacs-shell-cost-string))) "
               "(princ (format \"USAGE<<%S>>\\n\" (plist-get (buffer-local-value (quote amacs-shell-usage) (get-buffer amacs-shell-buffer-name)) :session))) "
               "(amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program, AMACS_MODEL="claude-sonnet-4-5").check()
    mode = run.stdout.split("MODE<<")[1].split(">>")[0]
    assert mode == f" ${2 * TICK_COST:.3f} session · budget ${2 * TICK_COST:.3f}/$5.00"
    usage = run.stdout.split("USAGE<<")[1].split(">>")[0]
    for field in (":input-tokens 2000", ":output-tokens 400", ":cache-read-tokens 10000",
                  ":cache-write-tokens 4000", f":cost {2 * TICK_COST}"):
        assert field in usage, usage
    assert f"(cost-so-far . {2 * TICK_COST})" in (home / "consciousness.el").read_text()


def test_price_table_defcustom_overrides_the_servers(fake, home):
    fake.script(Reply(agent_json("Priced."), usage=USAGE))
    program = ("(setq amacs-price-table '((\"claude-sonnet\" 10 10 10 10))) (amacs-e2e-open) "
               "(amacs-e2e-send \"hi\") "
               "(princ (format \"MODE<<%s>>\\n\" (amacs-shell-cost-string))) "
               "(amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program, AMACS_MODEL="claude-sonnet-4-5").check()
    assert "$0.082 session" in run.stdout  # (1000 + 200 + 2000 + 5000) x $10 per million


def test_budget_limit_stops_the_agent_until_raised(fake, home):
    """The budget refuses the third input; raised, the shell puts that input back at the prompt (not
    sent: the person had typed more there, which goes to the kill ring), and RET sends it."""
    fake.script(Reply(agent_json("One."), usage=USAGE), Reply(agent_json("Two."), usage=USAGE),
                Reply(agent_json("Three, after the raise."), usage=USAGE))
    program = ("(amacs-e2e-open) (amacs-e2e-send \"a\") (amacs-e2e-send \"b\") (amacs-e2e-send \"the third input\") "
               "(with-current-buffer amacs-shell-buffer-name (goto-char (point-max)) (insert \"a draft\")) "
               "(amacs-set-budget 1.0) (amacs-e2e-wait-text \"is back at the prompt\") "
               "(princ (format \"PROMPT<<%s>> KILLED<<%s>>\\n\" "
               "(with-current-buffer amacs-shell-buffer-name (amacs-shell--draft)) (car kill-ring))) "
               "(amacs-e2e-send \"\") (amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program, AMACS_MODEL="claude-sonnet-4-5", AMACS_BUDGET_LIMIT="0.02").check()
    assert "Two." in run.shell and "Three, after the raise." in run.shell
    assert ("Budget spent ($0.0300 of $0.02): the primary agent wanted another model call and was stopped; "
            "raise the limit with M-x amacs-set-budget to go on.") in run.shell
    assert ("The budget limit is now $1.00: your last input, which the budget stopped, is back at the prompt, "
            "not sent (RET sends it); what you had typed there is in the kill ring (C-y).") in run.shell
    assert "PROMPT<<the third input>> KILLED<<a draft>>" in run.stdout
    assert len(fake.requests) == 3
    assert "the third input" in fake.user_texts()[-1]


def test_openai_compatible_backend_streamed(fake, home):
    """AMACS_BACKEND=openai: the same JSON protocol over /v1/chat/completions, streamed."""
    from tests.context_items import eval_result

    fake.script(Reply(agent_json(None, eval="(+ 2 2)"), chunks=6),
                Reply(agent_json("Four, from a local model."), chunks=10))
    run = run_emacs(home, fake.url, "(amacs-e2e-open) (amacs-e2e-send \"2+2?\") (amacs-e2e-finish)",
                    ANTHROPIC_API_KEY="", AMACS_BACKEND="openai", OPENAI_BASE_URL=fake.url + "/v1",
                    AMACS_MODEL="llama-local").check()
    assert [r["path"] for r in fake.requests] == ["/v1/chat/completions"] * 2
    body = fake.requests[0]["body"]
    assert body["stream"] is True and body["model"] == "llama-local"
    assert body["messages"][0]["role"] == "system" and "Response format" in body["messages"][0]["content"]
    assert eval_result(fake.user_texts()[1])["result"] == "4"
    assert run.shell.count("Four, from a local model.") == 1
    assert "(cost-so-far . " in (home / "consciousness.el").read_text()


def test_switching_backend_and_model_mid_session(fake, home):
    """M-x amacs-set-model: the next call goes to the other backend and model; a restart keeps
    them, and a budget set with M-x amacs-set-budget (a restart went back to Emacs's environment)."""
    fake.script(Reply(agent_json("From Claude.")), Reply(agent_json("From the local model.")),
                Reply(agent_json("Still local.")))
    program = ("(amacs-e2e-open) (amacs-e2e-send \"one\") "
               f"(amacs-set-model \"openai\" \"qwen-local\" \"{fake.url}/v1\") (accept-process-output nil 0.3) "
               "(amacs-set-budget 7.5) (accept-process-output nil 0.3) "
               "(amacs-e2e-send \"two\") (amacs-restart) (amacs-e2e-wait #'amacs-live-p \"the new server\") "
               "(amacs-e2e-send \"three\") "
               "(princ (format \"LIMIT=%s\\n\" (plist-get (buffer-local-value (quote amacs-shell-usage) (get-buffer amacs-shell-buffer-name)) :budget-limit))) (amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program, AMACS_BUDGET_LIMIT="3").check()
    assert [(r["path"], r["body"]["model"]) for r in fake.requests] == [
        ("/v1/messages", "claude-sonnet-5-5"), ("/v1/chat/completions", "qwen-local"),
        ("/v1/chat/completions", "qwen-local")]
    assert f"Now using qwen-local on openai at {fake.url}/v1." in run.shell and "From the local model." in run.shell
    assert f"AMACS server restarted: qwen-local on openai at {fake.url}/v1." in run.shell
    assert "Still local." in run.shell
    assert "LIMIT=7.5" in run.stdout


def test_a_new_shell_shows_the_recent_exchanges(fake, home):
    """Session resume: after restarting Emacs, the shell shows the last exchanges above a fresh prompt."""
    fake.script(Reply(agent_json("Answer one.")), Reply(agent_json("Answer two.")))
    run_emacs(home, fake.url, "(amacs-e2e-open) (amacs-e2e-send \"question one\") "
              "(amacs-e2e-send \"question two\") (amacs-e2e-finish)").check()
    run = run_emacs(home, fake.url, "(amacs-e2e-open) (accept-process-output nil 0.3) (amacs-e2e-finish)").check()
    assert run.shell == (";; Resumed: the last exchanges from agent-chat.org (C-c C-l opens it all):\n"
                         "amacs> question one\n\nAnswer one.\n\namacs> question two\n\nAnswer two.\n\n"
                         ";; C-c C-v shows the agent and its subagents; @NAME text talks to one by the name shown there or in the footer while it works.\n"
                         "amacs> ")
    assert len(fake.requests) == 2  # resuming calls no model


def test_add_buffer_puts_the_persons_file_in_the_agents_context(fake, home, tmp_path):
    """Issue 9, RFC v4 §5.2: M-x amacs-add-buffer adds the file to the active thread (``main`` when
    none is) and the agent reads it on its next tick; the shell says what was added."""
    from tests.context_items import parse_context
    from tests.e2e.harness import elisp_string

    src = tmp_path / "notes.py"
    src.write_text("def answer():\n    return 42\n")
    fake.script(Reply(agent_json("Seen it.")))
    program = (f"(amacs-e2e-open) (with-current-buffer (find-file-noselect {elisp_string(str(src))}) "
               "(amacs-add-buffer)) "
               "(amacs-e2e-wait-text \"to thread main\") (amacs-e2e-send \"what is in my file?\") (amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program).check()
    assert f";; Added {src} to thread main: the agent sees it from its next tick." in run.shell
    ctx = parse_context(fake.user_texts()[0])
    assert [t["content"]["id"] for t in ctx["threads"]] == ["main"]
    (entry,) = ctx["buffers"]
    assert "return 42" in entry["content"]
