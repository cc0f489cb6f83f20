"""Long-term memory in SQLite (memid-active-memory.md, Phase 2; DESIGN.md, Memory).

``memory.db`` in the AMACS home, WAL mode, not in git.  Every version of every
item is a row (copy-on-write); FTS5 indexes each version's text for keyword
search, ranked by BM25, with snippets.  Tags live in their own table.  The
search API takes a ``mode``: ``keyword`` today; ``vector`` is its place for an
embedding index.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .items import Kind, MemoryItem, Tier
from .memid import MemId

SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
  id INTEGER PRIMARY KEY,
  base TEXT NOT NULL,
  version INTEGER NOT NULL,
  tier TEXT NOT NULL,
  kind TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  content TEXT NOT NULL,
  text TEXT NOT NULL,
  UNIQUE (base, version)
);
CREATE TABLE IF NOT EXISTS tags (
  base TEXT NOT NULL,
  tag TEXT NOT NULL,
  PRIMARY KEY (base, tag)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS active (
  brain TEXT NOT NULL,
  base TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pinned', 'evicted')),
  version INTEGER,
  PRIMARY KEY (brain, base)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(
  text, content='items', content_rowid='id', tokenize='unicode61');
"""

_WORD = re.compile(r"\w+", re.UNICODE)


class LtmError(ValueError):
    """A long-term memory request that cannot be met; the message is for the agent."""


@dataclass(frozen=True)
class SearchHit:
    """One ranked search result."""

    mem_id: MemId
    kind: str
    score: float
    snippet: str

    def to_dict(self) -> dict[str, object]:
        """JSON/plist-ready."""
        return {"mem_id": self.mem_id.format(), "kind": self.kind, "score": round(self.score, 4),
                "snippet": self.snippet}


def fts_query(query: str) -> str:
    """Turn free text into an FTS5 query: each word quoted, any word may match (ranked)."""
    words = _WORD.findall(query)
    if not words:
        raise LtmError(f"search query {query!r} has no words to look for")
    return " OR ".join(f'"{w}"' for w in words)


class LongTermMemory:
    """The SQLite store.  Used from one thread (the runtime's loop)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One durable transaction: everything inside commits together, or none of it."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def put(self, item: MemoryItem) -> None:
        """Store one version; an existing (base, version) is an error."""
        with self.transaction():
            try:
                cur = self.db.execute(
                    "INSERT INTO items (base, version, tier, kind, created_at_ms, content, text) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (item.mem_id.base, item.version, item.tier.value, item.kind.value, item.created_at_ms,
                     json.dumps(item.content, ensure_ascii=False), item.text()),
                )
            except sqlite3.IntegrityError as err:
                raise LtmError(f"{item.mem_id} already exists") from err
            self.db.execute("INSERT INTO items_fts (rowid, text) VALUES (?, ?)", (cur.lastrowid, item.text()))
            for tag in item.tags:
                self.db.execute("INSERT OR IGNORE INTO tags (base, tag) VALUES (?, ?)", (item.mem_id.base, tag))

    def put_many(self, items: Iterable[MemoryItem]) -> None:
        """Store many versions in one transaction."""
        with self.transaction():
            for item in items:
                self.put(item)

    def get(self, mem_id: MemId) -> MemoryItem:
        """The version MEM_ID names, or the latest when it names none."""
        if mem_id.version is None:
            row = self.db.execute(
                "SELECT base, version, tier, kind, created_at_ms, content FROM items WHERE base=? "
                "ORDER BY version DESC LIMIT 1", (mem_id.base,)).fetchone()
        else:
            row = self.db.execute(
                "SELECT base, version, tier, kind, created_at_ms, content FROM items WHERE base=? AND version=?",
                (mem_id.base, mem_id.version)).fetchone()
        if row is None:
            latest = self.latest_version(mem_id.base)
            if latest is None:
                raise LtmError(f"no memory item {mem_id.at(None)}")
            raise LtmError(f"{mem_id} does not exist; versions 1..{latest} do")
        return self._item(row)

    def latest_version(self, base: str) -> int | None:
        """The newest version number of BASE, or None."""
        row = self.db.execute("SELECT max(version) FROM items WHERE base=?", (base,)).fetchone()
        return row[0]

    def versions(self, base: str) -> list[int]:
        """Every stored version of BASE, oldest first."""
        return [r[0] for r in self.db.execute("SELECT version FROM items WHERE base=? ORDER BY version", (base,))]

    def bases_with_prefix(self, agent_brain: str, prefix: str) -> set[str]:
        """Bases of AGENT_BRAIN (``agent:brain``) whose name starts with PREFIX."""
        pattern = f"{agent_brain}:{prefix}%"
        return {r[0] for r in self.db.execute("SELECT DISTINCT base FROM items WHERE base LIKE ?", (pattern,))}

    def tags_of(self, base: str) -> tuple[str, ...]:
        """The tags of BASE."""
        return tuple(r[0] for r in self.db.execute("SELECT tag FROM tags WHERE base=? ORDER BY tag", (base,)))

    def search(self, query: str, *, limit: int = 10, tags: tuple[str, ...] = (), mode: str = "keyword",
               agent_brain: str | None = None) -> list[SearchHit]:
        """Ranked hits, best first, one per item (its best-matching version)."""
        if mode == "vector":
            raise LtmError("vector search has no index configured yet; use mode keyword")
        if mode != "keyword":
            raise LtmError(f"unknown search mode {mode!r}; use keyword")
        if not 1 <= limit <= 100:
            raise LtmError(f"limit must be within 1..100, got {limit}")
        sql = (
            "SELECT i.base, i.version, i.kind, bm25(items_fts) AS score, "
            "snippet(items_fts, 0, '[', ']', '…', 12) "
            "FROM items_fts JOIN items i ON i.id = items_fts.rowid WHERE items_fts MATCH ?"
        )
        args: list[object] = [fts_query(query)]
        if agent_brain:
            sql += " AND i.base LIKE ?"
            args.append(f"{agent_brain}:%")
        for tag in tags:
            sql += " AND i.base IN (SELECT base FROM tags WHERE tag = ?)"
            args.append(tag)
        sql += " ORDER BY score LIMIT ?"
        args.append(limit * 4)
        hits: dict[str, SearchHit] = {}
        for base, version, kind, score, snip in self.db.execute(sql, args):
            if base not in hits:
                hits[base] = SearchHit(MemId.from_base(base, version), kind, -score, snip)
            if len(hits) == limit:
                break
        return list(hits.values())

    # -- the active set, so a restart restores what the brain had pinned or evicted --

    def set_active(self, brain: str, base: str, status: str | None, version: int | None = None) -> None:
        """Record BASE as pinned or evicted for BRAIN (None: neither)."""
        with self.transaction():
            if status is None:
                self.db.execute("DELETE FROM active WHERE brain=? AND base=?", (brain, base))
            else:
                self.db.execute(
                    "INSERT INTO active (brain, base, status, version) VALUES (?,?,?,?) "
                    "ON CONFLICT (brain, base) DO UPDATE SET status=excluded.status, version=excluded.version",
                    (brain, base, status, version))

    def active_set(self, brain: str) -> list[tuple[str, str, int | None]]:
        """(base, status, version) of every pinned or evicted item of BRAIN."""
        return list(self.db.execute("SELECT base, status, version FROM active WHERE brain=?", (brain,)))

    def count(self) -> int:
        """How many versions are stored."""
        return self.db.execute("SELECT count(*) FROM items").fetchone()[0]

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    def _item(self, row: tuple) -> MemoryItem:
        base, version, tier, kind, created, content = row
        return MemoryItem(MemId.from_base(base, version), Tier(tier), Kind(kind), json.loads(content),
                          created, self.tags_of(base))
