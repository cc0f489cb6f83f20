import pysqlite3 as sq, time, os, re, sys
SRC = "/work/bench-homes/flat/home-20000/memory.db"
LATER = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
mode = sys.argv[2]
src = sq.connect(f"file:{SRC}?mode=ro", uri=True)
top = src.execute("select max(id) from items").fetchone()[0] - LATER
later_text = [t for (t,) in src.execute("select text from items where id > ?", (top,))]
earlier_tokens = set()
for (t,) in src.execute("select text from items where id <= ? and id > ?", (top, top - 40000)):
    earlier_tokens.update(re.findall(r"\w+", t.lower()))
unique = {w for t in later_text for w in re.findall(r"\w+", t.lower()) if w not in earlier_tokens and len(w) >= 6}
schema = [s for (n, s) in src.execute("select name, sql from sqlite_master where sql is not null and type='table'") if n in ("items","tags","active")]
fts = [s for (n, s) in src.execute("select name, sql from sqlite_master where name='items_fts'")][0]
src.close()
dest = "/tmp/fts_sd.db"
for f in (dest, dest + "-wal", dest + "-shm"):
    if os.path.exists(f): os.remove(f)
t0 = time.process_time(); w0 = time.perf_counter()
db = sq.connect(dest, isolation_level=None)
for p in ("secure_delete=ON", "journal_mode=OFF", "synchronous=OFF"): db.execute(f"PRAGMA {p}")
for s in schema: db.execute(s)
db.execute(fts)
db.execute("ATTACH DATABASE ? AS home", (SRC,))
db.execute("BEGIN")
for table in ("items", "tags", "items_fts_data", "items_fts_idx", "items_fts_docsize"):
    db.execute(f"DELETE FROM {table}")
    db.execute(f"INSERT INTO {table} SELECT * FROM home.{table}")
db.execute("COMMIT"); db.execute("DETACH DATABASE home")
t1 = time.process_time()
db.execute("BEGIN")
if mode == "secure":
    db.execute("INSERT INTO items_fts (items_fts, rank) VALUES ('secure-delete', 1)")
rows = db.execute("SELECT id, text FROM items WHERE id > ?", (top,)).fetchall()
db.executemany("INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', ?, ?)", rows)
db.execute("DELETE FROM items WHERE id > ?", (top,))
if mode == "optimize":
    db.execute("INSERT INTO items_fts (items_fts) VALUES ('optimize')")
db.execute("COMMIT")
t2 = time.process_time()
db.close()
data = open(dest, "rb").read()
left = [w for w in unique if w.encode() in data]
print(f"{mode}: later rows {LATER}, copy {1000*(t1-t0):.0f} ms CPU, take out {1000*(t2-t1):.0f} ms CPU, wall {1000*(time.perf_counter()-w0):.0f} ms; "
      f"{len(unique)} tokens only in later rows, {len(left)} still in the file {sorted(left)[:5]}")
