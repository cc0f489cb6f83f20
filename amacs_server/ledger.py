"""Cost and budget: the tick's and session's tallies, the price table, what was spent, the limit.

One ledger for every agent: the primary's calls and each subagent's are
charged here, and the budget every agent is held to is read from it.
"""

from __future__ import annotations

from typing import Any

from .config import DEMO_MODEL, LOCAL_ALIAS, Config
from .face import Face
from .inference.pricing import FREE, Price, Tally, Usage, cost, price_for
from .mind import Mind
from .model_slot import ModelSlot
from .persistence import person_limit, rewound_spend


class Ledger:
    """What the mind has spent (its own figure, and what futures a rewind abandoned cost) and
    may spend (the person's limit, else the mind's), counted by the price table."""

    def __init__(self, config: Config, mind: Mind, slot: ModelSlot) -> None:
        self.mind = mind
        self.slot = slot
        # the person's price table (AMACS_PRICES; `amacs-price-table' replaces it at hello)
        self.prices: dict[str, Price] = {m: Price(*p) for m, p in config.prices.items()}
        self.tick_tally = Tally()
        self.session_tally = Tally()
        self.rewound_spend = rewound_spend.read(mind.home)  # paid for futures a rewind abandoned
        # The limit the person set (AMACS_BUDGET_LIMIT, M-x amacs-set-budget): None, consciousness.el's.
        self.person_limit = config.budget_limit if config.budget_limit is not None else person_limit.read(mind.home)

    def spent(self) -> float:
        """The dollars the budget counts: the mind's figure and what futures a rewind abandoned cost."""
        return self.mind.consciousness.budget.cost_so_far + self.rewound_spend

    def limit(self) -> float:
        """The dollars the budget allows: the limit the person set, else the mind's."""
        return self.person_limit if self.person_limit is not None else self.mind.consciousness.budget.budget_limit

    def set_limit(self, dollars: float) -> None:
        """The person sets the limit (loop thread): enforced at once, kept in the home
        (persistence.person_limit), and the mind's budget item shows it from the next tick."""
        self.person_limit = dollars
        person_limit.write(self.mind.home, dollars)
        self.mind.consciousness.budget.budget_limit = dollars
        self.mind.memory.sync_state(self.mind.consciousness)
        self.mind.save_consciousness()

    def rewound(self, spent: float, limit: float | None) -> None:
        """After a rewind: the mind's budget is the tick's again; the SPENT before it stays counted,
        and the person's LIMIT stays; the views show the tick's usage as none."""
        self.rewound_spend = rewound_spend.keep(self.mind.home, spent, self.mind.consciousness.budget.cost_so_far)
        self.person_limit = limit
        self.tick_tally = Tally()

    def spending(self) -> dict[str, Any]:
        """The session's usage and cost, what the budget counts as spent, and its limit."""
        return {"session": self.session_tally.to_dict(), "spent": self.spent(), "budget_limit": self.limit()}

    def tell_ticked(self, face: Face) -> None:
        """Tell FACE the current tick is committed, with the tick's usage and the spending."""
        face.ticked(self.mind.consciousness.current_tick, {"this_tick": self.tick_tally.to_dict(), **self.spending()})

    def price_table(self) -> dict[str, Price]:
        """The prices the server counts by: the person's, and the model it runs itself (the local or
        the demo model) free unless the person's table prices it."""
        return ({LOCAL_ALIAS: FREE, **self.prices} if self.slot.config.local_model is not None
                else {DEMO_MODEL: FREE, **self.prices} if self.slot.demo is not None else self.prices)

    def budget_unkeepable(self) -> str | None:
        """Why a budget cannot be kept on the session's model, in one line: nobody gave its price
        (none listed, none in the person's table) and it is not served on this machine, so its calls
        cost unknown dollars a limit cannot count; None when its price is known or it is free."""
        model = self.slot.model
        if price_for(model, self.price_table(), local=self.slot.on_this_machine()) is not None:
            return None
        url = self.slot.url()
        return (f"a budget needs a price, and model {model}" + (f" at {url}" if url else "")
                + " has none: give it one in amacs-price-table (or AMACS_PRICES: dollars per million tokens), "
                "or use a priced model; until then its calls count tokens, not dollars")

    def charge(self, usage: Usage, model: str | None = None) -> float | None:
        """Count one model call's USAGE (of MODEL, default the session's) in this tick, the session
        and the budget; return dollars, or None when the model's price is unknown (its tokens are
        counted, its dollars not: never a guess)."""
        dollars = cost(model or self.slot.model, usage, self.price_table(), local=self.slot.on_this_machine())
        self.tick_tally.add(usage, dollars)
        self.session_tally.add(usage, dollars)
        self.mind.consciousness.budget.cost_so_far += dollars or 0.0
        return dollars
