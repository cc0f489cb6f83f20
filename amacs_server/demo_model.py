"""The demo model: a scripted Messages API on 127.0.0.1, for trying AMACS with no key.

``./amacs --demo`` (or ``M-x amacs-demo``) sets ``AMACS_DEMO=1``; the AMACS server then
serves this model itself, in a thread, from its start to its stop, and talks to it over
real HTTP with the real SDK, as it talks to Claude.  It answers by the words the person
types (``help`` lists them) in about a second, streamed slowly enough to interrupt, and
shows in its first minute what AMACS does: a streamed reply, an eval, a thread, subagents
and an interrupt.  Nothing is paid.

By hand, for another Emacs or a script: ``python -m amacs_server.demo_model`` prints its URL;
then ``ANTHROPIC_BASE_URL=<url> ANTHROPIC_API_KEY=demo ./amacs``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .config import DEMO_MODEL

DEMO_NOTE = ("Demo model: scripted answers served by the AMACS server on this machine, no key and nothing "
             "paid. Type help and press RET to see what it shows.")
# How to leave the demo, told after DEMO_NOTE: a person who has a key is not told to set one.
DEMO_LEAVE = "For real work set an API key (docs/configuration.md), then M-x amacs-set-model leaves the demo."
DEMO_LEAVE_KEYED = "For real work M-x amacs-set-model leaves the demo: your API key is set."
# The demo chosen again at a start because the home's last tick was on it (config.demo_as_left),
# which it is only with no key set.
DEMO_AGAIN_NOTE = ("On the demo model again, as when this home last stopped (no API key is set); to leave it, set "
                   "ANTHROPIC_API_KEY and M-x amacs-restart for Claude, or M-x amacs-set-model.")


def demo_note(keyed: bool) -> str:
    """What the greeting says of the demo chosen at this start; KEYED: an API key is set."""
    return f"{DEMO_NOTE} {DEMO_LEAVE_KEYED if keyed else DEMO_LEAVE}"


@dataclass(frozen=True)
class DemoReply:
    """One answer: TEXT (the agent's JSON) after DELAY seconds, streamed in CHUNKS deltas
    CHUNK_DELAY seconds apart."""

    text: str
    chunks: int = 10
    chunk_delay: float = 0.02
    delay: float = 0.0


def agent_json(reply: str | None = None, *, eval: str | None = None, mood: str = "focused",  # noqa: A002
               confidence: float = 0.8, monologue: str) -> str:
    """A valid agent response as JSON text."""
    return json.dumps({"eval": eval, "reply": reply, "mood": mood, "confidence": confidence,
                       "monologue": monologue}, ensure_ascii=False)


HELP = """I am AMACS's demo model: scripted, running inside the AMACS server on this machine, \
no key and nothing paid. Type one of these words and press RET:

- =eval=: I evaluate elisp in your Emacs; the ▸ eval line shows it (TAB on it: the form and its result)
- =note=: I add a line to a buffer named notes (the ▸ changed line after it shows the diff)
- =todo=: I write a new file, amacs-demo-todo-….org in your temporary folder
- =thread=: I open a thread, a topic of work the hub shows (C-c C-v)
- =task=: I start two subagents; a line each shows while they work
- =slow=: a long answer: press C-c C-c while it streams to interrupt it
- =steps=: a turn of three evals and a reply, four ticks; the header counts them
- =spawn=: a turn of four evals, each starting a researcher
- =long=, =markdown=, =error=, =loop=: a long reply, Markdown shown as org, a failing eval, \
an eval that never ends (C-g stops it)

Viewpoints and compulsions are agents you add with M-: (eval-expression). \
=M-: (agent-viewpoint "skeptic" "debater")= adds a viewpoint: =@skeptic why?= asks it, \
=M-: (agent-consider "Is Emacs an OS?")= asks every viewpoint, and their answers wake me. \
=M-: (agent-compulsion "spawn-limiter")= watches my actions: then =spawn=, and it blocks \
the fourth researcher. My compulsions block only what a script can tell (spawn-limiter's \
rule) and are silent otherwise: judging by a skill's words needs a real model.

Then M-x amacs-rewind takes me back to before any of your inputs, and M-x amacs-fork \
copies me into a new home beside this one. Now I open a thread for this tour: the \
▸ eval line below is that."""

LONG = "\n".join(f"Line {i}: a long reply scrolls the window, and the prompt must stay in view." for i in range(1, 61))

MARKDOWN = """## A heading in Markdown

Here is **bold** text, `inline code` and a list:

* first item
* second item

```elisp
(defun demo-square (x)
  "Return X squared."
  (* x x))
```

| name | value |
|------|-------|
| a    | 1     |
"""

# Words answered with text alone.
SCRIPT: dict[str, DemoReply] = {
    "long": DemoReply(agent_json(LONG, monologue="a long reply, to scroll"), chunks=60, chunk_delay=0.01),
    "slow": DemoReply(agent_json("This reply is slow, so you can interrupt it with C-c C-c: "
                                 + " ".join(f"word{i}" for i in range(60)) + ".",
                                 monologue="a slow reply, to interrupt"), chunks=60, chunk_delay=0.1),
    "markdown": DemoReply(agent_json(MARKDOWN, monologue="a reply in Markdown"), chunks=20, chunk_delay=0.02),
}
HELP_WORDS = ("help", "hi", "hello", "hey", "tour", "what can you do")  # the shell's first line suggests the last


def words(text: str) -> str:
    """TEXT as the demo matches it: lower case, one space between words, no punctuation at its
    end (``Note.``, ``What can you do?``).  An input that asks what it can do (``hello, what can
    you do?``: the greeting's suggestion in the form a person types it) is ``what can you do``."""
    said = " ".join(text.lower().split()).rstrip(" .!?")
    return "what can you do" if re.search(r"\bwhat (?:else )?can you do\b", said) else said

TOUR_THREAD = ('(condition-case nil (agent-create-thread "demo-tour" :concern "trying AMACS") '
               '(error "the thread demo-tour is open already"))')
NOTE = ('(with-current-buffer (get-buffer-create "notes") (goto-char (point-max)) '
        '(insert "- tried AMACS\'s demo\\n") (buffer-name))')
TODO = ('(with-current-buffer (find-file-noselect (make-temp-file "amacs-demo-todo-" nil ".org")) '
        '(goto-char (point-max)) (insert "* TODO try AMACS\\n") (save-buffer) (buffer-name))')

# Words answered with an eval, then (when its result comes back) with the text after it.
EVALS: dict[str, tuple[str, str]] = {
    "eval": ("(+ 2 2)", "Done: that was the eval above (TAB on its line shows it)."),
    "2+2": ("(+ 2 2)", "Done: that was the eval above (TAB on its line shows it)."),
    "what is 2+2": ("(+ 2 2)", "Done: that was the eval above (TAB on its line shows it)."),
    "error": ("(car 1)", "That eval failed, as it was meant to: its ▸ eval line above shows the error "
                         "(TAB on it shows it whole)."),
    "loop": ("(while t)", "That eval never ended and was stopped (by C-g or at the time limit): its ▸ eval "
                          "line above says which (TAB on it shows it whole)."),
    "todo": (TODO, "Done: the file named on the ▸ changed line below has a new line. RET on the ▸ changed line below "
                   "shows the diff."),
    "note": (NOTE, "Done: the buffer notes has a new line. RET on the ▸ changed line below shows the diff "
                   "and offers to undo it (C-x b notes RET shows the buffer)."),
    "thread": ('(condition-case nil (agent-create-thread "demo-notes" :concern "notes from the demo") '
               '(error "the thread demo-notes is open already"))',
               "Done: the hub (C-c C-v) lists the thread under Threads."),
}
SPAWNS = 4  # the researchers "spawn" starts, one an eval: spawn-limiter blocks the fourth
SPAWN_LIMIT = 3  # spawn-limiter's rule: subagents a turn may start
_SPAWN = re.compile(r"\(agent-(?:task|viewpoint|compulsion)\b")
_SUBAGENT = re.compile(r"You are (\S+), a (task|viewpoint|compulsion) \(template (\S+)\)")
FAILING = {"error", "loop"}  # the words whose eval fails on purpose: their reply says so already
STEPS = 3  # the ticks of the turn that "steps" starts


def _user_texts(body: dict[str, Any]) -> list[str]:
    """The text of every user message of a request BODY, in order."""
    texts = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
        if message.get("role") == "user" and isinstance(content, str):
            texts.append(content)
    return texts


def last_human(body: dict[str, Any]) -> str:
    """The person's newest input in a request body (the chat section's pending item)."""
    found = re.findall(r'"human": ("(?:[^"\\]|\\.)*")', "\n".join(_user_texts(body)))
    return str(json.loads(found[-1])) if found else ""


def _newest_user_text(body: dict[str, Any]) -> str:
    messages = body.get("messages", [])
    content = messages[-1].get("content") if messages else ""
    if isinstance(content, list):
        content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content)


def has_eval_result(body: dict[str, Any]) -> bool:
    """Whether the newest user message carries a result of the agent's own eval."""
    return "<last-eval-result>" in _newest_user_text(body)


def eval_failure(body: dict[str, Any]) -> str | None:
    """The error of the agent's own eval whose result the newest message carries (None: it ran)."""
    text = _newest_user_text(body)
    start = text.rfind("<last-eval-result>")
    if start < 0:
        return None
    section = text[start + len("<last-eval-result>"):].split("</last-eval-result>", 1)[0]
    try:
        shown = json.loads(section)
    except ValueError:
        return None
    result = shown.get("content", {}).get("lastEvalResult") if isinstance(shown, dict) else None
    if not isinstance(result, dict) or result.get("success", True):
        return None
    return str(result.get("error") or "it did not run to its end")


def _step_done(body: dict[str, Any]) -> int:
    """The step of a "steps" turn whose eval result the newest message carries (0: none)."""
    found = re.findall(r"demo step (\d+) of", _newest_user_text(body))
    return int(found[-1]) if found and has_eval_result(body) else 0


def compulsion_answer(template: str, body: dict[str, Any]) -> DemoReply:
    """A compulsion's answer: "" (nothing to say, nothing blocked) unless what it watches breaks
    its rule as a script can tell: spawn-limiter counts the subagents started since the person
    last spoke and blocks the fourth.  Any other rule is words only a real model can judge."""
    reason = ""
    if template == "spawn-limiter":
        started, newest = 0, ""
        for part in re.split(r"(?=\[before (?:model call|action)\])", "\n".join(_user_texts(body))):
            if part.startswith("[before model call]") and "The person said" in part:
                started = 0
            elif part.startswith("[before action]"):
                newest = part
                started += len(_SPAWN.findall(part.split("\n\n", 1)[0]))
        if started > SPAWN_LIMIT and _SPAWN.search(newest.split("\n\n", 1)[0]):
            reason = (f"{SPAWN_LIMIT} subagents already started in this turn; use their results before "
                      "starting more.")
    return DemoReply(agent_json(reason, monologue="a rule broken: block it" if reason else "nothing to block"),
                     chunks=1)


def viewpoint_answer(name: str, body: dict[str, Any]) -> DemoReply:
    """A viewpoint's answer to the question it was asked (the newest ``[WHO] text`` line to it)."""
    newest = _newest_user_text(body)
    texts = [newest]  # what it was told, as plain text or as an item's JSON string
    for quoted in re.findall(r'"((?:[^"\\]|\\.)*)"', newest):
        try:
            texts.append(json.loads(f'"{quoted}"'))
        except ValueError:
            continue
    asked = [found for text in texts for found in re.findall(r"^\[(?!system\])[^\]]+\] (.+)$", text, re.M)]
    question = asked[0].strip() if asked else "the question"
    side = {"pro": "Yes", "optimist": "Yes", "con": "No", "skeptic": "I doubt it"}.get(name.lower(), "It depends")
    return DemoReply(agent_json(
        f"{side}, on \u201c{question}\u201d: as the {name} side I would argue it in two or three sentences. "
        "(The demo model scripts this answer; a real model argues it.)", monologue=f"answer as {name}"),
        chunks=4, delay=1.0)


def events_answer(body: dict[str, Any]) -> DemoReply | None:
    """The primary woken by events with no new input (its viewpoints' comments on agent-consider,
    subagents that ended while it did not wait for them): it answers them, not the person's last
    word again.  A `task' turn's own wake-up (it waits for its researchers) is the script's."""
    newest = _newest_user_text(body)
    if "<events>" not in newest or '"human":' in newest:
        return None
    section = newest.split("<events>", 1)[1].split("</events>", 1)[0]
    comments: list[str] = []
    ended: list[str] = []
    for line in section.splitlines():
        try:
            event = json.loads(line).get("content", {})
        except (ValueError, AttributeError):
            continue
        if not isinstance(event, dict):
            continue
        if event.get("source") == "consider":
            comments += [str(c) for c in (event.get("content") or {}).get("comments", [])]
        elif str(event.get("source", "")).startswith("task-"):
            ended.append(str(event["source"]))
    if comments:
        return DemoReply(agent_json(f"The viewpoints answered ({len(comments)}; their lines above). A real model "
                                    "would weigh them; the demo only shows the debate.",
                                    monologue="viewpoints answered: say so"))
    if ended and words(last_human(body)) != "task":
        return DemoReply(agent_json(f"{', '.join(ended)} ended (the lines above say how).",
                                    monologue="subagents ended: say so"))
    return None


def answer(body: dict[str, Any]) -> DemoReply:
    """The scripted answer to the request BODY."""
    system = body.get("system") or ""
    system_text = system if isinstance(system, str) else " ".join(b.get("text", "") for b in system)
    subagent = _SUBAGENT.search(system_text)
    if subagent and subagent.group(2) == "compulsion":
        return compulsion_answer(subagent.group(3), body)
    if subagent and subagent.group(2) == "viewpoint":
        return viewpoint_answer(subagent.group(1).removeprefix("viewpoint-"), body)
    if subagent:  # a task: slow, so its line is seen
        return DemoReply(agent_json("The researcher found three sources.", monologue="answer my task"),
                         chunks=1, delay=3.0)
    woken = events_answer(body)
    if woken is not None:
        return woken
    human = words(last_human(body))
    after_eval = has_eval_result(body)
    if human == "task" and after_eval:
        if '"error": "the task was' in _newest_user_text(body):  # a task's result is an error: cancelled, ...
            return DemoReply(agent_json("Not both: a researcher did not answer (its ✗ line above says why); "
                                        "a ✓ line is an answer. In the hub (C-c C-v), RET on a subagent's "
                                        "line shows its transcript.", monologue="a researcher failed: say so"))
        return DemoReply(agent_json("Done: both researchers answered (the ✓ lines above). In the hub "
                                    "(C-c C-v), RET on a subagent's line shows its transcript.",
                                    monologue="both researchers answered"))
    if human == "task":
        return DemoReply(agent_json("I'll ask two researchers.", eval=(
            '(agent-wait-for (list (plist-get (agent-task "researcher" "Find sources on A") :talk-id) '
            '(plist-get (agent-task "researcher" "Find sources on B") :talk-id)))'),
            monologue="two researchers at once, then wait for both"), chunks=6, chunk_delay=0.02)
    if human == "steps":
        step = _step_done(body) + 1 if after_eval else 1
        if step <= STEPS:
            return DemoReply(agent_json(None, eval=f'(format "demo step {step} of {STEPS}")',
                                        monologue=f"step {step}"), chunks=4, delay=1.0)
        return DemoReply(agent_json(f"Done in {STEPS + 1} ticks: one per eval, and this reply.",
                                    monologue=f"all {STEPS} steps done: say so"))
    if human == "spawn":
        failed = eval_failure(body) if after_eval else None
        if failed is not None:
            return DemoReply(agent_json(f"That ▸ eval did not run: {failed.rstrip('.')}. A compulsion held it back; "
                                        "the researchers started before it are at work.",
                                        monologue="a spawn was blocked: say so"))
        found = re.findall(r"demo spawn (\d+) of", _newest_user_text(body)) if after_eval else []
        step = int(found[-1]) + 1 if found else 1 if not after_eval else SPAWNS + 1
        if step <= SPAWNS:
            return DemoReply(agent_json(None, eval=(f'(progn (agent-task "researcher" "Find source {step}") '
                                                    f'"demo spawn {step} of {SPAWNS}")'),
                                        monologue=f"start researcher {step}"), chunks=4)
        return DemoReply(agent_json(f"Done: {SPAWNS} researchers started, one an eval (the hub shows them).",
                                    monologue="all researchers started: say so"))
    if human in HELP_WORDS:
        if after_eval:
            return DemoReply(agent_json("The hub (C-c C-v) shows the thread, and everything else I hold.",
                                        monologue="the tour's thread is open: point to the hub"))
        return DemoReply(agent_json(HELP, eval=TOUR_THREAD, monologue="list what I show; open a thread for the tour"),
                         chunks=20, chunk_delay=0.03)
    failed = eval_failure(body) if after_eval else None
    if human in EVALS:
        form, then = EVALS[human]
        if not after_eval:
            return DemoReply(agent_json("Let me do that in Emacs.", eval=form, monologue=f"do {human} in Emacs"),
                             chunks=8, chunk_delay=0.02)
        if failed is not None and human not in FAILING:
            return DemoReply(agent_json(f"That did not happen: {failed}. Nothing was changed "
                                        "(TAB on the ▸ eval line above shows the form).",
                                        monologue="the eval failed: say nothing changed"))
        return DemoReply(agent_json(then, monologue="the eval's result is back: say what it did"))
    if after_eval:
        return DemoReply(agent_json("Done: that was the eval above (TAB on its line shows it).",
                                    monologue="the eval's result is back: say what it did"))
    said = last_human(body)
    return SCRIPT.get(human) or DemoReply(agent_json(
        f"You said: {said}{'' if said.rstrip()[-1:] in ('.', '?', '!') else '.'} "
        "(I am the demo model: =help= lists what I can show.)", monologue="not a word I know: echo it, point to help"))


# The Messages API, as much of it as the AMACS server asks of the demo.

def _usage(output_tokens: int) -> dict[str, int]:
    return {"input_tokens": 100, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def split(text: str, parts: int) -> list[str]:
    """TEXT in PARTS pieces of about one size (the deltas of a streamed answer)."""
    if parts <= 1 or len(text) <= 1:
        return [text]
    size = max(1, -(-len(text) // parts))
    return [text[i:i + size] for i in range(0, len(text), size)]


class SseWriter(BaseHTTPRequestHandler):
    """An HTTP/1.1 handler that answers in JSON, or streams server-sent events in chunks: what a
    model server's answer is made of (the demo model's, and the tests' fake model's)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        pass

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, *, cache_control: bool = True) -> None:
        """Send the headers of a chunked event stream (then its :meth:`_chunk` calls, and an empty one)."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        if cache_control:
            self.send_header("cache-control", "no-cache")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, name: str, payload: dict[str, Any]) -> None:
        self._chunk(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())


class _Handler(SseWriter):
    def do_GET(self) -> None:
        # No Models API: AMACS then assumes what a model accepts, as for any server without one.
        self._send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "no such route"}})

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path.rstrip("/") != "/v1/messages" or not isinstance(body, dict):
                self._send_json(404, {"type": "error", "error": {"type": "not_found_error",
                                                                  "message": f"no route {self.path}"}})
                return
            reply = answer(body)
            time.sleep(reply.delay)
            if body.get("stream"):
                self._stream(body, reply)
            else:
                self._send_json(200, self._message(body, reply.text, len(reply.text) // 4))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the person interrupted: the client closed its connection mid-answer

    def _message(self, body: dict[str, Any], text: str, output_tokens: int) -> dict[str, Any]:
        return {"id": "msg_demo", "type": "message", "role": "assistant", "model": body.get("model", DEMO_MODEL),
                "content": [{"type": "text", "text": text}] if text else [],
                "stop_reason": "end_turn", "stop_sequence": None, "usage": _usage(output_tokens)}

    def _stream(self, body: dict[str, Any], reply: DemoReply) -> None:
        self._start_stream()
        start = self._message(body, "", 1)
        start["content"] = []
        self._event("message_start", {"type": "message_start", "message": start})
        self._event("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "text", "text": ""}})
        for piece in split(reply.text, reply.chunks):
            self._event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": piece}})
            time.sleep(reply.chunk_delay)
        self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
        self._event("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                      "usage": {"output_tokens": len(reply.text) // 4}})
        self._event("message_stop", {"type": "message_stop"})
        self._chunk(b"")


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class DemoModel:
    """The demo model's HTTP server on 127.0.0.1 and a free port, served from a daemon thread."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="demo-model", daemon=True)

    @property
    def base_url(self) -> str:
        """The URL to give the Anthropic SDK (``ANTHROPIC_BASE_URL``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> DemoModel:
        """Serve in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the port."""
        self._server.shutdown()
        self._server.server_close()


def main() -> None:
    """Serve until interrupted, the URL printed first."""
    demo = DemoModel().start()
    print(demo.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    demo.stop()


if __name__ == "__main__":
    main()
