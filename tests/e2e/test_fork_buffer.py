"""Killing a fork's shell buffer stops that fork's server, once the person says so (a newcomer's
finding: it ran on, unseen, until Emacs exited), and its hub closes with it; the shell of this
Emacs's own home leaves its server running, and so does a fork's whose person says no."""

from __future__ import annotations

import os
import re

import pytest

from tests.e2e.harness import elisp_string, run_emacs
from tests.test_rewind import answer

pytestmark = pytest.mark.e2e


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = open(f"/proc/{pid}/stat").read()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_killing_a_forks_shell_stops_its_server_after_asking(fake, home, tmp_path):
    fake.respond_with(answer)
    forks = [tmp_path / "fork-yes", tmp_path / "fork-no"]
    opened = "".join(f"""
      (amacs-fork 1 {elisp_string(str(fork))})
      (let ((conn (amacs-connection-for {elisp_string(str(fork))})))
        (amacs-e2e-wait (lambda () (amacs-live-p conn)) "the fork's server")
        (princ (format "PID {n} %s\\n" (process-id (amacs-life-process (amacs-connection-life conn)))))
        (amacs-with-connection conn (amacs-hub))
        (let ((asked nil) (hub (amacs-ui-hub (amacs-connection-ui conn))))
          (cl-letf (((symbol-function 'y-or-n-p) (lambda (prompt) (setq asked prompt) {says})))
            (kill-buffer (amacs-ui-shell (amacs-connection-ui conn))))
          (princ (format "ASKED {n} %S\\n" asked))
          (princ (format "LIVE {n} %S\\n" (and (amacs-live-p conn) t)))
          (princ (format "HUB {n} %S\\n" (and (buffer-live-p hub) t)))))""" for n, (fork, says) in
        enumerate(zip(forks, ("t", "nil"), strict=True)))
    program = f"""
      (amacs-e2e-open)
      (amacs-e2e-send "note the first")
      {opened}
      (let ((asked nil))
        (cl-letf (((symbol-function 'y-or-n-p) (lambda (prompt) (setq asked prompt) t)))
          (kill-buffer amacs-shell-buffer-name))
        (princ (format "ASKED OWN %S\\n" asked))
        (princ (format "LIVE OWN %S\\n" (and (amacs-live-p) t))))
      (amacs-stop-server (amacs-connection-for {elisp_string(str(forks[1]))}))
      (amacs-stop-server)
      (kill-emacs 0)"""
    run = run_emacs(home, fake.url, program).check()
    out = run.stdout
    pids = {n: int(p) for n, p in re.findall(r"^PID (\d) (\d+)$", out, re.M)}
    assert set(pids) == {"0", "1"}, out
    assert re.search(r'^ASKED 0 "Stop the AMACS server of \S*/fork-yes too \(y\)', out, re.M), out
    assert "LIVE 0 nil" in out and not alive(pids["0"]), out  # stopped before the buffer was gone
    assert "HUB 0 nil" in out and "HUB 1 t" in out, out  # its hub closed with it; a running server's stays
    assert re.search(r'^ASKED 1 "Stop the AMACS server of \S*/fork-no too', out, re.M), out
    assert "LIVE 1 t" in out, out  # "no": it runs on, until the end of the program stops it
    assert "ASKED OWN nil" in out and "LIVE OWN t" in out, out  # this Emacs's own home: not asked


def test_a_fork_opens_beside_its_homes_shell_wherever_it_was_asked_from(fake, home, tmp_path):
    """M-x amacs-fork from a window that is not the shell's (agent-chat.org, beside the shell) split that
    window: the fork's shell opened beside whatever was current, not beside the shell it was forked from."""
    fake.respond_with(answer)
    fork = tmp_path / "fork"
    program = f"""
      (amacs-e2e-open)
      (amacs-e2e-send "note the first")
      (delete-other-windows)
      (switch-to-buffer amacs-shell-buffer-name)
      (let ((other (split-window nil nil 'below)))
        (set-window-buffer other (get-buffer-create "other"))
        (select-window other))
      (amacs-fork 1 {elisp_string(str(fork))})
      (let* ((conn (amacs-connection-for {elisp_string(str(fork))}))
             (mine (get-buffer-window amacs-shell-buffer-name))
             (its (get-buffer-window (amacs-ui-shell (amacs-connection-ui conn)))))
        (amacs-e2e-wait (lambda () (amacs-live-p conn)) "the fork's server")
        (princ (format "BESIDE %S\\n" (and mine its (eq (window-parent mine) (window-parent its))
                                           (eq (window-next-sibling mine) its))))
        (princ (format "OTHER %S\\n" (and (get-buffer-window "other") t)))
        (amacs-stop-server conn))
      (amacs-stop-server)
      (kill-emacs 0)"""
    out = run_emacs(home, fake.url, program).check().stdout
    assert "BESIDE t" in out and "OTHER t" in out, out
