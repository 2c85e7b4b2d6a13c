--- The default store adapter: one SQLite connection through the C drivers (mcpclient.db).
--
--   local adapter, message, code = require("mcpclient.agent.store.sqlite").open(path, options)
--
-- options (unknown keys raise):
--   busy_timeout_ms  how long a locked database is retried, in ms (default 5000)
--   readonly         open read-only (default false)
--   journal_mode     "wal" (default for files), "delete", "truncate" or "persist";
--                    WAL lets readers (the operator readout) run beside a writing agent
--
-- The adapter interface every host adapter implements (all called as methods):
--   adapter:exec(sql [, params])  -> true | nil, message, code   (no params: a script)
--   adapter:rows(sql, params)     -> { row, ... } | nil, message, code
--   adapter:insert(sql, params)   -> last row id | nil, message, code
--   adapter:changes()             -> rows changed by the last exec
--   adapter:close()
--   adapter:with_busy_timeout(ms, fn) -> fn()'s results, run with a shorter lock wait (optional)
--   adapter.dialect               the SQL it speaks (optional: SQLite's; see store/dialect.lua)
-- params is an array (json.null or nil for NULL; params.n counts trailing nils).
local check_options = require("mcpclient.agent.options").check

local sqlite = {}

local Adapter = {}
Adapter.__index = Adapter

local option_types = { busy_timeout_ms = "integer", readonly = "boolean", journal_mode = "string" }
local journal_modes = { wal = "WAL", delete = "DELETE", truncate = "TRUNCATE", persist = "PERSIST" }

--- Open path (":memory:" works) and return the adapter, or nil, message, code.
function sqlite.open(path, options)
  if type(path) ~= "string" then error("store path must be a string", 2) end
  options = check_options("sqlite.open", options, option_types)
  local timeout = options.busy_timeout_ms or 5000
  if timeout < 0 then error("busy_timeout_ms must be a non-negative integer", 2) end
  local mode = options.journal_mode or "wal"
  if not journal_modes[mode] then error(string.format("unknown journal_mode %q", mode), 2) end

  -- the drivers load with the first open: a program that never opens a store maps no database library
  local db, message, code = require("mcpclient.db").sqlite_open(path, { readonly = options.readonly == true })
  if not db then return nil, message, code end
  db:busy_timeout(timeout)
  local file = path ~= "" and path ~= ":memory:" and not path:find("^file:")
  if file and not options.readonly then
    local ok
    ok, message, code = db:exec("PRAGMA journal_mode = " .. journal_modes[mode])
    if not ok then
      db:close()
      return nil, message, code
    end
  end
  return setmetatable({ db = db, busy_timeout_ms = timeout }, Adapter)
end

function Adapter:exec(sql, params)
  if params == nil then return self.db:exec(sql) end
  local changed, message, code = self.db:execute(sql, params)
  if not changed then return nil, message, code end
  return true
end

function Adapter:rows(sql, params)
  return self.db:query(sql, params)
end

function Adapter:insert(sql, params)
  return self.db:insert(sql, params)
end

function Adapter:changes()
  return self.db:changes()
end

function Adapter:with_busy_timeout(ms, fn)
  self.db:busy_timeout(math.min(ms, self.busy_timeout_ms))
  local results = table.pack(pcall(fn))
  self.db:busy_timeout(self.busy_timeout_ms)
  if not results[1] then error(results[2], 0) end
  return table.unpack(results, 2, results.n)
end

function Adapter:close()
  self.db:close()
end

return sqlite
