"""Viewpoints and compulsions tried on the demo model, as a person does (M-:, @NAME, a word).

The demo's script answers every request of a real session here (the fake serves it), with
the prompts the real server sends its subagents."""

from __future__ import annotations

from tests.demo_model import answer
from tests.e2e.agent_fakes import send, session, wait_text
from tests.e2e.harness import run_emacs


def test_on_the_demo_a_compulsion_blocks_only_its_rule_viewpoints_answer_and_their_comments_wake_the_primary(
        fake, home):
    """Was: a compulsion on the demo echoed text, and any non-empty answer blocks, so `eval' was
    blocked to the step limit; a viewpoint answered `You said: .'; the primary woken by the
    viewpoints' comments repeated the person's last word (`task') and started two researchers."""
    fake.respond_with(answer)
    program = session(
        '(agent-compulsion "spawn-limiter")',
        send("eval"),
        send("spawn"),
        wait_text("ended (the lines above say how)."),
        '(amacs-e2e-wait (lambda () (not amacs-shell-busy)) "the woken turns to end")',
        '(agent-viewpoint "skeptic" "debater")',
        send("task"),
        send("@skeptic why is the sky blue?"),
        wait_text("[viewpoint-skeptic] I doubt it"),  # a talk is answered after the prompt is back
        '(agent-consider "Is Emacs an operating system?")',
        wait_text("The viewpoints answered"),
        '(amacs-e2e-wait (lambda () (not amacs-shell-busy)) "the woken turn to end")')
    shell = run_emacs(home, fake.url, program, timeout=240).check().shell
    assert "Done: that was the eval above" in shell and "blocked" not in shell.split("spawn")[0], shell
    spawned = shell.split("amacs> spawn", 1)[1].split("amacs> task", 1)[0]
    assert spawned.count("▸ eval") == 4, spawned
    assert ("That ▸ eval did not run: blocked by compulsion compulsion-1 (spawn-limiter): 3 subagents already "
            "started in this turn; use their results before starting more. A compulsion") in spawned, spawned
    # The researchers' ends wake the primary: it says so, not the answer to `spawn' again.
    assert spawned.count("That ▸ eval did not run") == 1 and " ended (the lines above say how)." in spawned, spawned
    assert "I'll ask two researchers." in shell and "Done: both researchers answered" in shell, shell
    asked = shell.split("amacs> @skeptic why is the sky blue?", 1)[1]
    assert "[viewpoint-skeptic] I doubt it, on \u201cwhy is the sky blue?\u201d" in asked, asked
    woken = shell.split("viewpoint-skeptic (debater) said:", 1)[1]
    assert woken.startswith(" [skeptic] I doubt it, on \u201cIs Emacs an operating system?\u201d"), woken
    assert "The viewpoints answered (1; their lines above)" in woken, woken
    assert "I'll ask two researchers." not in woken, woken
