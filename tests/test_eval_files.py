"""An eval's files as the server takes them from Emacs, and the shipped file compulsions (issue 11).

agent-world-architecture.md, The World: tracking of known_content_files (the files each eval read
and wrote come with its result); Compulsions: the have_read_files_watcher and planning_mode hooks
as Compulsion templates.
"""

from pathlib import Path

from amacs_server.skills import SkillLibrary
from amacs_server.state.consciousness import Consciousness, EvalResult
from amacs_server.transport.emacs_face import file_names

ROOT = Path(__file__).resolve().parents[1]


def test_an_eval_without_files_reads_as_before():
    """The model's lastEvalResult and the transcripts keep their shape for evals that touch no file."""
    assert EvalResult(True, result="4").to_dict() == {"success": True, "result": "4", "error": None,
                                                      "skipped": False}
    both = EvalResult(False, error="boom", files_read=("/a",), files_written=("/b",)).to_dict()
    assert list(both) == ["success", "result", "error", "skipped", "files_read", "files_written"]
    assert both["files_read"] == ["/a"] and both["files_written"] == ["/b"]


def test_consciousness_with_files_in_the_last_result_still_round_trips():
    c = Consciousness()
    c.last_eval_result = EvalResult(True, result="nil", files_read=("/a", "/b c"), files_written=("/d",))
    back = Consciousness.from_elisp(c.to_elisp())
    assert back.last_eval_result == EvalResult(True, result="nil")  # the files are the World's, not saved here


def test_file_names_from_emacs_are_checked_at_the_boundary():
    assert file_names(None) == ()
    assert file_names(["/a", "/a", "rel", 3, "/b"]) == ("/a", "/b")
    assert file_names("/a") == ()


def test_the_templates_ship_as_compulsions_and_say_what_to_answer():
    """The spec's examples: planning_mode and have_read_files_watcher are Compulsion templates."""
    skills = SkillLibrary(ROOT / "skills", ROOT / "no-personal-skills")
    watcher = skills.get("have-read-files-watcher")
    assert watcher.kind == "compulsion"
    # The exact reasons the end-to-end fake gives (tests/e2e/test_file_compulsions.py).
    body = " ".join(watcher.body.split())
    assert '"You have not read PATH; read it (find-file-noselect or insert-file-contents) before writing it."' in body
    assert '"PATH changed on disk since you read it; read it again before writing it."' in body
    assert "empty reply: that lets the eval run" in body
    planning = skills.get("planning-mode")
    assert planning.kind == "compulsion"
    text = " ".join(planning.body.split())
    assert "(agent-quit)" in text and "An empty reply lets the action go" in text
