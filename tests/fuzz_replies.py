"""Hostile and broken model replies, generated from a seed (issue 12: the fuzz suite).

Each case is the assistant text of one model call: valid responses carrying
hostile values or hostile elisp, and invalid ones (mutated JSON, wrong types,
deep nesting, surrogates, NULs).  The same seed gives the same cases, so a
failure names a case that can be replayed: ``cases(seed)[i]``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

# Elisp an agent might send, meant or not: errors, a loop, input it cannot get,
# results that cannot be printed or are huge, a quit, output to stdout.
HOSTILE_ELISP = (
    '(error "boom")',
    "(signal 'wrong-type-argument '(x))",
    "(car 1)",
    "(throw 'nowhere 1)",
    "(keyboard-quit)",
    "(while t)",
    '(read-string "Your password: ")',
    "(read-key)",
    "(y-or-n-p \"Delete everything? \")",
    "(make-string 2000000 ?x)",
    "(current-buffer)",
    "(make-marker)",
    "(make-hash-table)",
    "(symbol-function 'car)",
    "(lambda (x) x)",
    "(let ((x (list 1 2))) (setcdr (cdr x) x) x)",
    "(string #xd800)",
    '(concat "a" (string 0) "b")',
    "(make-bool-vector 3 t)",
    "(list 1.0e+INF 0.0e+NaN)",
    "(princ \"to stdout\")",
    "(message \"%s\" (make-string 5000 ?m))",
    ")",
    "(",
    '"unterminated',
    "#<buffer x>",
    "(progn",
    "",
    "   ",
    "(setq amacs-current-agent \"task-99\")",
)

HOSTILE_TEXT = (
    "\ud800",
    "\udfff half",
    "nul\x00inside",
    "\x1b[2J\x1b[Hterminal escape",
    "\u202eright-to-left override",
    "* fake org heading\n** another\n#+BEGIN_SRC elisp\n(+ 1 1)\n",
    "[[file:/etc/passwd][link]]",
    "x" * 200_000,
    "emoji 🤔🧪" * 100,
    "\r\n\r\ncarriage returns\r",
    "tabs\t\t\tand\vvertical",
)

HOSTILE_NUMBERS = ("1e400", "-1e400", "NaN", "Infinity", "-0", "1" + "0" * 400, "0.5e-400", '"0.5"', "true", "null", "[]")


@dataclass(frozen=True)
class Case:
    """One model reply: its text, what kind of trouble it is, and whether it parses."""

    text: str
    kind: str


def _valid(rng: random.Random, **over: object) -> dict[str, object]:
    data: dict[str, object] = {"mood": "calm", "confidence": round(rng.random(), 2),
                               "monologue": "fuzzing", "reply": "ok", "eval": None}
    data.update(over)
    return data


def _mutate(rng: random.Random, text: str) -> str:
    """TEXT with a few characters deleted, duplicated or replaced, or cut off."""
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        if not chars:
            break
        i = rng.randrange(len(chars))
        op = rng.randrange(4)
        if op == 0:
            del chars[i]
        elif op == 1:
            chars.insert(i, chars[i])
        elif op == 2:
            chars[i] = rng.choice('{}[]",:\\ \x00')
        else:
            chars = chars[: i]
    return "".join(chars)


def cases(seed: int, n: int) -> list[Case]:
    """N cases from SEED, every kind in turn, the values drawn from the seed."""
    rng = random.Random(seed)
    makers = [
        lambda: Case(json.dumps(_valid(rng, eval=rng.choice(HOSTILE_ELISP), reply=None)), "hostile elisp"),
        lambda: Case(json.dumps(_valid(rng, reply=rng.choice(HOSTILE_TEXT)), ensure_ascii=rng.random() < 0.5),
                     "hostile reply text"),
        lambda: Case(json.dumps(_valid(rng, monologue=rng.choice(HOSTILE_TEXT), mood=rng.choice(HOSTILE_TEXT)[:40]
                                       or "x")), "hostile monologue and mood"),
        lambda: Case('{"mood": "calm", "confidence": ' + rng.choice(HOSTILE_NUMBERS)
                     + ', "monologue": "m", "reply": "numbers"}', "hostile number"),
        lambda: Case(_mutate(rng, json.dumps(_valid(rng, reply="mutated"))), "mutated JSON"),
        lambda: Case(json.dumps(_valid(rng, **{rng.choice(["mood", "monologue", "reply", "eval", "scratchpad",
                                                            "done", "confidence"]):
                                               rng.choice([1, [], {}, True, "", None, [["deep"]]])})),
                     "wrong type"),
        lambda: Case('{"mood": "calm", "confidence": 0.5, "monologue": "m", "reply": "deep", "x": '
                     + "[" * (d := rng.choice([50, 5000, 100_000])) + "]" * d + "}", "deep nesting"),
        lambda: Case(json.dumps(_valid(rng, scratchpad={"heading": rng.choice(HOSTILE_TEXT)[:80] or "h",
                                                        "content": rng.choice(HOSTILE_TEXT),
                                                        "thread": rng.choice([None, "main", "../../etc"])})),
                     "hostile scratchpad"),
        lambda: Case(rng.choice(["", " ", "null", "[]", '"just a string"', "{}", "{" * 3, "```json\n{\n```",
                                 "I cannot answer in JSON.", "\x00\x00\x00"]), "not an object"),
        lambda: Case(json.dumps(_valid(rng, reply="x" * rng.choice([10_000, 300_000]))), "huge reply"),
    ]
    return [makers[i % len(makers)]() for i in range(n)]
