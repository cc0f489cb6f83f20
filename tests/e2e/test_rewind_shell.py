"""M-x amacs-rewind and M-x amacs-fork from a real shell in batch Emacs (issue 26): the server
rewinds in place, the shell shows the conversation up to there and the ref that keeps the
future; the same input then makes the same request as before (but for the clock); a fork
made from the live server is a home of its own."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.e2e.agent_fakes import run_elisp, say, transcript, who
from tests.e2e.harness import elisp_string, run_emacs
from tests.e2e.test_rewind_session import rewind_elisp
from tests.mcp_servers import hostile_server, write_config
from tests.test_rewind import answer, requests, same

pytestmark = pytest.mark.e2e


def test_rewind_from_the_shell_then_the_same_input_asks_the_same(fake, home, tmp_path):
    fake.respond_with(answer)
    fork = tmp_path / "forked"
    program = f"""
      (amacs-e2e-open)
      (amacs-e2e-send "note the first")
      (amacs-e2e-send "the second")
      (amacs-e2e-send "the third")
      (amacs-fork 1 {elisp_string(str(fork))})
      (let ((conn (amacs-connection-for {elisp_string(str(fork))})))  ; its own shell and server: it answers too
        (amacs-e2e-wait (lambda () (amacs-live-p conn)) "the fork's server")
        (with-current-buffer (amacs-ui-shell (amacs-connection-ui conn))
          (goto-char (point-max))
          (insert "note the fork")
          (comint-send-input))
        (amacs-e2e-wait (lambda () (with-current-buffer (amacs-ui-shell (amacs-connection-ui conn))
                                     (save-excursion (goto-char (point-min))
                                                     (search-forward "answer to note the fork" nil t))))
                        "the fork's reply")
        (princ (format "FORK SHELL %s\n" (buffer-name (amacs-ui-shell (amacs-connection-ui conn)))))
        (amacs-stop-server conn))
      (with-current-buffer amacs-shell-buffer-name  ; point on the past input "the second": the default
        (goto-char (point-min))
        (search-forward (concat amacs-shell-prompt "the second"))
        (backward-char 3)
        (save-excursion (goto-char (point-max)) (insert "half typed"))  ; typed, not sent: the present
        (amacs-shell--save-draft)
        (cl-letf (((symbol-function 'completing-read)
                   (lambda (_prompt _table &optional _pred _req _init _hist def &rest _)
                     (princ (format "DEFAULT %s\n" def)) def))
                  ((symbol-function 'yes-or-no-p) (lambda (&rest _) t)))
          (call-interactively #'amacs-rewind))
        (princ (format "PROMPT %S\nRING %S\n" (amacs-shell--draft) (ring-elements comint-input-ring)))
        (amacs-shell--put-at-prompt ""))
      (amacs-e2e-send "the second")
      (amacs-e2e-finish)"""
    run = run_emacs(home, fake.url, program).check()
    sent = [json.loads(r) for r in requests(fake)]
    assert len(sent) == 5, len(sent)
    assert sent[4] == sent[1]  # after the rewind to tick 1, the second input is asked as it was
    assert "FORK SHELL" in run.stdout and "note the fork" in (fork / "agent-chat.org").read_text()
    assert "DEFAULT the second\n" in run.stdout, run.stdout
    # The person's typing stays at the prompt; M-p offers the inputs up to tick 1 only, the
    # abandoned ones are on the ref with the unsent input saved after tick 1.
    assert 'PROMPT "half typed"\nRING ("note the first")\n' in run.stdout, run.stdout
    ref = re.search(r"refs/amacs/abandoned/\S+?-tick-\d+-to-1", run.stdout + (home / "agent-chat.org").read_text())
    assert ref, run.stdout
    show = lambda rel: subprocess.run(["git", "-C", str(home), "show", f"{ref[0]}:{rel}"],  # noqa: E731
                                      capture_output=True, text=True, check=True).stdout
    assert show("shell-history") == "the second\0\nthe third\0\n"
    assert show("shell-draft") == "half typed"
    assert (home / "shell-history").read_text() == "note the first\0\nthe second\0\n"  # sent again after it
    assert "rewound" in run.shell and "refs/amacs/abandoned/" in run.shell, run.shell
    # The mind goes back; what evals did to Emacs's buffers and files does not, and the shell says so.
    assert "Back to before you typed «the second».  Buffers and files the agent changed" in run.shell, run.shell
    after = run.shell.split("The conversation up to there:")[-1]
    assert "the first" in after and "the third" not in after
    chat = (home / "agent-chat.org").read_text()
    assert "the third" not in chat and "refs/amacs/abandoned/" in chat
    log = subprocess.run(["git", "-C", str(fork), "log", "--format=%s"], capture_output=True, text=True,
                         check=True).stdout
    assert log.splitlines()[:2] == ["[TICK 2][no-thread][calm] «note the fork» — thought about note the fork",
                                    f"[TICK 1][fork] forked from {home} at tick 1"], log
    assert "the second" not in (fork / "agent-chat.org").read_text()


def test_an_input_sent_again_with_m_p_goes_onto_the_abandoned_future_too(fake, home):
    """A newcomer sent an input again with M-p RET, then rewound to before it: the abandoned
    shell-history lacked it (the ring ignores a repeat, and the file was written from the ring),
    though docs/shell.md says every later input moves there.  M-p still offers it once."""
    fake.respond_with(answer)
    program = """
      (amacs-e2e-open)
      (amacs-e2e-send "the capital?")
      (with-current-buffer amacs-shell-buffer-name
        (goto-char (point-max))
        (comint-previous-input 1))
      (amacs-e2e-send "")
      (amacs-e2e-send "help")
      (with-current-buffer amacs-shell-buffer-name
        (princ (format "RING AFTER %S\n" (ring-elements comint-input-ring)))
        (amacs-rewind 1 "the capital?"))
      (amacs-e2e-finish)"""
    run = run_emacs(home, fake.url, program).check()
    assert len(requests(fake)) == 3, run.shell
    assert 'RING AFTER ("help" "the capital?")\n' in run.stdout, run.stdout
    ref = re.search(r"refs/amacs/abandoned/\S+?-tick-3-to-1", (home / "agent-chat.org").read_text())
    assert ref, run.shell
    show = subprocess.run(["git", "-C", str(home), "show", f"{ref[0]}:shell-history"],
                          capture_output=True, text=True, check=True).stdout
    assert show == "the capital?\0\nhelp\0\n", show
    assert (home / "shell-history").read_text() == "the capital?\0\n"


def test_rewind_with_a_live_viewpoint_then_the_same_input_asks_the_same(fake, home):
    """A viewpoint the primary made (agent-viewpoint in its eval) and asks each input
    (agent-consider): after amacs-rewind to tick 2, the third input sent again makes the
    same requests, the primary's and the viewpoint's, as the first time."""

    def model(body):
        me, _kind, _template = who(body)
        msgs = transcript(body)
        if me != "primary":
            return say(f"critic comment {len(msgs)}")
        if "<last-eval-result>" in msgs[-1]:
            return say("heard the critic")
        human = re.findall(r'\\"human\\": \\"([^\\]*)\\"', json.dumps(body["messages"][-1]["content"]))
        if human and human[-1] == "make a critic":
            return run_elisp('(progn (agent-viewpoint "critic" "debater") '
                             '(agent-wait-for (plist-get (agent-consider "is it wise?") :talk-id) :timeout 30))')
        if human and human[-1].startswith("ask"):
            return run_elisp(f'(agent-wait-for (plist-get (agent-consider "{human[-1]}?") :talk-id) :timeout 30)')
        return answer(body)

    fake.respond_with(model)
    program = """
      (amacs-e2e-open)
      (amacs-e2e-send "make a critic")
      (amacs-e2e-send "ask again")
      (amacs-e2e-send "ask more")
      (with-current-buffer amacs-shell-buffer-name
        (goto-char (point-min))
        (search-forward (concat amacs-shell-prompt "ask more"))
        (backward-char 3)
        (cl-letf (((symbol-function 'completing-read)
                   (lambda (_prompt _table &optional _pred _req _init _hist def &rest _) def))
                  ((symbol-function 'yes-or-no-p) (lambda (&rest _) t)))
          (call-interactively #'amacs-rewind)))
      (amacs-e2e-send "")  ; the prompt was empty: the rewind put "ask more" back there, RET sends it
      (amacs-e2e-finish)"""
    run = run_emacs(home, fake.url, program).check()
    sent = requests(fake)
    critic = [i for i, r in enumerate(sent) if "You are viewpoint-critic" in r]
    assert len(critic) == 4, (len(critic), run.shell)
    # Each input's requests: the primary's, the critic's, the primary's (the eval's result).
    first, again = sent[critic[2] - 1:critic[2] + 2], sent[critic[3] - 1:]
    assert len(again) == 3 and not any(a != b for a, b in zip(first, again, strict=True)), same([again], [first])
    assert "rewound" in run.shell


def test_a_rewind_in_the_live_server_moves_a_tool_servers_later_stderr_lines(fake, home):
    """A tool server (a real stdio MCP server, live through the rewind) prints a line on its
    stderr at each input's tool call.  M-x amacs-rewind to before the second input: its log
    (logs/mcp-s.log) holds the first input's line, not the second's or third's, which are on
    the abandoned ref; the line of the call after the rewind, by the same live server, is kept."""
    write_config(home, {"s": hostile_server("chatty")})

    def model(body):
        newest = transcript(body)[-1]
        said = re.findall(r"\b(input \d+)\b", newest)
        if "<last-eval-result>" in newest and '"result"' in newest:
            return say("called")
        return run_elisp(f'(agent-tool "s/say" :text "stderr of {said[-1]}")')

    fake.respond_with(model)
    program = f"""
      (setq amacs-max-steps 6)
      (amacs-e2e-open)
      (amacs-e2e-send "input 1")
      (amacs-e2e-send "input 2")
      (amacs-e2e-send "input 3")
      {rewind_elisp("input 2")}
      (amacs-e2e-send "input 4")
      (amacs-e2e-finish)"""
    run = run_emacs(home, fake.url, program).check()
    log = (home / "logs" / "mcp-s.log").read_text()
    assert "stderr of input 1\n" in log and "stderr of input 4\n" in log, log
    assert "input 2" not in log and "input 3" not in log, log
    ref = re.search(r"refs/amacs/abandoned/\S+", run.shell)
    assert ref, run.shell
    moved = subprocess.run(["git", "-C", str(home), "show", f"{ref[0].rstrip('.;,')}:logs/mcp-s.log"],
                           capture_output=True, text=True, check=True).stdout
    assert "stderr of input 2\n" in moved and "stderr of input 3\n" in moved and "input 1" not in moved, moved
