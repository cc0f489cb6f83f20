"""Prompt-cache share over a realistic 20-turn session (issue 10, PROMPT-CACHE row).

The real server with batch Emacs (tests/e2e/harness.py) against the fake
Anthropic API (tests/fake_anthropic.py); batch Emacs is fine here: this
measures bytes, not time.  The session: 20 turns of the person with replies of
40-300 words, evals (and their results on the next tick), scratchpad notes,
a note in memory, two threads created and a switch between them.

For each request, from the fake's log:
- ``before_bp``: the share of its input (characters of every text block, the
  system prompt included) that lies before its last ``cache_control``
  breakpoint;
- ``cached``: the share that lies before its last breakpoint AND is
  byte-identical to the previous request at one of the previous request's
  breakpoints (what a prompt cache can serve: a prefix written at a breakpoint
  and read again);
- ``identical``: before the last breakpoint and equal, character by
  character, to the start of the previous request (an upper bound).
Steady state: the mean over requests 6.. (the first ticks write the cache).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import elisp_string, run_emacs  # noqa: E402
from tests.fake_anthropic import FakeAnthropic, Reply  # noqa: E402

WORDS = ("the kettle boils water faster when the lid is on and the element is clean so descale it "
         "with citric acid every month then rinse twice before you make tea again").split()


def words(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i) % len(WORDS)] for i in range(n))


def answer(reply: str | None, *, eval: str | None = None, note: tuple[str, str | None, str] | None = None,  # noqa: A002
           monologue: str = "thinking") -> Reply:
    body: dict[str, Any] = {"eval": eval, "reply": reply, "mood": "focused", "confidence": 0.8,
                            "monologue": monologue}
    if note:
        body["scratchpad"] = {"heading": note[0], "thread": note[1], "content": note[2]}
    return Reply(json.dumps(body))


def session() -> tuple[list[str], list[Reply]]:
    """The person's 20 inputs and the model's replies, in order."""
    inputs, replies = [], []
    for turn in range(1, 21):
        inputs.append(f"turn {turn}: {words(12 + turn % 5 * 6, turn)}?")
        n = 40 + (turn * 37) % 260
        if turn == 3:
            replies.append(answer(None, eval='(agent-create-thread "kettle" :concern "Descale the kettle")'))
        elif turn == 12:
            replies.append(answer(None, eval='(agent-create-thread "blog" :concern "Write about tea")'))
            replies.append(answer(None, eval='(agent-switch-thread "blog")'))
        elif turn == 8:
            replies.append(answer(None, eval='(agent-memory-create "tea-notes" "green tea at 80 C")'))
        elif turn % 3 == 0:
            replies.append(answer(None, eval=f"(+ {turn} {turn})", monologue=f"computing {turn}"))
        elif turn % 4 == 0:
            replies.append(answer(None, eval="(buffer-list)", monologue="looking at buffers"))
        note = (f"Note {turn}", None if turn % 2 else "kettle", words(30, turn)) if turn % 5 == 0 else None
        replies.append(answer(words(n, turn), note=note, monologue=f"answered turn {turn}"))
    return inputs, replies


def blocks(body: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(role, text, has a breakpoint) for every text block, the system prompt first."""
    out = []
    system = body.get("system") or []
    for b in system if isinstance(system, list) else [{"text": system}]:
        out.append(("system", b["text"], "cache_control" in b))
    for m in body["messages"]:
        content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        for b in content:
            out.append((m["role"], b.get("text", ""), "cache_control" in b))
    return out


def shares(prev: list[tuple[str, str, bool]] | None, cur: list[tuple[str, str, bool]]) -> dict[str, float]:
    total = sum(len(t) for _, t, _ in cur) or 1
    last = max((i for i, b in enumerate(cur) if b[2]), default=-1)
    before = sum(len(t) for _, t, _ in cur[: last + 1])
    cached = identical = 0
    if prev is not None:
        run = 0
        for i in range(min(len(prev), last + 1)):
            if (prev[i][0], prev[i][1]) != (cur[i][0], cur[i][1]):
                a, b = prev[i][1], cur[i][1]
                k = 0
                while k < min(len(a), len(b)) and a[k] == b[k]:
                    k += 1
                identical = run + k
                break
            run += len(cur[i][1])
            if prev[i][2]:
                cached = run
            identical = run
    return {"total_chars": total, "before_bp": before / total, "cached": cached / total,
            "identical": identical / total}


def main() -> None:
    inputs, replies = session()
    fake = FakeAnthropic().start()
    try:
        fake.script(*replies)
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp) / "agent"
            program = ("(setq amacs-max-steps 5) (amacs-e2e-open) "
                       + " ".join(f"(amacs-e2e-send {elisp_string(t)})" for t in inputs) + " (amacs-e2e-finish)")
            run_emacs(home, fake.url, program, timeout=600).check()
        requests = [r["body"] for r in fake.requests]
    finally:
        fake.stop()
    rows, prev = [], None
    for i, body in enumerate(requests):
        cur = blocks(body)
        rows.append({"request": i + 1, **shares(prev, cur)})
        prev = cur
    steady = rows[5:]
    result = {
        "requests": len(rows),
        "steady_cached_mean": round(statistics.mean(r["cached"] for r in steady), 4),
        "steady_identical_mean": round(statistics.mean(r["identical"] for r in steady), 4),
        "steady_before_bp_mean": round(statistics.mean(r["before_bp"] for r in steady), 4),
        "session_cached_chars_share": round(sum(r["cached"] * r["total_chars"] for r in rows)
                                            / sum(r["total_chars"] for r in rows), 4),
        "per_request": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in rows],
    }
    for r in rows:
        print(f"req {r['request']:2d} chars {r['total_chars']:7d} before_bp {r['before_bp']:.2f} "
              f"cached {r['cached']:.2f} identical {r['identical']:.2f}")
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_cache.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "per_request"}, indent=2))


if __name__ == "__main__":
    main()
