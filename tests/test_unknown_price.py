"""Costs that are known, or said to be unknown: a model nobody priced is never priced as Sonnet.

A model with no price (none listed, none in the person's table or the experiment's spec) has
its cost recorded as unknown (None in the server, null in the transcript and the dataset), its
tokens kept; a model served on this machine (a base URL on 127.0.0.1 or ::1) costs nothing
unless priced; a budget on an unpriced model is refused in one line, or uses the spec's price."""

import json
from pathlib import Path

import pytest

from amacs_server.config import ConfigError, load_config
from amacs_server.inference.pricing import (
    FREE,
    PRICES,
    Price,
    Tally,
    Usage,
    cost,
    is_local,
    price_for,
)
from amacs_server.research import experiment
from amacs_server.research.dataset import load
from amacs_server.research.report import build_report
from amacs_server.research.runs import run_environment, transcript_totals
from amacs_server.research.spec import load as load_spec
from amacs_server.research.spec import unpriced
from tests.research_fakes import write_runs

USAGE = Usage(input_tokens=4812, output_tokens=300)


def test_a_model_nobody_priced_costs_unknown_not_sonnet():
    assert price_for("gpt-oss-120b") is None
    assert cost("gpt-oss-120b", USAGE) is None
    assert cost("smollm2", USAGE) is None  # not on this machine here: unknown too
    tally = Tally()
    tally.add(USAGE, cost("gpt-oss-120b", USAGE))
    tally.add(USAGE, cost("claude-sonnet-4-5", USAGE))
    assert tally.input_tokens == 2 * 4812 and tally.unpriced_calls == 1  # tokens kept, the call said unpriced
    assert tally.cost == pytest.approx(cost("claude-sonnet-4-5", USAGE))  # only the known call's dollars
    assert tally.to_dict()["unpriced_calls"] == 1
    # listed, by prefix, by an Anthropic family: known
    assert price_for("claude-sonnet-4-5-20250929") == PRICES["claude-sonnet-4-5"]
    assert price_for("claude-opus-5-5") == PRICES["claude-opus-4-5"]
    assert price_for("opus-like-model") is None  # a family word in another vendor's name is no price


@pytest.mark.parametrize("url, local", [
    ("http://127.0.0.1:8080/v1", True), ("http://[::1]:8080/v1", True), ("http://localhost:11434", True),
    ("https://api.together.xyz/v1", False), ("http://10.0.0.5:8000/v1", False), (None, False), ("", False)])
def test_a_server_on_this_machine_is_free_unless_priced(url, local):
    assert is_local(url) is local
    assert price_for("smollm2", local=is_local(url)) == (FREE if local else None)
    mine = {"smollm2": Price(0.1, 0.2, 0.1, 0.1)}
    assert price_for("smollm2", mine, local=is_local(url)) == mine["smollm2"]  # the person's price wins


def test_prices_given_at_start_reach_the_server(tmp_path):
    config = load_config({"AMACS_HOME": str(tmp_path), "AMACS_PRICES": json.dumps({"gpt-oss": [0.5, 1.5, 0.5, 0.05]})})
    assert config.prices == {"gpt-oss": (0.5, 1.5, 0.5, 0.05)}
    with pytest.raises(ConfigError, match="AMACS_PRICES"):
        load_config({"AMACS_HOME": str(tmp_path), "AMACS_PRICES": '{"m": [1, 2]}'})


def spec(folder: Path, budget: str, price: str = "", url: str | None = "https://models.example.org/v1",
         backend: str = "openai", model: str = "gpt-oss-120b") -> Path:
    """An experiment of one run of MODEL on BACKEND at URL (None: no base_url)."""
    path = folder / "experiment.toml"
    path.write_text(f"""
[experiment]
name = "priced"
{budget}

[[prompts]]
name = "q"
turns = ["hello"]

[[models]]
name = "oss"
backend = "{backend}"
model = "{model}"
{f'base_url = "{url}"' if url else ""}
{price}
""")
    return path


def test_a_budget_on_a_model_with_no_price_is_refused_in_one_line(tmp_path, capsys):
    runs = tmp_path / "runs"
    code = experiment.main([str(spec(tmp_path, "budget = 1.0")), "--runs-dir", str(runs)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "'oss'" in err[0] and "gpt-oss-120b" in err[0] and "price = {input" in err[0]
    assert not list(runs.glob("*/manifest.json"))  # nothing started
    code = experiment.main([str(spec(tmp_path, "run_budget = 0.1")), "--runs-dir", str(runs)])
    assert code == 2 and "a budget needs prices" in capsys.readouterr().err


def test_a_budget_uses_the_price_the_spec_gives(tmp_path):
    loaded = load_spec(spec(tmp_path, "budget = 1.0", "price = {input = 0.5, output = 1.5}"))
    assert unpriced(loaded.runs) == []
    run = loaded.runs[0]
    assert run.price == (0.5, 1.5, 0.5, 0.5)  # cache prices default to input's
    env = run_environment(run, tmp_path / "run", base={})
    assert json.loads(env["AMACS_PRICES"]) == {"gpt-oss-120b": [0.5, 1.5, 0.5, 0.5]}
    table = {m: Price(*p) for m, p in load_config({**env, "AMACS_HOME": str(tmp_path)}).prices.items()}
    assert cost("gpt-oss-120b", USAGE, table) == pytest.approx((4812 * 0.5 + 300 * 1.5) / 1e6)
    # a model served on this machine needs no price for a budget
    assert unpriced(load_spec(spec(tmp_path, "budget = 1.0", url="http://127.0.0.1:8080/v1")).runs) == []


def null_costs(home: Path) -> None:
    """Make every model call in HOME's transcripts one of a model with no price (cost null)."""
    for path in (home / "transcripts").glob("*.jsonl"):
        lines = []
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "model_response":
                event["data"]["cost"] = None
            lines.append(json.dumps(event))
        path.write_text("\n".join(lines) + "\n")


def test_unknown_costs_stay_unknown_in_the_dataset_and_the_report(tmp_path):
    made = write_runs(tmp_path, 8, errors=False)
    unknown = made[0].run_id
    null_costs(tmp_path / unknown / "home")
    dollars, _seconds, calls = transcript_totals(tmp_path / unknown / "home")
    assert dollars is None and calls > 0
    manifest = json.loads((tmp_path / unknown / "manifest.json").read_text())
    (tmp_path / unknown / "manifest.json").write_text(json.dumps({**manifest, "cost": None, "unpriced_calls": calls}))
    con = load(tmp_path)
    assert con.execute("SELECT count(*), count(cost) FROM model_calls WHERE run_id = ? AND ok",
                       [unknown]).fetchone() == (calls, 0)
    cost_, model_cost, tokens, unpriced_calls = con.execute(
        "SELECT cost, model_cost, input_tokens, unpriced_calls FROM runs WHERE run_id = ?", [unknown]).fetchone()
    assert cost_ is None and model_cost is None and tokens > 0 and unpriced_calls == calls
    assert con.execute("SELECT count(*) FROM agents WHERE run_id = ? AND cost IS NOT NULL", [unknown]).fetchone()[0] == 0
    assert con.execute("SELECT count(cost) FROM turns WHERE run_id = ?", [unknown]).fetchone()[0] == 0
    # the other runs keep their dollars
    assert con.execute("SELECT count(*) FROM runs WHERE cost > 0").fetchone()[0] == 7
    page = build_report(con, tmp_path, [unknown], unknown).render("t")
    assert "unknown (no price)" in page and "unknown: no price listed or given" in page
    assert "1 runs&#x27; cost is unknown" in page or "1 runs' cost is unknown" in page


@pytest.mark.parametrize("url, model, prices, dollars", [
    ("https://models.example.org/v1", "gpt-oss-120b", None, None),  # nobody priced it: unknown
    ("http://127.0.0.1:9/v1", "gpt-oss-120b", None, 0.0),  # served on this machine: free
    ("https://models.example.org/v1", "gpt-oss-120b", {"gpt-oss": [1.0, 2.0, 1.0, 1.0]}, (4812 + 600) / 1e6),
    ("https://models.example.org/v1", "claude-sonnet-4-5", None, (4812 * 3 + 300 * 15) / 1e6)])
def test_the_server_records_a_cost_only_when_it_knows_the_price(tmp_path, url, model, prices, dollars):
    from amacs_server.runtime import Runtime
    from tests.test_memory import SilentFace

    env = {"AMACS_HOME": str(tmp_path / "h"), "AMACS_BACKEND": "openai", "OPENAI_BASE_URL": url,
           "AMACS_MODEL": model, **({"AMACS_PRICES": json.dumps(prices)} if prices else {})}
    rt = Runtime(load_config(env), SilentFace())
    try:
        before = rt.mind.consciousness.budget.cost_so_far
        said = rt.ledger.charge(USAGE)
        assert said == (None if dollars is None else pytest.approx(dollars))
        assert rt.ledger.session_tally.input_tokens == 4812  # tokens counted either way
        assert rt.ledger.session_tally.unpriced_calls == (1 if dollars is None else 0)
        assert rt.mind.consciousness.budget.cost_so_far == pytest.approx(before + (dollars or 0.0))  # no guess spent
    finally:
        rt.stop(grace=0)


@pytest.mark.parametrize("url, model, prices, refused", [
    ("https://models.example.org/v1", "gpt-oss-120b", None, True),  # nobody priced it, not on this machine
    ("http://127.0.0.1:9/v1", "gpt-oss-120b", None, False),  # served on this machine: free
    ("https://models.example.org/v1", "gpt-oss-120b", {"gpt-oss": [1.0, 2.0, 1.0, 1.0]}, False),  # the person's price
    ("https://models.example.org/v1", "claude-sonnet-4-5", None, False)])  # listed
def test_the_persons_budget_on_a_model_with_no_price_is_refused_in_one_line(tmp_path, url, model, prices, refused):
    """M-x amacs-set-budget's method: a limit on a model whose dollars cannot be counted is refused,
    in one line that names the model and where a price goes; the limit is then left as it was."""
    import threading

    from amacs_server import methods
    from amacs_server.errors import Refused
    from amacs_server.runtime import Runtime
    from tests.test_arguments import NoEvals, Recorder
    from tests.test_memory import SilentFace

    env = {"AMACS_HOME": str(tmp_path / "h"), "AMACS_BACKEND": "openai", "OPENAI_BASE_URL": url,
           "AMACS_MODEL": model, **({"AMACS_PRICES": json.dumps(prices)} if prices else {})}
    rt = Runtime(load_config(env), SilentFace())
    loop = threading.Thread(target=rt.loop.run_forever, daemon=True)
    loop.start()
    server = Recorder()
    try:
        methods.publish(server, rt, NoEvals())  # type: ignore[arg-type]
        before = rt.ledger.limit()
        if refused:
            with pytest.raises(Refused) as caught:
                server.methods["set_budget"](3.0)
            said = str(caught.value)
            assert "\n" not in said and model in said and url in said and "amacs-price-table" in said, said
            assert rt.ledger.limit() == before and not (tmp_path / "h" / "budget-limit").exists()
        else:
            assert server.methods["set_budget"](3.0)["limit"] == 3.0 and rt.ledger.limit() == 3.0
    finally:
        rt.loop.call_soon_threadsafe(rt.loop.stop)
        loop.join(5)
        rt.stop(grace=0)


@pytest.mark.parametrize("url, said", [("https://models.example.org/v1", True), ("http://127.0.0.1:9/v1", False)])
def test_a_limit_given_at_start_on_a_model_with_no_price_is_said_not_kept(tmp_path, url, said):
    """AMACS_BUDGET_LIMIT (or a limit kept in the home) on a model nobody priced: hello says, in one
    line of the shell's greeting, that the limit cannot count its dollars and where a price goes."""
    from amacs_server import views
    from amacs_server.runtime import Runtime
    from tests.test_memory import SilentFace

    env = {"AMACS_HOME": str(tmp_path / "h"), "AMACS_BACKEND": "openai", "OPENAI_BASE_URL": url,
           "AMACS_MODEL": "gpt-oss-120b", "AMACS_BUDGET_LIMIT": "3"}
    rt = Runtime(load_config(env), SilentFace())
    try:
        notice = views.status(rt)["notice"] or ""
        lines = [line for line in notice.split("\n;; ") if "budget limit" in line]
        assert len(lines) == int(said), notice
        if said:
            assert lines[0].startswith("Your budget limit of $3.00 is not kept: a budget needs a price, and model "
                                       "gpt-oss-120b at https://models.example.org/v1 has none"), lines[0]
        rt.ledger.prices = {"gpt-oss": Price(0.5, 1.5, 0.5, 0.05)}  # amacs-price-table, given at hello
        assert "budget limit" not in (views.status(rt)["notice"] or "")
    finally:
        rt.stop(grace=0)


def test_the_endpoint_a_model_ran_at_says_whether_its_dollars_are_a_bill_or_an_estimate():
    """List prices are the provider's bill only at the provider's own API: for the tokens a fake, a proxy
    or a model of one's own under a listed name reported, they are an estimate, said with where it ran."""
    from amacs_server.inference.pricing import endpoint_host, list_priced_elsewhere

    assert endpoint_host("anthropic", None) == "api.anthropic.com"
    assert endpoint_host("openai", None) == "api.openai.com"
    assert endpoint_host("anthropic", "http://127.0.0.1:35029") == "127.0.0.1:35029"
    assert endpoint_host("openai", "https://me:secret@gw.example.org/v1") == "gw.example.org"  # never the password
    assert list_priced_elsewhere("anthropic", "claude-sonnet-4-5", "api.anthropic.com") is None  # the bill
    assert (list_priced_elsewhere("anthropic", "claude-sonnet-4-5", "127.0.0.1:35029")
            == "127.0.0.1:35029, not Anthropic's API")
    assert list_priced_elsewhere("openai", "gpt-oss-120b", "127.0.0.1:9") is None  # unlisted: free here
    mine = {"claude-sonnet-4-5": Price(1.0, 2.0, 1.0, 1.0)}
    assert list_priced_elsewhere("anthropic", "claude-sonnet-4-5", "gw.example.org", mine) is None  # the person's
    assert list_priced_elsewhere("anthropic", "claude-sonnet-4-5", None) is None  # not known where: not said


@pytest.mark.parametrize("url, environ, price, line", [
    ("http://127.0.0.1:35029", {}, "",
     "$0.4574 estimated at list prices (the model calls went to 127.0.0.1:35029, not Anthropic's API)"),
    ("", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:35029"}, "",  # the base URL the runs inherit
     "$0.4574 estimated at list prices (the model calls went to 127.0.0.1:35029, not Anthropic's API)"),
    ("https://api.anthropic.com", {}, "", "$0.4574 spent"),
    ("", {}, "", "$0.4574 spent"),
    ("http://127.0.0.1:35029", {}, "price = {input = 3.0, output = 15.0}", "$0.4574 spent")])  # the person's
def test_the_experiments_last_line_says_list_prices_of_another_servers_tokens_are_estimated(
        tmp_path, monkeypatch, url, environ, price, line):
    """The debate against the fake ended `$0.4574 spent`: list prices for the tokens the fake reported.
    The line says when the dollars are an estimate, and where the model ran."""
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    path = spec(tmp_path, "", price, url, backend="anthropic", model="claude-sonnet-4-5")
    (run,) = load_spec(path).runs
    assert experiment.cost_words([(0.4574, experiment.estimated_where(run))]) == line


def test_the_last_line_splits_a_bill_from_an_estimate_and_counts_the_unknown():
    words = experiment.cost_words([(0.25, None), (0.5, "127.0.0.1:1, not Anthropic's API"), (None, None)])
    assert words == ("$0.2500 spent and $0.5000 estimated at list prices (the model calls went to 127.0.0.1:1, "
                     "not Anthropic's API; and 1 run of a model with no price: cost unknown)")
    assert experiment.cost_words([(0.0, None)]) == "$0.0000 spent"


def test_no_answer_from_the_endpoint_is_said_so_not_estimated_at_list_prices():
    """A dead endpoint (newcomer8 #38): every run failed at its first call, $0.0000, which the line said
    was "estimated at list prices (the model calls went to 127.0.0.1:9 ...)" - no call went anywhere."""
    dead = "127.0.0.1:9, not Anthropic's API"
    assert experiment.cost_words([(0.0, dead)] * 4) == (
        "$0.0000: no model call got an answer (the model is at 127.0.0.1:9, not Anthropic's API)")
    # one answered call is an estimate again; an unknown cost is not known to be nothing
    assert experiment.cost_words([(0.0, dead), (0.01, dead)]).startswith("$0.0100 estimated at list prices")
    assert "no model call got an answer" not in experiment.cost_words([(0.0, dead), (None, dead)])
    assert experiment.cost_words([(0.0, dead)], earlier=0.0) == experiment.cost_words([(0.0, dead)])


def test_the_report_says_which_dollars_are_list_prices_of_another_servers_tokens(tmp_path):
    """Runs whose model ran at a fake (the manifest's endpoint): the page's first lines and its Prices
    table say their dollars are estimated at list prices, and where the model ran; at the provider's
    own API they are said as before."""
    write_runs(tmp_path, 8, errors=False)
    page = build_report(load(tmp_path), tmp_path, [], None).render("t")
    assert "estimated at list prices" not in page and "<b>Prices.</b>" not in page  # old runs: no endpoint
    for path in tmp_path.glob("*/manifest.json"):
        path.write_text(json.dumps({**json.loads(path.read_text()), "endpoint": "127.0.0.1:35029"}))
    con = load(tmp_path)
    assert {r[0] for r in con.execute("SELECT endpoint FROM runs").fetchall()} == {"127.0.0.1:35029"}
    page = build_report(con, tmp_path, [], None).render("t")
    assert "in all (all estimated at list prices: the model calls went to 127.0.0.1:35029, not Anthropic&#x27;s API" in page
    assert "list), estimated: the model calls went to 127.0.0.1:35029, not Anthropic&#x27;s API</td>" in page
