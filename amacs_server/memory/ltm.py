"""Long-term memory in SQLite (docs/ARCHITECTURE.md, Memory and MemIds).

``memory.db`` in the AMACS home, WAL mode, not in git.  Every version of every
item is a row (copy-on-write); FTS5 indexes each version's text for keyword
search, ranked by FTS5's own ``bm25()``, with snippets.  Tags live in their own
table.  The search API takes a ``mode``: ``keyword`` today; ``vector`` is its
place for an embedding index.

Durability: ``synchronous=NORMAL`` with WAL.  A commit is then safe against the
server crashing or being killed (the WAL is written before COMMIT returns; the
OS has it), and the file is never corrupted; only a power loss or an OS crash
can lose the last few commits, which are synced at the next checkpoint.  That
is enough here because ``memory.db`` is a checkpoint, not the record: the
person's input is fsynced to ``agent-chat.org`` before the model is called, the
monologue and scratchpad are in their org files, and on start-up
:meth:`ActiveMemory.restore` brings the database level with the org files,
which win.  ``FULL`` would fsync the WAL on every commit, several per tick.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import faults
from ..errors import AmacsError
from ..files import atomic_write
from .items import Kind, MemoryItem, Tier
from .memid import MemId

log = logging.getLogger("amacs.memory")

# A version's searchable text is its content's own (MemoryItem.text(): a JSON string's value, else
# the JSON as stored), so ``items.text`` holds '' for it, not a second copy of the content (~40 % of
# the table).  A database made before the full-text index read the view ``items_text`` keeps the
# copy in every row and goes on writing it (its index reads ``items.text``: OWN_TEXT_INDEX).
# CONTENT_TEXT is that text, TEXT_OF a row's text either way; the index is given, and takes out, exactly that.
CONTENT_TEXT = "CASE WHEN json_type(content) = 'text' THEN json_extract(content, '$') ELSE content END"
TEXT_OF = f"CASE WHEN text <> '' THEN text ELSE {CONTENT_TEXT} END"
# The index's content: a view that gives each row's text as TEXT_OF reads it.
OWN_TEXT_INDEX = "content='items_text'"
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
  since INTEGER,
  PRIMARY KEY (base, tag)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS active (
  brain TEXT NOT NULL,
  base TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pinned', 'evicted')),
  version INTEGER,
  PRIMARY KEY (brain, base)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS level (
  file TEXT PRIMARY KEY,
  digest TEXT NOT NULL
) WITHOUT ROWID;
CREATE VIEW IF NOT EXISTS items_text AS SELECT id, {text_of} AS text FROM items;
CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(
  text, {own_text_index}, content_rowid='id', tokenize='unicode61 remove_diacritics 0');
DROP TABLE IF EXISTS term_df;
""".replace("{text_of}", TEXT_OF).replace("{own_text_index}", OWN_TEXT_INDEX)
# A tag's ``since``: the row id of the item version that first gave its base the tag (a base's
# tags are every tag any of its versions had).  Memory as at a tick holds the tags whose
# ``since`` is at most the tick's highest row id.  NULL: a tag kept before ``since`` was (a
# database made earlier, or salvaged), taken to have come with the base's first version.
TAGS_SINCE = "ALTER TABLE tags ADD COLUMN since INTEGER"

_WORD = re.compile(r"[^\W_]+", re.UNICODE)  # what FTS5's unicode61 calls a token
# A word in more items than this is ranked at a cost that grows with its item
# count (bm25() is computed for every matching row, ~2 us each, before the
# ORDER BY ... LIMIT keeps the best); it also says little about relevance.
# Such words are left out when rarer words are in the query; a query of only
# such words is ranked by bm25() over its most recent COMMON_POOL matches (a
# rowid range FTS5 seeks to), with IDF still over the whole index.  Document
# frequencies are FTS5's own, counted only up to COMMON_DF + 1 per word, so
# they are exact, bounded in cost, and right after any rollback.
COMMON_DF = 2000
COMMON_POOL = 500
SNIPPET_TOKENS = 12


class LtmError(AmacsError, ValueError):
    """A long-term memory request that cannot be met; the message is for the agent."""


# SQLite's result codes for a damaged file (anything else, e.g. a lock, is not damage).
_DAMAGED = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
SALVAGE_CHUNK = 500


def damaged(err: sqlite3.DatabaseError) -> bool:
    """True when ERR says the database file is damaged (not locked, not unwritable)."""
    code = getattr(err, "sqlite_errorcode", None)
    return (code is not None and code & 0xFF in _DAMAGED) or (
        code is None and ("malformed" in str(err) or "not a database" in str(err)))


def has_column(db: sqlite3.Connection, table: str, column: str, schema: str = "main") -> bool:
    """True when TABLE of DB's SCHEMA (an attached database's name) has COLUMN."""
    return any(row[1] == column for row in db.execute(f"PRAGMA {schema}.table_info({table})"))


def own_text_index(db: sqlite3.Connection) -> bool:
    """True when DB's full-text index reads each row's text from the view (its rows keep no
    copy of their content's text: TEXT_OF)."""
    row = db.execute("SELECT sql FROM sqlite_master WHERE name = 'items_fts'").fetchone()
    return row is not None and OWN_TEXT_INDEX in row[0]


def _seal_of(path: Path) -> Path:
    return path.with_name(path.name + ".clean")


def _identity(path: Path) -> list[int]:
    """What changes whenever PATH is written to or replaced (ctime cannot be set back)."""
    st = path.stat()
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _wal_is_empty(path: Path) -> bool:
    wal = path.with_name(path.name + "-wal")
    try:
        return wal.stat().st_size == 0
    except FileNotFoundError:
        return True


def sealed(path: Path) -> bool:
    """True when the database at PATH is as a clean :meth:`LongTermMemory.close` left it:
    nothing in its WAL, and the file not written to or replaced since."""
    try:
        return _wal_is_empty(path) and json.loads(_seal_of(path).read_text(encoding="utf-8")) == _identity(path)
    except (OSError, ValueError):
        return False


def check_database(path: Path) -> str | None:
    """What is wrong with the SQLite database at PATH, or None when it is sound (or absent).

    ``PRAGMA integrity_check`` reads every page: ~25 ms for a 40 MB ``memory.db``,
    ~0.24 s for 400 MB (page cache warm), 0.6-0.9 s for the 167 MB of a 50 MB chat
    log on two loaded cores; ``quick_check`` saves only ~10 % here, as the only
    index is the UNIQUE (base, version) one.  So it is skipped for a database
    that was closed cleanly and not touched since (:func:`sealed`): start-up
    does not grow with history; after a crash, or anything that wrote
    to the file, it runs.  Errors that are not damage (a lock, an unreadable
    file) are raised."""
    if not path.exists() or sealed(path):
        return None
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
    try:
        rows = db.execute("PRAGMA integrity_check(5)").fetchall()
    except sqlite3.DatabaseError as err:
        if damaged(err):
            return str(err)
        raise
    finally:
        db.close()
    problems = [str(r[0]) for r in rows if r and r[0] != "ok"]
    return "; ".join(problems)[:300] if problems else None


@dataclass(frozen=True)
class SearchHit:
    """One ranked search result."""

    mem_id: MemId
    kind: str
    score: float
    snippet: str
    latest: int | None = None  # the item's newest version, when it is newer than the hit (and does not match)

    def to_dict(self) -> dict[str, object]:
        """JSON/plist-ready (``latest`` only when the item has a newer version than the hit)."""
        found: dict[str, object] = {"mem_id": self.mem_id.format(), "kind": self.kind,
                                    "score": float(f"{self.score:.4g}"), "snippet": self.snippet}
        if self.latest is not None:
            found["latest"] = self.latest
        return found


def query_words(query: str) -> list[str]:
    """The distinct words of QUERY, lowercased, in order."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    if not words:
        raise LtmError(f"search query {query!r} has no words to look for")
    return words


def snippet(text: str, words: list[str], size: int = SNIPPET_TOKENS) -> str:
    """The SIZE tokens of TEXT that hold the most distinct WORDS (then the most matches),
    each match in [brackets], '…' where text is cut, as FTS5's snippet() shows them.

    Computed from the stored text in Python, for the hits only: asking FTS5 for a
    snippet re-runs the MATCH for the row, which seeks through every query word's
    doclist (measured 0.3 ms a hit at best for common words on a 5,000-tick
    ``memory.db``, ~1 ms under load), where this reads one row and scans its
    tokens (~0.2 ms of CPU for a 400-word reply).
    """
    wanted = set(words)
    tokens = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    if not tokens:
        return ""
    hits = [i for i, (a, b) in enumerate(tokens) if text[a:b].lower() in wanted]
    word = {i: text[tokens[i][0]:tokens[i][1]].lower() for i in hits}
    best, start = (0, 0), 0
    inside: Counter[str] = Counter()
    last = 0
    for j, first in enumerate(hits):  # windows starting at each match (two pointers: linear)
        while last < len(hits) and hits[last] < first + size:
            inside[word[hits[last]]] += 1
            last += 1
        score = (len(inside), last - j)
        if score > best:  # centred on the matches it holds
            lead = (size - (hits[last - 1] - first + 1)) // 2
            best, start = score, max(0, min(first - lead, len(tokens) - size))
        inside[word[first]] -= 1
        if not inside[word[first]]:
            del inside[word[first]]
    end = min(start + size, len(tokens))
    marked = set(hits)
    out = ["…" if start > 0 else text[:tokens[0][0]]]
    for i in range(start, end):
        a, b = tokens[i]
        if i > start:
            out.append(text[tokens[i - 1][1]:a])
        out.append(f"[{text[a:b]}]" if i in marked else text[a:b])
    out.append("…" if end < len(tokens) else text[tokens[-1][1]:])
    return "".join(out)


def fts_query(words: list[str], phrase: list[str] | None = None) -> str:
    """An FTS5 query in which any of WORDS may match (ranked); no query syntax leaks through.

    With PHRASE (two words or more), the words of PHRASE in that order are one more
    phrase of the query: bm25() sums over the query's phrases, so an item holding
    the exact phrase (a heading, a name) scores that phrase's weight on top of its
    words', and the phrase, rarer than any of its words, weighs more."""
    phrases = [" ".join(phrase)] if phrase and len(phrase) > 1 else []
    return " OR ".join(f'"{w}"' for w in [*phrases, *words])


class DatabaseCheck:
    """:func:`check_database` of PATH in a thread of its own, from now on (it reads every page,
    mostly outside the GIL: start-up goes on meanwhile); :meth:`result` waits for it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._problem: str | None = None
        self._error: sqlite3.Error | None = None
        self._thread = threading.Thread(target=self._run, name="amacs-db-check", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._problem = check_database(self.path)
        except sqlite3.Error as err:
            self._error = err

    def result(self) -> str | None:
        """What is wrong with the database, or None; its errors that are not damage are raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._problem


class LongTermMemory:
    """The SQLite store.  Used from one thread (the runtime's loop)."""

    def __init__(self, path: Path, *, common_df: int = COMMON_DF, common_pool: int = COMMON_POOL,
                 unsynced: bool = False) -> None:
        """UNSYNCED: a file being made, synced whole by its maker once made (a fork's, a memory
        snapshot's): nothing is synced here, not even its switch to WAL (a file just copied would
        wait there for all its bytes to be written)."""
        self.path = path
        self.common_df = common_df
        self.common_pool = common_pool
        _seal_of(path).unlink(missing_ok=True)  # open: a crash from now on leaves it unsealed
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        # NORMAL: why in the module's docstring.
        self.db.execute(f"PRAGMA synchronous={'OFF' if unsynced else 'NORMAL'}")
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        if not has_column(self.db, "tags", "since"):
            self.db.execute(TAGS_SINCE)
        self.own_text = own_text_index(self.db)
        self._soon = False  # the open transaction is the one versions put soon wait in

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One durable transaction: everything inside commits together, or none of it.

        The versions put soon (:meth:`put`) are committed first: whatever commits here, and
        whatever was put before it, is in the database when this returns."""
        self.commit()
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        faults.point("ltm.commit")
        self.db.execute("COMMIT")

    def commit(self) -> None:
        """Commit the versions put soon that wait (nothing when none does)."""
        if self._soon:
            self._soon = False
            faults.point("ltm.commit")
            self.db.execute("COMMIT")

    def _begin_soon(self) -> bool:
        """Open the transaction that versions put soon share, committed at the end of this turn
        of the running event loop; False (nothing opened) outside one, or inside another transaction."""
        if self.db.in_transaction:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self.db.execute("BEGIN IMMEDIATE")
        self._soon = True
        loop.call_soon(self.commit)
        return True

    def put(self, item: MemoryItem, *, soon: bool = False) -> None:
        """Store one version; an existing (base, version) is an error.

        SOON: committed with the other versions put soon in the same turn of the event loop,
        at its end, or earlier (by :meth:`commit`, any other transaction, :meth:`close`):
        each commit of a version costs ~0.2 ms of the loop, most of it FTS5 writing a segment of
        its own; one commit of many costs ~0.04 ms a version.  Read back at once, as any other.
        For a version nothing has reported as written yet: a kill before the turn ends loses it."""
        if soon and (self._soon or self._begin_soon()):
            self.db.execute("SAVEPOINT put")  # this version whole or not at all, as in its own transaction
            try:
                self._insert(item)
            except BaseException:
                self.db.execute("ROLLBACK TO put")
                self.db.execute("RELEASE put")
                raise
            self.db.execute("RELEASE put")
            return
        with self.transaction():
            self._insert(item)

    def _insert(self, item: MemoryItem) -> None:
        """The rows of one version (inside a transaction)."""
        try:
            cur = self.db.execute(
                "INSERT INTO items (base, version, tier, kind, created_at_ms, content, text) "
                "VALUES (?,?,?,?,?,?,?)",
                (item.mem_id.base, item.version, item.tier.value, item.kind.value, item.created_at_ms,
                 json.dumps(item.content, ensure_ascii=False), "" if self.own_text else item.text()),
            )
        except sqlite3.IntegrityError as err:
            raise LtmError(f"{item.mem_id} already exists") from err
        self.db.execute("INSERT INTO items_fts (rowid, text) VALUES (?, ?)", (cur.lastrowid, item.text()))
        for tag in item.tags:
            self.db.execute("INSERT OR IGNORE INTO tags (base, tag, since) VALUES (?, ?, ?)",
                            (item.mem_id.base, tag, cur.lastrowid))

    def get(self, mem_id: MemId) -> MemoryItem:
        """The version MEM_ID names, or the latest when it names none."""
        item = self.find(mem_id)
        if item is None:
            latest = self.latest_version(mem_id.base)
            if latest is None:
                raise LtmError(f"no memory item {mem_id.at(None)}")
            raise LtmError(f"{mem_id} does not exist; versions 1..{latest} do")
        return item

    def find(self, mem_id: MemId) -> MemoryItem | None:
        """Like :meth:`get`, but None when there is no such item (one query)."""
        if mem_id.version is None:
            row = self.db.execute(
                "SELECT base, version, tier, kind, created_at_ms, content FROM items WHERE base=? "
                "ORDER BY version DESC LIMIT 1", (mem_id.base,)).fetchone()
        else:
            row = self.db.execute(
                "SELECT base, version, tier, kind, created_at_ms, content FROM items WHERE base=? AND version=?",
                (mem_id.base, mem_id.version)).fetchone()
        return self._item(row) if row is not None else None

    def latest_version(self, base: str) -> int | None:
        """The newest version number of BASE, or None."""
        row = self.db.execute("SELECT max(version) FROM items WHERE base=?", (base,)).fetchone()
        return None if row[0] is None else int(row[0])

    def bases_with_prefix(self, agent_brain: str, prefix: str) -> set[str]:
        """Bases of AGENT_BRAIN (``agent:brain``) whose name starts with PREFIX.

        A range of the (base, version) index, not LIKE (which scanned every version
        of every item: ~0.1 s at start-up for 50 MB of chat; and read ``_``
        in an id as a wildcard)."""
        low = f"{agent_brain}:{prefix}"
        high = low[:-1] + chr(ord(low[-1]) + 1)  # the first string past every one starting with LOW
        return {r[0] for r in self.db.execute("SELECT DISTINCT base FROM items WHERE base >= ? AND base < ?",
                                              (low, high))}

    def latest_with_prefix(self, agent_brain: str, prefix: str) -> dict[str, MemoryItem]:
        """The latest version of every item of AGENT_BRAIN whose name starts with PREFIX, by base:
        what :meth:`find` gives for each, in two queries (a range of the (base, version) index)."""
        low = f"{agent_brain}:{prefix}"
        high = low[:-1] + chr(ord(low[-1]) + 1)
        tags: dict[str, list[str]] = {}
        for base, tag in self.db.execute("SELECT base, tag FROM tags WHERE base >= ? AND base < ? ORDER BY base, tag",
                                         (low, high)):
            tags.setdefault(base, []).append(tag)
        rows = self.db.execute(
            "SELECT base, version, tier, kind, created_at_ms, content FROM items AS i WHERE base >= ? AND base < ? "
            "AND version = (SELECT max(version) FROM items WHERE base = i.base)", (low, high))
        return {base: MemoryItem(MemId.stored(base, version), Tier(tier), Kind(kind), json.loads(content),
                                 created, tuple(tags.get(base, ())))
                for base, version, tier, kind, created, content in rows}

    def level(self, file: str) -> str | None:
        """The digest of FILE's bytes (an org file of the home) when this database was last known
        to hold every item of it as read from them (:meth:`set_level`), or None."""
        row = self.db.execute("SELECT digest FROM level WHERE file=?", (file,)).fetchone()
        return None if row is None else str(row[0])

    def set_level(self, file: str, digest: str | None) -> None:
        """Record that this database holds every item of FILE as its bytes of DIGEST say (None:
        that nothing is known)."""
        with self.transaction():
            if digest is None:
                self.db.execute("DELETE FROM level WHERE file=?", (file,))
            else:
                self.db.execute("INSERT OR REPLACE INTO level (file, digest) VALUES (?, ?)", (file, digest))

    def tags_of(self, base: str) -> tuple[str, ...]:
        """The tags of BASE."""
        return tuple(r[0] for r in self.db.execute("SELECT tag FROM tags WHERE base=? ORDER BY tag", (base,)))

    def search(self, query: str, *, limit: int = 10, tags: tuple[str, ...] = (), mode: str = "keyword",
               agent_brain: str | None = None) -> list[SearchHit]:
        """Ranked hits, best first, one per item: its newest version that matches, ranked by the
        best score of any of its versions (an old version's shorter text must not hide the
        newer one the item has); ``latest`` names a newer version that does not match."""
        if mode == "vector":
            raise LtmError("vector search has no index configured yet; use mode keyword")
        if mode != "keyword":
            raise LtmError(f"unknown search mode {mode!r}; use keyword")
        if not 1 <= limit <= 100:
            raise LtmError(f"limit must be within 1..100, got {limit}")
        words = query_words(query)
        df = {w: self._doc_count(w) for w in words}
        present = [w for w in words if df[w]]
        if not present:
            return []
        selective = [w for w in present if df[w] <= self.common_df]
        ranked_words = selective or present
        since = 0
        if not selective:  # only near-universal words: rank the most recent matches
            row = self.db.execute(
                "SELECT rowid FROM items_fts WHERE items_fts MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                (fts_query(present), self.common_pool - 1)).fetchone()
            since = row[0] if row else 0
        # The query as typed is a phrase too, when every word of it is in some item and one is
        # not near-universal: a phrase of such words only would be matched (positions compared)
        # in most items, ~2x the cost of the common-words query (bench_memory).
        typed = [w.lower() for w in _WORD.findall(query)]
        match = fts_query(ranked_words, typed if selective and len(present) == len(words) else None)
        keep = self._filter(tags, agent_brain)
        hits: list[SearchHit] = []
        page, offset = limit * 4, 0
        while len(hits) < limit:  # rank, then filter; fetch further pages only if filters drop rows
            ranked = self.db.execute(
                "SELECT rowid, bm25(items_fts) FROM items_fts WHERE items_fts MATCH ? AND rowid >= ? "
                "ORDER BY bm25(items_fts), rowid DESC LIMIT ? OFFSET ?", (match, since, page, offset)).fetchall()
            hits = self._hits([(r, -score) for r, score in ranked], ranked_words, limit, keep, hits, match)
            if len(ranked) < page:
                break
            offset += page
            page *= 4
        return hits

    def _doc_count(self, word: str) -> int:
        """How many versions hold WORD, counted by FTS5 up to ``common_df + 1`` (bounded cost)."""
        row = self.db.execute(
            "SELECT count(*) FROM (SELECT 1 FROM items_fts WHERE items_fts MATCH ? LIMIT ?)",
            (fts_query([word]), self.common_df + 1)).fetchone()
        return int(row[0])

    def _filter(self, tags: tuple[str, ...], agent_brain: str | None) -> Callable[[str], bool]:
        """A test of an item's base: in AGENT_BRAIN, and carrying every one of TAGS."""
        prefix = f"{agent_brain}:" if agent_brain else ""

        def keep(base: str) -> bool:
            if not base.startswith(prefix):
                return False
            return all(self.db.execute("SELECT 1 FROM tags WHERE base=? AND tag=?", (base, t)).fetchone()
                       for t in tags)

        return keep

    def _hits(self, scored: list[tuple[int, float]], words: list[str], limit: int,
              keep: Callable[[str], bool], already: list[SearchHit] | None = None,
              match: str | None = None) -> list[SearchHit]:
        """One hit per kept item, best first, its newest version that MATCH finds; snippets
        computed for the hits only."""
        hits = list(already or [])
        seen = {h.mem_id.base for h in hits}
        for rowid, score in scored:
            if len(hits) == limit:
                break
            base, version, kind = self.db.execute(
                "SELECT base, version, kind FROM items WHERE id=?", (rowid,)).fetchone()
            if base in seen or not keep(base):
                continue
            seen.add(base)
            latest: int | None = None
            for newer, newer_version, newer_kind in self.db.execute(  # newest first: few versions an item
                    "SELECT id, version, kind FROM items WHERE base=? AND version>? ORDER BY version DESC",
                    (base, version)).fetchall():
                latest = latest or newer_version
                if match is not None and self.db.execute(
                        "SELECT 1 FROM items_fts WHERE items_fts MATCH ? AND rowid=?", (match, newer)).fetchone():
                    rowid, version, kind = newer, newer_version, newer_kind
                    break
            text = self.db.execute(f"SELECT {TEXT_OF} FROM items WHERE id=?", (rowid,)).fetchone()[0]
            hits.append(SearchHit(MemId.from_base(base, version), kind, score, snippet(text, words),
                                  latest if latest is not None and latest > version else None))
        return hits

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

    def active_items(self, brain: str) -> list[tuple[str, MemoryItem]]:
        """(status, item) of every pinned or evicted item of BRAIN: :meth:`active_set` with a
        :meth:`get` of each row's version, in two queries, not two a row (a home's 800 pinned
        notes were 1,600 reads at every start)."""
        tags: dict[str, list[str]] = {}
        for base, tag in self.db.execute("SELECT t.base, t.tag FROM active AS a JOIN tags AS t ON t.base = a.base "
                                         "WHERE a.brain = ? ORDER BY t.base, t.tag", (brain,)):
            tags.setdefault(base, []).append(tag)
        out = []
        for base, status, wanted, version, tier, kind, created, content in self.db.execute(
                "SELECT a.base, a.status, a.version, i.version, i.tier, i.kind, i.created_at_ms, i.content "
                "FROM active AS a LEFT JOIN items AS i ON i.base = a.base AND i.version = "
                "coalesce(a.version, (SELECT max(version) FROM items WHERE base = a.base)) "
                "WHERE a.brain = ? ORDER BY a.base", (brain,)):
            if version is None:
                out.append((status, self.get(MemId.from_base(base, wanted))))  # raises as get does
            else:
                out.append((status, MemoryItem(MemId.stored(base, version), Tier(tier), Kind(kind),
                                               json.loads(content), created, tuple(tags.get(base, ())))))
        return out

    def count(self) -> int:
        """How many versions are stored."""
        return int(self.db.execute("SELECT count(*) FROM items").fetchone()[0])

    def close(self) -> None:
        """Close the database (the versions put soon committed); sealed (:func:`sealed`) if SQLite
        left nothing in its WAL."""
        self.commit()
        self.db.close()
        try:
            if self.path.exists() and _wal_is_empty(self.path):
                atomic_write(_seal_of(self.path), json.dumps(_identity(self.path)))
        except OSError as err:  # not sealed: the next start checks every page
            log.warning("could not mark %s as closed cleanly: %s", self.path, err)

    def salvage_from(self, old: Path) -> int:
        """Copy into this (new) database every item version, tag and active-set entry that can
        still be read from the damaged database OLD; return how many versions were copied.

        Rows are read by id in chunks, a failing chunk one id at a time, so the
        rows on sound pages are kept and those on damaged pages skipped."""
        try:
            src = sqlite3.connect(old, isolation_level=None, check_same_thread=False)
        except sqlite3.Error:
            return 0
        copied = 0
        try:
            try:
                top = src.execute("SELECT max(id) FROM items").fetchone()[0] or 0
            except sqlite3.Error:
                return 0
            cols = "SELECT base, version, tier, kind, created_at_ms, content FROM items"
            with self.transaction():
                for first in range(1, int(top) + 1, SALVAGE_CHUNK):
                    try:
                        rows = src.execute(f"{cols} WHERE id BETWEEN ? AND ? ORDER BY id",
                                           (first, first + SALVAGE_CHUNK - 1)).fetchall()
                    except sqlite3.Error:
                        rows = []
                        for rowid in range(first, min(first + SALVAGE_CHUNK, int(top) + 1)):
                            try:
                                rows.extend(src.execute(f"{cols} WHERE id = ?", (rowid,)).fetchall())
                            except sqlite3.Error:
                                continue
                    for row in rows:
                        try:
                            MemId.from_base(row[0], row[1])  # a damaged page may hold any text: checked
                            self.put(self._item(row))
                        except (LtmError, ValueError, TypeError, KeyError):
                            continue
                        copied += 1
                for table, insert in (("tags", "INSERT OR IGNORE INTO tags (base, tag) VALUES (?, ?)"),
                                      ("active", "INSERT OR IGNORE INTO active (brain, base, status, version) "
                                                 "VALUES (?, ?, ?, ?)")):
                    names = "base, tag" if table == "tags" else "brain, base, status, version"
                    try:
                        found = src.execute(f"SELECT {names} FROM {table}").fetchall()  # noqa: S608 - fixed names
                    except sqlite3.Error:
                        continue
                    for row in found:
                        try:
                            if table == "active" and self.find(MemId.from_base(row[1], row[3])) is None:
                                continue  # its item was on a damaged page
                            self.db.execute(insert, row)
                        except (sqlite3.Error, ValueError, TypeError):
                            continue
        finally:
            src.close()
        return copied

    def _item(self, row: tuple[Any, ...]) -> MemoryItem:
        base, version, tier, kind, created, content = row
        return MemoryItem(MemId.stored(base, version), Tier(tier), Kind(kind), json.loads(content),
                          created, self.tags_of(base))
