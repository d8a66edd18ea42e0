"""The catalog's SQLite schema: one row per memory file plus the FTS5 table.

``SCHEMA_VERSION`` changes whenever a table changes shape; an index written by another
version is dropped and rebuilt from the files (they are the truth).
"""

from __future__ import annotations

DB_NAME = "catalog.sqlite3"
SCHEMA_VERSION = "2"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS docs(
  rowid INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  path TEXT NOT NULL UNIQUE,
  dir TEXT NOT NULL,
  kind TEXT NOT NULL,
  source TEXT NOT NULL,
  created REAL NOT NULL,
  updated REAL NOT NULL,
  trust REAL NOT NULL,
  valid_from REAL,
  valid_to REAL,
  tags TEXT NOT NULL,
  mtime_ns INTEGER NOT NULL,
  size INTEGER NOT NULL,
  hash TEXT NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_created ON docs(created);
CREATE INDEX IF NOT EXISTS docs_dir ON docs(dir);
CREATE INDEX IF NOT EXISTS docs_kind_created ON docs(kind, created, rowid);
CREATE INDEX IF NOT EXISTS docs_valid_to ON docs(valid_to) WHERE valid_to IS NOT NULL;
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
  text, tokenize = 'porter unicode61 remove_diacritics 2'
);
"""


