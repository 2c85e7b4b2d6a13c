--- Every difference between the SQL the store writes and what each database
-- speaks, in one place (mcpclient.agent.store).
--
-- The store and its migrations are written once, in SQLite-flavoured
-- standard SQL with `?` placeholders. An adapter names its dialect in its
-- `dialect` field (absent: SQLite); the store asks the dialect for the few
-- statements that differ, and the PostgreSQL adapter rewrites placeholders
-- and asks for the new row's uid back.
--
-- A dialect:
--   name          "sqlite" | "postgresql"
--   begin         the statement that opens a write transaction
--   schema(sql)   the migration text as this database needs it
--   schema_lock   statements { lock, unlock } that make concurrent openers
--                 migrate one at a time (nil: the write transaction suffices)
--   turn_lock     a statement, run first inside a write transaction with the
--                 parameters (lock class, uid), that makes writers of one
--                 thing take turns until they commit: the appenders to one
--                 run's event stream (dialect.EVENTS), the importers of one
--                 server's catalogue (dialect.IMPORTS). nil: the database
--                 serialises writers already.
local dialect = {}

-- SQLite takes the write lock at BEGIN IMMEDIATE, so two processes cannot
-- both read the same MAX(sequence) or schema version and write after it.
dialect.sqlite = {
  name = "sqlite",
  begin = "BEGIN IMMEDIATE",
  schema = function(sql) return sql end,
}

-- The advisory-lock key space this library takes: one key for the schema,
-- and (class, uid) pairs for the things whose writers take turns.
local SCHEMA_LOCK_KEY = 0x6d6370636c690001 -- "mcpcli" .. 1
dialect.EVENTS = 0x6d637065 -- "mcpe": a run's event stream, by run uid
dialect.IMPORTS = 0x6d637069 -- "mcpi": a server's catalogue, by server uid

-- The migrations' column types in PostgreSQL's words: 64-bit integers
-- everywhere (a Lua integer is 64-bit), identity columns as bigserial, and
-- text as bytea. SQLite keeps a string's exact bytes (NUL included: a
-- server's description may hold one) and compares and orders them bytewise;
-- PostgreSQL text cannot hold NUL and orders by the cluster's locale, while
-- bytea keeps, compares and orders exactly as SQLite does. The adapter binds
-- every string as bytea to match (store/postgres.lua); a reader in psql sees
-- the text with convert_from(column, 'UTF8').
local function postgres_schema(sql)
  -- a table rebuilt with its uids copied: its bigserial goes on after the highest (a line
  -- "-- resequence TABLE.COLUMN"; a comment to SQLite, whose AUTOINCREMENT follows the copied uids)
  sql = sql:gsub("%-%- resequence ([%w_]+)%.([%w_]+)", function(tbl, column)
    return string.format("SELECT setval(pg_get_serial_sequence('%s', '%s'), (SELECT COALESCE(MAX(%s), 0) + 1 FROM "
      .. "%s), false);", tbl, column, column, tbl)
  end)
  sql = sql:gsub("INTEGER%s+PRIMARY%s+KEY%s+AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
  sql = sql:gsub("%f[%w_]INTEGER%f[^%w_]", "BIGINT")
  sql = sql:gsub("%f[%w_]REAL%f[^%w_]", "DOUBLE PRECISION")
  sql = sql:gsub("%f[%w_]TEXT%f[^%w_]", "BYTEA")
  return sql
end

-- READ COMMITTED transactions do not serialise writers by themselves: the
-- schema is migrated under a session advisory lock, and an event's sequence
-- or a server's catalogue is written under a transaction advisory lock on the
-- run or server (released at commit). Without it two importers of one server
-- both see a tool missing, both insert it, and one fails on the unique name;
-- two appenders both read the same MAX(sequence).
dialect.postgresql = {
  name = "postgresql",
  begin = "BEGIN",
  schema = postgres_schema,
  schema_lock = {
    string.format("SELECT pg_advisory_lock(%d)", SCHEMA_LOCK_KEY),
    string.format("SELECT pg_advisory_unlock(%d)", SCHEMA_LOCK_KEY),
  },
  -- the uid folded into the int4 object id: two uids sharing a slot only wait on each other
  turn_lock = "SELECT pg_advisory_xact_lock(CAST(? AS integer), CAST(? % 2147483647 AS integer))",
}

--- The dialect of an adapter (a host adapter without one speaks SQLite).
function dialect.of(adapter)
  return adapter.dialect or dialect.sqlite
end

--- `?` placeholders as PostgreSQL's `$1, $2, ...`, outside quoted text and
-- identifiers (the store's SQL quotes only fixed literals such as 'running').
function dialect.numbered_placeholders(sql)
  local out, n, i, quote = {}, 0, 1, nil
  for j = 1, #sql do
    local c = sql:sub(j, j)
    if quote then
      if c == quote then quote = nil end
    elseif c == "'" or c == '"' then
      quote = c
    elseif c == "?" then
      n = n + 1
      out[#out + 1] = sql:sub(i, j - 1) .. "$" .. n
      i = j + 1
    end
  end
  out[#out + 1] = sql:sub(i)
  return table.concat(out)
end

return dialect
