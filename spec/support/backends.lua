--- The store backend the functional specs run against.
--
-- SQLite unless MCPCLIENT_TEST_PG is set: then PostgreSQL, reached with that
-- value as a libpq key=value string ("1" or "": everything from the PG*
-- environment, as `pg_virtualenv` sets it). Each fresh store on PostgreSQL
-- is a schema of its own in the one throwaway cluster, so specs stay as
-- independent as with one SQLite file (or :memory:) each.
local drivers = require "mcpclient.db"

local backends = {}

local setting = os.getenv("MCPCLIENT_TEST_PG")

--- "postgresql" or "sqlite".
backends.name = setting and "postgresql" or "sqlite"

--- Whether the specs run on PostgreSQL.
backends.postgres = setting ~= nil

--- The base connection string (PostgreSQL runs only).
function backends.conninfo()
  if setting == nil then error("not a PostgreSQL run (MCPCLIENT_TEST_PG is not set)", 2) end
  if setting == "1" then return "" end
  return setting
end

local admin -- one connection per process that creates the schemas
local count = 0
local prefix = string.format("mcpt_%d_%d_", os.time(), math.random(0, 999999))

-- A connection string whose sessions work in `schema`.
local function in_schema(schema)
  local base = backends.conninfo()
  return (base ~= "" and base .. " " or "") .. "options='-c search_path=" .. schema .. "'"
end

--- A new, empty PostgreSQL schema; returns the connection string that works in it.
function backends.new_schema()
  count = count + 1
  local schema = prefix .. count
  -- a spec may have restarted the cluster since: then connect again
  if admin == nil or not admin:exec("CREATE SCHEMA " .. schema) then
    if admin then admin:close() end
    admin = assert(drivers.pg_connect(backends.conninfo()))
    assert(admin:exec("CREATE SCHEMA " .. schema))
  end
  return in_schema(schema), schema
end

--- A location for a fresh store: a new schema on PostgreSQL, else `sqlite_path`
-- (default ":memory:").
function backends.fresh(sqlite_path)
  if backends.postgres then return (backends.new_schema()) end
  return sqlite_path or ":memory:"
end

--- Open a fresh store (asserting success).
function backends.open_store(options, sqlite_path)
  return assert(require("mcpclient.agent.store").open(backends.fresh(sqlite_path), options))
end

return backends
