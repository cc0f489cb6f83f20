"""A budget on a model nobody priced: M-x amacs-set-budget in a real Emacs, against the real server.

A limit is counted in dollars; a model with no price (none listed, none in `amacs-price-table')
that is not served on this machine has calls whose dollars are unknown, so a limit on it is
refused in one line in the shell, the limit left as it was.  Given a price in
`amacs-price-table' (sent before the limit, with no input between), the same command sets it.
A limit given at start on such a model is said, in one line of the greeting, not to be kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.harness import run_emacs

pytestmark = pytest.mark.e2e

ELSEWHERE = "http://models.invalid/v1"  # not this machine; never asked (setting a limit calls no model)


def test_a_budget_on_an_unpriced_model_is_refused_until_the_person_prices_it(fake, home: Path) -> None:
    limit = ("(plist-get (buffer-local-value 'amacs-shell-usage (get-buffer amacs-shell-buffer-name)) "
             ":budget-limit)")
    program = (
        "(amacs-e2e-open) "
        "(amacs-set-budget 3) (amacs-e2e-wait-text \"a budget needs a price\") "
        f"(princ (format \"REFUSED-LIMIT=%s\\n\" {limit})) "
        "(setq amacs-price-table '((\"gpt-oss\" 0.5 1.5 0.5 0.05))) "
        f"(amacs-set-budget 3) (amacs-e2e-wait (lambda () (eql {limit} 3.0)) \"the limit set\") "
        "(amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program, AMACS_BACKEND="openai", OPENAI_BASE_URL=ELSEWHERE,
                    OPENAI_API_KEY="sk-test", AMACS_MODEL="gpt-oss-120b").check()
    refusals = [line for line in run.shell.splitlines() if "a budget needs a price" in line]
    assert len(refusals) == 1, run.shell  # one line, once: the priced model's limit is not refused
    assert "gpt-oss-120b" in refusals[0] and ELSEWHERE in refusals[0] and "amacs-price-table" in refusals[0]
    assert "REFUSED-LIMIT=3" not in run.stdout, run.stdout  # the refused limit was not set
    assert (home / "budget-limit").read_text().strip().startswith("3"), "the priced model's limit is kept"
    assert not fake.requests  # setting a limit asks no model


def test_a_limit_given_at_start_on_an_unpriced_model_is_said_not_kept_in_the_greeting(fake, home: Path) -> None:
    run = run_emacs(home, fake.url, "(amacs-e2e-open) (amacs-e2e-finish)", AMACS_BACKEND="openai",
                    OPENAI_BASE_URL=ELSEWHERE, OPENAI_API_KEY="sk-test", AMACS_MODEL="gpt-oss-120b",
                    AMACS_BUDGET_LIMIT="3").check()
    said = [line for line in run.shell.splitlines() if "budget limit" in line]
    assert said == [f";; Your budget limit of $3.00 is not kept: a budget needs a price, and model gpt-oss-120b at "
                    f"{ELSEWHERE} has none: give it one in amacs-price-table (or AMACS_PRICES: dollars per million "
                    "tokens), or use a priced model; until then its calls count tokens, not dollars."], run.shell


def test_a_switch_to_an_unpriced_model_says_at_once_that_the_limit_is_not_kept(fake, home: Path) -> None:
    program = (f"(amacs-e2e-open) (amacs-set-model \"openai\" \"gpt-oss-120b\" \"{ELSEWHERE}\") "
               "(amacs-e2e-wait-text \"is not kept\") (amacs-e2e-finish)")
    run = run_emacs(home, fake.url, program, OPENAI_API_KEY="sk-test", AMACS_BUDGET_LIMIT="3").check()
    said = [line for line in run.shell.splitlines() if "budget limit" in line]
    assert len(said) == 1 and said[0].startswith(";; Now using gpt-oss-120b on openai at "), run.shell
    assert "Your budget limit of $3.00 is not kept: a budget needs a price, and model gpt-oss-120b" in said[0]
    assert not fake.requests  # a switch asks no model
