"""Every item in every context section is addressable by the exact MemId shown (issue 13).

One session through the real stack (batch Emacs, the server, the fake model):
the model's evals call agent-memory-mutate, agent-memory-evict and
agent-memory-load on one item of every kind, each time with the MemId taken
from the request the fake just received.  What each item's ``mutable`` and
``evictable`` flags promised is what happens, and the next request shows it:
a mutation as the next version, an eviction as a handle (or the item gone), a
load as the item back, exactly once.
"""

import json

import pytest

from tests.context_items import eval_result, name_of, parse_context, request_text
from tests.e2e.agent_fakes import transcript_events
from tests.e2e.harness import elisp_string, run_emacs
from tests.fake_anthropic import Reply, agent_json

pytestmark = pytest.mark.e2e
ME = "amacs-instance-1:primary"
BUFFER_TEXT = "def hello():\n    return 'world'\n"


def _newest(items):
    return items[-1] if items else None


# kind: (section, pick the item from the section's items, new content for mutate, (mutable, evictable))
KINDS = {
    "event": ("events", _newest, "forged", (False, False)),
    "note": ("memory", lambda items: next((i for i in items if name_of(i) == "groceries"), None), "milk, eggs",
             (True, True)),
    "scratchpad entry": ("scratchpad", _newest, "Prefer steel, always.", (True, True)),
    "chat exchange": ("chat", lambda items: _newest([i for i in items if "agent" in i["content"]]), "forged",
                      (False, True)),
    "monologue line": ("monologue", _newest, "forged", (False, True)),
    "consciousness field (ram)": ("agent-consciousness", lambda items: next(
        (i for i in items if name_of(i) == "mood"), None), "curious", (True, False)),
    "consciousness field (rom)": ("agent-consciousness", lambda items: next(
        (i for i in items if name_of(i) == "budget"), None), "forged", (False, False)),
    "eval result": ("last-eval-result", _newest, "forged", (False, False)),
    "thread": ("threads", _newest, "forged", (False, False)),
    "skill": ("skills", _newest, "forged", (False, False)),
    "buffer": ("buffers", _newest, "forged", (False, False)),
}
OPS = ("mutate", "evict", "load")


def form(op, mem_id, kind):
    if op == "mutate":
        return f"(agent-memory-mutate {elisp_string(mem_id)} {elisp_string(KINDS[kind][2])})"
    if op == "load" and kind == "buffer":  # one part of a long text
        return f"(agent-memory-load {elisp_string(mem_id)} :offset 4 :limit 5)"
    return f"(agent-memory-{op} {elisp_string(mem_id)})"


def sections_showing(ctx, base):
    """{section: item} of every section of context CTX that shows the item BASE."""
    out = {}
    for tag, items in parse_context(ctx).items():
        for item in items:
            if item["mem_id"].startswith(f"<EOT>{base}:") or item["mem_id"] == f"<EOT>{base}<EOT>":
                out[tag] = item
    return out


def base_of(mem_id):
    return mem_id.removeprefix("<EOT>").removesuffix("<EOT>").rsplit(":", 1)[0]


def content_of(item):
    return item.get("content", item.get("body"))


def test_every_kind_of_item_is_addressable_by_the_mem_id_shown(fake, home, tmp_path):
    skill = home / "skills" / "rust-mode" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: rust-mode\ndescription: Rust help\nkind: skill\n---\nRust tips\n")
    src = tmp_path / "hello.py"
    src.write_text(BUFFER_TEXT)
    setup = (f'(progn (agent-memory-create "groceries" "milk") '
             f'(agent-create-thread "code" :concern "C" :buffers (list {elisp_string(str(src))})) '
             f'(agent-bind-skill-to-thread "rust-mode") (agent-talk-log "hello log"))')
    steps = [(kind, op) for kind in KINDS for op in OPS] + [("event", "evict")]  # the loaded event leaves again
    issued = []  # (kind, op, mem_id, the item as shown when the step was issued, request index)
    def answer(body):
        ctx = request_text(body)
        if len(fake.requests) == 0:  # "hello" (this request is recorded after its answer)
            return Reply(agent_json("hi"))
        if len(fake.requests) == 1:  # "start": the items of every kind
            reply = json.loads(agent_json(None, eval=setup))
            reply["scratchpad"] = {"heading": "Kettle research", "thread": None, "content": "Prefer steel."}
            return Reply(json.dumps(reply))
        if len(issued) == len(steps):
            return Reply(agent_json("done"))
        kind, op = steps[len(issued)]
        tag, pick, _new, _flags = KINDS[kind]
        shown = pick(parse_context(ctx).get(tag, []))
        earlier = [i for i in issued if i[0] == kind]
        if shown is not None and (not earlier or base_of(shown["mem_id"]) == base_of(earlier[0][2])):
            mem_id = shown["mem_id"]
        else:  # no longer shown (the event after its tick, a handle elsewhere): the MemId seen before
            mem_id = earlier[-1][2] if earlier else f"<EOT>{ME}:missing<EOT>"
        issued.append((kind, op, mem_id, shown, len(fake.requests)))
        return Reply(agent_json(None, eval=form(op, mem_id, kind), mood="focused"))

    fake.respond_with(answer)
    program = ("(setq amacs-max-steps 60) (amacs-e2e-open) (amacs-e2e-send \"hello\") "
               "(amacs-e2e-send \"start\") (amacs-e2e-finish)")
    run_emacs(home, fake.url, program).check()
    ctx = fake.user_texts()
    assert len(issued) == len(steps), [i[:3] for i in issued]

    problems = []
    first_seen = {}
    for kind, op, mem_id, shown, index in issued:
        tag, _pick, new, (mutable, evictable) = KINDS[kind]
        base = base_of(mem_id)
        after = ctx[index + 1]
        result = eval_result(after)
        where = sections_showing(after, base)
        label = f"{kind} {op} {mem_id}"
        if kind not in first_seen:
            first_seen[kind] = shown
            if shown is None:
                problems.append(f"{kind}: not shown in <{tag}>")
                continue
            # every item says what may be done with it, and when it was made
            flags = (shown["mutable"], shown["evictable"])
            if flags != (mutable, evictable):
                problems.append(f"{kind}: flags {flags}, the contract says {(mutable, evictable)}")
            if not isinstance(shown.get("created_at_ms"), int):
                problems.append(f"{kind}: no created_at_ms")
        if op == "mutate":
            if mutable:
                item = where.get(tag)
                if not result["success"] or item is None or content_of(item) != (
                        new if kind != "scratchpad entry" else {**shown["content"], "content": new}):
                    problems.append(f"{label}: not shown changed: {result} {item}")
                elif item["version"] != shown["version"] + 1:
                    problems.append(f"{label}: version {item['version']} after {shown['version']}")
            elif result["success"] or "cannot be mutated" not in result["error"]:
                problems.append(f"{label}: mutable false but {result}")
        elif op == "evict":
            before = ctx[index]
            shown_before = sections_showing(before, base)
            if kind == "event" and shown_before.get("memory"):  # the event loaded into <memory> leaves again
                if not result["success"] or where.get("memory"):
                    problems.append(f"{label}: a loaded event stays: {result} {where}")
                continue
            if evictable:
                kept = [t for t, i in where.items() if i["kind"] != "handle"]
                if not result["success"] or kept:
                    problems.append(f"{label}: still shown in {kept}: {result}")
                elif kind in ("note", "chat exchange", "monologue line", "scratchpad entry") and (
                        list(where) != [tag] or where[tag]["kind"] != "handle"):
                    problems.append(f"{label}: no handle in <{tag}>: {where}")
            elif result["success"] or "cannot be evicted" not in result["error"] and "mutate it instead" not in \
                    result["error"]:
                problems.append(f"{label}: evictable false but {result}")
        else:  # load: back exactly once, never twice
            if not result["success"]:
                problems.append(f"{label}: {result}")
                continue
            if kind == "event":  # gone after its tick: loading pins it into <memory>, evictable there
                if list(where) != ["memory"] or not where["memory"]["evictable"]:
                    problems.append(f"{label}: loaded event shown in {list(where)}")
                continue
            if list(where) != [tag]:
                problems.append(f"{label}: shown in {list(where)}, not once in <{tag}>")
            elif where[tag]["kind"] == "handle":
                problems.append(f"{label}: still a handle")
            if f':section "{tag}"' not in result["result"]:
                problems.append(f"{label}: load says {result['result'][:200]}")
    assert problems == [], "\n".join(problems)

    # The buffer's load read one part, and said how long the whole is.
    buffer_load = next(eval_result(ctx[i + 1]) for k, op, _m, _s, i in issued if (k, op) == ("buffer", "load"))
    assert f':total-chars {len(BUFFER_TEXT)} :offset 4 :limit 5 :next-offset 9' in buffer_load["result"]
    assert ':content "hello"' in buffer_load["result"] and ':field "content"' in buffer_load["result"]
    # The scratchpad entry changed in its org file too.
    org = (home / "scratchpad.org").read_text()
    assert "Prefer steel, always." in org and "Prefer steel.\n" not in org and org.count("* Kettle research") == 1
    # The transcript lists the MemIds each memory call read or wrote.
    events = transcript_events(home)
    memory_events = [e for e in events if e["event"].startswith("memory_")]
    mutated = next(e for e in memory_events if e["event"] == "memory_mutate" and "groceries" in str(e["data"]))
    assert mutated["data"]["read"] == [f"<EOT>{ME}:groceries:1<EOT>"]
    assert mutated["data"]["wrote"] == [f"<EOT>{ME}:groceries:2<EOT>"]
    # ... and every model request what it showed (read), every tick what it wrote.
    shown = [e["data"]["read"] for e in events if e["event"] == "model_request"]
    assert len(shown) == len(ctx) and all(f"<EOT>{ME}:identity:1<EOT>" in r for r in shown)
    assert any(m.startswith(f"<EOT>{ME}:scratchpad.") for r in shown for m in r)
    ends = [e["data"]["wrote"] for e in events if e["event"] == "tick_end"]
    assert ends and all(any(m.startswith(f"<EOT>{ME}:monologue.") for m in w) for w in ends)
    starts = [e["data"]["wrote"] for e in events if e["event"] == "tick_start"]
    assert any(m.startswith(f"<EOT>{ME}:current_tick:") for w in starts for m in w)
    refused = next(e for e in memory_events if e["event"] == "memory_evict" and "budget" in str(e["data"]))
    assert "cannot be evicted" in refused["data"]["error"] and refused["data"]["mem_ids"][0].startswith(
        f"<EOT>{ME}:budget:")
