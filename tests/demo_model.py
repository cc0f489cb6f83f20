"""A scripted model for trying the shell by hand, without an API key.

    .venv/bin/python -m tests.demo_model          # prints its URL; leave it running
    ANTHROPIC_BASE_URL=<that URL> ANTHROPIC_API_KEY=demo ./amacs

It speaks the real Messages API (the fake in ``tests/fake_anthropic.py``) and
answers by what you type: ``help`` lists the words it knows.  Replies stream
slowly enough to type while they arrive.  Tests use it too.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from tests.fake_anthropic import FakeAnthropic, Reply, agent_json

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

SCRIPT: dict[str, tuple[str, dict[str, Any]]] = {
    "help": ("I know: 2+2, long, slow, markdown, eval, error, todo, loop, task, help.", {}),
    "long": (LONG, {"chunks": 60, "chunk_delay": 0.01}),
    "slow": ("This reply is slow: " + " ".join(f"word{i}" for i in range(60)) + ".",
             {"chunks": 60, "chunk_delay": 0.1}),
    "markdown": (MARKDOWN, {"chunks": 20, "chunk_delay": 0.02}),
}
SCRIPT["what can you do?"] = SCRIPT["what can you do"] = SCRIPT["help"]  # the shell's first line suggests it


def last_human(body: dict[str, Any]) -> str:
    """The person's newest input in a request body (the chat section's pending item)."""
    texts = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
        if message.get("role") == "user" and isinstance(content, str):
            texts.append(content)
    found = re.findall(r'"human": ("(?:[^"\\]|\\.)*")', "\n".join(texts))
    return json.loads(found[-1]) if found else ""


def has_eval_result(body: dict[str, Any]) -> bool:
    """Whether the newest user message carries a result of the agent's own eval."""
    messages = body.get("messages", [])
    content = messages[-1].get("content") if messages else ""
    if isinstance(content, list):
        content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    return "<last-eval-result>" in str(content)


def answer(body: dict[str, Any]) -> Reply:
    """The scripted answer to the request BODY."""
    system = body.get("system") or ""
    system_text = system if isinstance(system, str) else " ".join(b.get("text", "") for b in system)
    if re.search(r"You are \S+, a task", system_text):  # a subagent: slow, so its line is seen
        return Reply(agent_json("The researcher found three sources."), delay=3.0)
    human = last_human(body).strip().lower()
    if human == "task" and not has_eval_result(body):
        return Reply(agent_json("I'll ask two researchers.", eval=(
            '(agent-wait-for (list (plist-get (agent-task "researcher" "Find sources on A") :talk-id) '
            '(plist-get (agent-task "researcher" "Find sources on B") :talk-id)))')), chunks=6, chunk_delay=0.02)
    after_eval = has_eval_result(body)
    if human in ("eval", "2+2", "what is 2+2?", "error", "todo", "loop") and not after_eval:
        form = {"eval": "(+ 2 2)", "2+2": "(+ 2 2)", "what is 2+2?": "(+ 2 2)",
                "error": "(car 1)", "loop": "(while t)",
                "todo": '(with-current-buffer (find-file-noselect "/tmp/amacs-demo-todo.org") '
                        '(goto-char (point-max)) (insert "* TODO try AMACS\\n") (save-buffer) (buffer-name))'}[human]
        return Reply(agent_json("Let me check in Emacs.", eval=form), chunks=8, chunk_delay=0.02)
    if after_eval:
        return Reply(agent_json("Done: that was the eval above (TAB on its line shows it)."),
                     chunks=10, chunk_delay=0.02)
    text, opts = SCRIPT.get(human, (f"You said: {last_human(body)}", {"chunks": 10, "chunk_delay": 0.02}))
    return Reply(agent_json(text), **opts)


def main() -> None:
    """Serve until interrupted."""
    fake = FakeAnthropic(default=answer).start()
    print(fake.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    fake.stop()


if __name__ == "__main__":
    main()
