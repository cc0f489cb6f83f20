"""``amacs-server ticks HOME``: which tick was which input, for a script that rewinds or forks by
tick number (``rewind HOME --tick N``), listed as M-x amacs-rewind's picker offers them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from amacs_server import views
from amacs_server.__main__ import main as server_main
from amacs_server.persistence.chat_log import ChatLog
from tests.fake_anthropic import FakeAnthropic
from tests.test_rewind import answer, run

LONG = "please read " + " ".join(f"word{n}" for n in range(40))
SAID = ["hello", "note the plan\n* and a second line", LONG, "what now", "last words"]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home of five turns, one input to each tick."""
    fake = FakeAnthropic(default=answer).start()
    try:
        home = tmp_path / "home"
        _, last = run(home, fake, [("say", text) for text in SAID])
    finally:
        fake.stop()
    assert last == len(SAID)
    return home


def ticks(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = server_main(["ticks", *args])
    out, err = capsys.readouterr()
    return code, out, err


LINE = re.compile(r"^ *(\d+)  (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)  (.*)$")


def test_the_inputs_are_listed_newest_first_one_line_each_with_tick_and_time(home, capsys):
    code, out, err = ticks(capsys, str(home))
    assert code == 0 and err == ""
    lines = out.splitlines()
    rows = [LINE.match(line) for line in lines]
    assert all(rows), lines
    assert [int(r[1]) for r in rows if r] == [5, 4, 3, 2, 1]
    words = [r[3] for r in rows if r]
    assert words[0] == "last words" and words[4] == "hello"
    assert words[3] == "note the plan * and a second line"  # one line
    assert len(words[2]) == 70 and words[2].endswith("…") and LONG.startswith(words[2][:-1])  # cut
    # The same inputs, ticks and times as the picker's server method gives.
    picker = views.past_inputs(ChatLog(home / "agent-chat.org"))
    assert [int(r[1]) for r in rows if r] == picker["ticks"]


def test_a_page_at_a_time_and_every_one_and_json(home, capsys):
    code, out, err = ticks(capsys, str(home), "-n", "2")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["5", "4"]
    assert "--before 4" in err  # how to ask for the older ones
    code, out, err = ticks(capsys, str(home), "-n", "2", "--before", "4")
    assert [line.split()[0] for line in out.splitlines()] == ["3", "2"]
    code, out, err = ticks(capsys, str(home), "--before", "2")
    assert [line.split()[0] for line in out.splitlines()] == ["1"] and err == ""
    code, out, err = ticks(capsys, str(home), "--all")
    assert len(out.splitlines()) == 5 and err == ""
    code, out, err = ticks(capsys, str(home), "--json", "-n", "3")
    listed = json.loads(out)
    assert listed["more"] is True and listed["home"] == str(home.resolve())
    assert [(e["tick"], e["input"]) for e in listed["inputs"]] == [(5, SAID[4]), (4, SAID[3]), (3, LONG)]  # whole
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d.*", listed["inputs"][0]["time"])
    assert json.loads(ticks(capsys, str(home), "--json", "--all")[1])["more"] is False


def test_a_listed_tick_less_one_rewinds_to_before_that_input_and_the_list_follows(home, capsys):
    """The picker's rule, said in --help: the input of tick N was typed after tick N-1's end."""
    listed = json.loads(ticks(capsys, str(home), "--json")[1])["inputs"]
    what_now = next(e["tick"] for e in listed if e["input"] == "what now")
    assert server_main(["rewind", str(home), "--tick", str(what_now - 1)]) == 0
    capsys.readouterr()
    after = json.loads(ticks(capsys, str(home), "--json")[1])["inputs"]
    assert [e["input"] for e in after] == [LONG, SAID[1], "hello"]  # the abandoned ones are not listed


def test_rewind_and_fork_say_how_to_list_the_ticks(home, tmp_path, capsys):
    for command in (["rewind", str(home)], ["fork", str(home), str(tmp_path / "f")]):
        with pytest.raises(SystemExit):
            server_main([*command, "--help"])
        assert "amacs-server ticks HOME" in capsys.readouterr().out
        assert server_main([*command, "--tick", "9"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no tick 9" in err and f"`amacs-server ticks {home}` lists" in err
    with pytest.raises(SystemExit):
        server_main(["--help"])
    assert "amacs-server ticks HOME" in capsys.readouterr().out


def test_tick_0_says_where_the_mind_before_the_first_input_is(home, tmp_path, capsys):
    """A newcomer asked for the home before its first input (``--tick 0``, the rule N-1 for N=1) and
    read "has no tick 0": nothing is committed before tick 1, and a new home is that mind."""
    for command in (["rewind", str(home)], ["fork", str(home), str(tmp_path / "f")]):
        assert server_main([*command, "--tick", "0"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no tick 0: its ticks start at 1, its first input's" in err, err
        assert "as a new home's is (AMACS_HOME=NEW ./amacs starts one" in err and "without `from`" in err
    assert not (tmp_path / "f").exists()


def test_not_a_home_no_input_and_a_bad_count_in_one_line(tmp_path, capsys):
    code, out, err = ticks(capsys, str(tmp_path))
    assert code == 1 and out == "" and err.count("\n") == 1 and "is it an AMACS home?" in err
    (tmp_path / ".git").mkdir()
    code, out, err = ticks(capsys, str(tmp_path))
    assert code == 0 and out == "" and "no input in" in err
    with pytest.raises(SystemExit):
        server_main(["ticks", str(tmp_path), "-n", "0"])
    assert "-n wants a number above 0" in capsys.readouterr().err
