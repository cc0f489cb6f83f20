"""Synthetic experiment runs for the dataset and report tests and the benchmark (issue 15).

``write_runs(RUNS_DIR, N)`` writes N runs in the experiment runner's layout
(RUNS_DIR/<run-id>/manifest.json and RUNS_DIR/<run-id>/home/transcripts/<session>.jsonl),
each a debate-shaped session whose transcript has the columns, event names and data
shapes a real session writes (copied from real transcripts: persistence/transcript.py,
loop/primary.py, agents/loop.py, agents/subagent.py): a primary's ticks (tick_start,
model_request with the whole request, model_response with usage/cost/latency_ms, parsed,
eval, eval_result, tick_end), viewpoints (two or three, by the variant) and a task
(agent_start ... agent_end), a compulsion that blocks one eval (``blocked``), evals some
of which fail.  A realistic run is ~100 events and ~300 KB, the request dominating.

What each run holds is returned (:class:`FakeRun`), so a test compares the dataset with it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amacs_server.research.dataset import OPEN

PROMPTS = ("question", "script")
VARIANTS = ("two-views", "three-views")
MODELS = (("fake", "anthropic", "claude-sonnet-4-5"), ("fake-small", "anthropic", "claude-haiku-4-5"))
VIEWS = ("optimist", "skeptic", "pragmatist")
EXPERIMENT = "debate"
T0 = 1_790_000_000.0

_PARA = ("You are an agent that lives inside Emacs. A person talks to you in the `*amacs-shell*` buffer. "
         "Emacs is your body: you act by returning Emacs Lisp, which Emacs evaluates for you. You see the "
         "result of that elisp on your next tick.\n\n")
SYSTEM = "# You are AMACS\n\n" + _PARA * 36  # ~9 KB, as the core skill's system prompt
SUB_SYSTEM = "# You are a subagent of AMACS\n\n" + _PARA * 14
_WORDS = ("buffer window eval tick agent reply monologue scratchpad thread memory chat person cars city "
          "centre ban bicycle street traffic noise air policy cost benefit evidence study data result").split()


def _filler(rng: random.Random, size: int) -> str:
    """SIZE characters of words, compressing as text does (not as one repeated letter)."""
    words: list[str] = []
    n = 0
    while n < size:
        word = rng.choice(_WORDS)
        words.append(word)
        n += len(word) + 1
    return " ".join(words)


@dataclass
class FakeAgent:
    """One agent of a run, as the dataset's ``agents`` table should show it."""

    id: str
    parent: str | None
    type: str
    template: str
    state: str = OPEN  # at the end: agent_end's state, or "open at end" without one
    steps: int = 0  # its answered model calls (agent_end's steps, as the server counts them)


@dataclass
class FakeRun:
    """What one generated run holds."""

    run_id: str
    manifest: dict[str, Any]
    session_id: str
    events: int = 0
    model_calls: int = 0
    cost: float = 0.0
    evals: int = 0
    eval_errors: int = 0
    blocks: int = 0
    turns: int = 0  # rows of the turns table: the primary's turns, and each subagent answer without an eval
    agents: dict[str, FakeAgent] = field(default_factory=dict)
    events_by_name: dict[str, int] = field(default_factory=dict)


class _Writer:
    """Writes one transcript as Transcript.write does, counting what it wrote."""

    def __init__(self, run: FakeRun, path: Path, rng: random.Random, t0: float) -> None:
        self.run, self.rng, self.ts, self.seq = run, rng, t0, 0
        self.lines: list[str] = []
        self.path = path
        self.first_request: float | None = None
        self.first_turn: float | None = None
        self.last_reply: float | None = None
        self.thinking: bool | None = None if rng.random() < 0.5 else False  # None: an older transcript
        self.encoder = json.JSONEncoder(ensure_ascii=False)

    def write(self, agent: FakeAgent, event: str, data: dict[str, Any], tick: int | None = None) -> None:
        self.seq += 1
        self.ts += self.rng.uniform(0.001, 0.05)
        self.lines.append(self.encoder.encode({
            "run_id": self.run.session_id, "session_id": self.run.session_id, "agent_id": agent.id,
            "parent_id": agent.parent, "agent_type": agent.type, "template": agent.template,
            "seq": self.seq, "ts": self.ts, "tick": tick, "event": event, "data": data}))
        self.run.events += 1
        self.run.events_by_name[event] = self.run.events_by_name.get(event, 0) + 1
        if event == "model_request" and self.first_request is None:
            self.first_request = self.ts
        if event == "tick_start" and data.get("human") is not None and self.first_turn is None:
            self.first_turn = self.ts
        if event == "tick_end" and agent.type == "primary" and data["response"].get("reply"):
            self.last_reply = self.ts

    def model_call(self, agent: FakeAgent, system: str, messages: list[dict[str, str]], reply: str,
                   model: str, tick: int | None = None) -> None:
        request = {"model": model, "max_tokens": 8192, "system": [{"type": "text", "text": system}],
                   "messages": messages}
        extra = {"read": [f"<EOT>amacs-instance-1:primary:chat.{i}:1<EOT>" for i in range(len(messages) // 2)],
                 "wrote": []} if agent.type == "primary" else {}
        self.write(agent, "model_request", {"request": request, **extra}, tick)
        wait = self.rng.uniform(0.5, 3.0)  # the model's time: the call's latency, and a little more
        self.ts += wait
        tokens_in = (len(system) + sum(len(m["content"]) for m in messages)) // 4
        tokens_out = len(reply) // 4 + self.rng.randint(5, 40)
        cached = tokens_in // 2 if len(messages) > 2 else 0
        cost = round((tokens_in - cached) * 3e-6 + cached * 0.3e-6 + tokens_out * 15e-6, 8)
        usage = {"input_tokens": tokens_in - cached, "output_tokens": tokens_out,
                 "cache_read_tokens": cached, "cache_write_tokens": 0}
        # every agent's model_response has the same fields (loop/primary.py, agents/world.py)
        data: dict[str, Any] = {"raw": reply, "stop_reason": "end_turn", "usage": usage, "cost": cost,
                                "latency_ms": round(wait * 1000 * self.rng.uniform(0.8, 0.98), 3)}
        if self.thinking is not None:  # the thinking text, "" when none (absent in older transcripts)
            data["thinking"] = f"{agent.id} thinks at step {agent.steps + 1}" if self.thinking else ""
            self.thinking = not self.thinking
        self.write(agent, "model_response", data, tick)
        agent.steps += 1
        self.run.turns += agent.type != "primary" and json.loads(reply)["eval"] is None
        self.run.model_calls += 1
        self.run.cost += cost

    def eval(self, agent: FakeAgent, form: str, tick: int | None, error: str | None = None,
             result: str | None = "nil") -> None:
        self.write(agent, "eval", {"form": form}, tick)
        self.eval_result(agent, tick, error, result)

    def eval_result(self, agent: FakeAgent, tick: int | None, error: str | None, result: str | None) -> None:
        self.write(agent, "eval_result", {"success": error is None, "result": None if error else result,
                                          "error": error, "skipped": False}, tick)
        self.run.evals += 1
        self.run.eval_errors += error is not None

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("\n".join(self.lines) + "\n", encoding="utf-8")


def _reply(rng: random.Random, eval_form: str | None = None, reply: str | None = None) -> str:
    return json.dumps({"eval": eval_form, "reply": reply, "mood": rng.choice(["focused", "curious"]),
                       "confidence": round(rng.uniform(0.4, 0.9), 2), "monologue": "thinking " * rng.randint(3, 12)})


def _start(w: _Writer, agent: FakeAgent, depth: int, name: str | None) -> None:
    w.run.agents[agent.id] = agent
    w.write(agent, "agent_start", {"allowed": ["eval", "reply", "talk"], "depth": depth, "name": name})


def _end(w: _Writer, agent: FakeAgent, state: str) -> None:
    agent.state = state
    w.write(agent, "agent_end", {"state": state, "id": agent.id, "type": agent.type, "template": agent.template,
                                 "name": None, "parent": agent.parent, "steps": agent.steps, "tokens": 1000,
                                 "cost": 0.001})


def write_run(runs_dir: Path, index: int, seed: int = 0, errors: bool = True) -> FakeRun:
    """Write run number INDEX of the grid (its arm is INDEX modulo the grid's size, its rep the quotient).

    Without ERRORS, no eval fails and the compulsion blocks nothing (as in the shipped debate)."""
    arms = [(p, v, m) for p in PROMPTS for v in VARIANTS for m in MODELS]
    prompt, variant, (model, backend, model_name) = arms[index % len(arms)]
    rep = index // len(arms)
    run_id = f"{prompt}.{variant}.{model}.r{rep}"
    rng = random.Random(seed * 1_000_003 + index)
    failed = rng.random() < 0.08
    turns = (["Should cities ban cars from their centres?"] if prompt == "question"
             else ["Should cities ban cars from their centres?", "And what about bicycles?"])
    started = T0 + index * 60
    session = f"20260920T{index % 240000:06d}-{index:08x}"
    run = FakeRun(run_id, {}, session)
    home = runs_dir / run_id / "home"
    # the session's first event comes after Emacs and the server started (as in a real run)
    w = _Writer(run, home / "transcripts" / f"{session}.jsonl", rng, started + 1.5)
    primary = FakeAgent("primary", None, "primary", "core")
    run.agents["primary"] = primary
    messages: list[dict[str, str]] = []
    tick = 0
    n_views = 2 if variant == "two-views" else 3
    views: list[FakeAgent] = []
    comp = FakeAgent("compulsion-1", "primary", "compulsion", "spawn-limiter")
    task_n = 0
    turns_done = 0
    for turn_no, human in enumerate(turns):
        steps = rng.randint(3, 5) if not failed else 2
        for step in range(steps):
            tick += 1
            run.turns += step == 0
            w.write(primary, "tick_start", {
                "human": human if step == 0 else None,
                "consciousness": {"identity": "amacs-instance-1", "current_tick": tick, "mood": "focused",
                                  "confidence": 0.8, "budget": {"cost_so_far": round(run.cost, 6),
                                                                "budget_limit": 0.5, "pressure": "low"}},
                "wrote": []}, tick)
            messages.append({"role": "user", "content": (f"The person said: {human}\n" if step == 0 else "")
                             + "<context>" + _filler(rng, rng.randint(1500, 3500)) + "</context>"})
            if turn_no == 0 and step == 0:
                names = VIEWS[:n_views]
                form = "(progn " + " ".join(f'(agent-viewpoint "{n}" "debater")' for n in names) \
                    + ' (agent-compulsion "spawn-limiter") (agent-consider "Ban cars?"))'
            elif step == steps - 1:
                form = None
            elif rng.random() < 0.5:
                form = f'(agent-task "researcher" "find data {task_n + 1}")'
            else:
                form = rng.choice(['(buffer-string)', '(my-undefined-function)', '(+ 1 2)'][:3 if errors else 1])
            reply = None if form else "Here is what the panel says."
            raw = _reply(rng, form, reply)
            w.model_call(primary, SYSTEM, messages, raw, model_name, tick)
            messages.append({"role": "assistant", "content": raw})
            w.write(primary, "parsed", {"attempt": 0, "response": json.loads(raw) | {"fallback": False,
                                                                                   "done": False}}, tick)
            if form is None:
                pass  # a reply alone: no eval, no eval_result (agents/loop.py act)
            elif turn_no == 0 and step == 0:
                w.write(primary, "eval", {"form": form}, tick)
                for n in VIEWS[:n_views]:
                    v = FakeAgent(f"viewpoint-{n}", "primary", "viewpoint", "debater")
                    views.append(v)
                    _start(w, v, 1, n)
                _start(w, comp, 1, None)
                w.eval_result(primary, tick, None, '(:handle "compulsion-1")')
                for v in views:
                    w.model_call(v, SUB_SYSTEM, [{"role": "user", "content": "[primary] Ban cars?"}],
                                 _reply(rng, None, f"{v.id} says so"), model_name)
                    w.write(primary, "event", {"type": "Agent", "source": v.id, "talk_id": 1,
                                               "content": {"handle": v.id, "reply": f"{v.id} says so"}})
            else:
                # the compulsion sees every eval of the primary
                w.model_call(comp, SUB_SYSTEM, [{"role": "user", "content": f"[before action] {form}"}],
                             _reply(rng, None, ""), model_name)
                if "agent-task" in form and task_n >= 2 and errors:
                    reason = "Two subagents already run in this turn; use their results first."
                    w.write(primary, "eval", {"form": form}, tick)
                    w.write(primary, "blocked", {"by": comp.id, "template": comp.template, "action": "eval",
                                                 "form": form, "reason": reason})
                    run.blocks += 1
                    w.eval_result(primary, tick, f"blocked by compulsion {comp.id} ({comp.template}): {reason}",
                                  None)
                elif "agent-task" in form:
                    task_n += 1
                    task = FakeAgent(f"task-{task_n}", "primary", "task", "researcher")
                    _start(w, task, 1, None)
                    w.eval(primary, form, tick, result=f'(:handle "{task.id}" :talk-id {task_n})')
                    w.model_call(task, SUB_SYSTEM, [{"role": "user", "content": form}],
                                 _reply(rng, "(emacs-version)"), model_name)
                    w.eval(task, "(emacs-version)", None, error="timeout" if rng.random() < 0.2 and errors else None,
                           result='"GNU Emacs 29.1"')
                    w.model_call(task, SUB_SYSTEM, [{"role": "user", "content": form}],
                                 _reply(rng, None, "found it"), model_name)
                    _end(w, task, "done" if rng.random() < 0.9 else "failed")
                    w.write(primary, "event", {"type": "Agent", "source": task.id, "talk_id": task_n,
                                               "content": {"handle": task.id, "status": task.state}})
                else:
                    error = "void-function my-undefined-function" if "undefined" in form else None
                    w.eval(primary, form, tick, error=error, result='"3"')
            w.write(primary, "tick_end", {"response": json.loads(raw), "eval_result": {"success": True},
                                          "wrote": []}, tick)
        if failed:
            break
        turns_done += 1
    if not failed:
        for v in views:
            _end(w, v, "discarded")
        if rng.random() < 0.5:
            _end(w, comp, "quit")
    w.save()
    ended = w.ts + 0.5
    run.manifest = {
        "run_id": run_id, "experiment": EXPERIMENT, "prompt": prompt, "variant": variant, "model": model,
        "backend": backend, "model_name": model_name, "rep": rep, "seed": rep, "turns": turns,
        "status": "failed" if failed else "done", "cost": round(run.cost, 6), "turns_done": turns_done,
        "started_at": started, "ended_at": ended,
        "seconds": round((ended if failed or w.last_reply is None else w.last_reply) - (w.first_turn or started), 3),
        "error": "timeout after 300 s" if failed else None, "failed_turn": 1 if failed else None,
        "emacs_started_at": started, "server_started_at": started + 1.2, "first_turn_at": w.first_turn,
        "first_request_at": w.first_request, "last_reply_at": w.last_reply, "cpus": 2,
        "startup_seconds": round((w.first_turn or started) - started, 3), "wall_seconds": round(ended - started, 3),
        "order_seed": 0, "position": index}
    (runs_dir / run_id / "manifest.json").write_text(json.dumps(run.manifest, indent=1))
    return run


def write_runs(runs_dir: Path, n: int, seed: int = 0, errors: bool = True) -> list[FakeRun]:
    """Write N runs into RUNS_DIR (8 arms: prompt x variant x model; rep = index // 8); ERRORS: see write_run."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    return [write_run(runs_dir, i, seed, errors) for i in range(n)]


if __name__ == "__main__":
    import sys

    out = Path(sys.argv[1])
    made = write_runs(out, int(sys.argv[2]) if len(sys.argv) > 2 else 100)
    print(f"{len(made)} runs in {out}")
