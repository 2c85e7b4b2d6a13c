--- OAuth grants in the store: what `mcpclient login` obtains and every later
--- connection to that server (the command's, an agent loop's) uses and
--- refreshes. One row per server, issuer and resource, in the table
--- mcp_oauth_grant of the same database; the record is JSON.
--
--   local grants = require "mcpclient.agent.grants"
--   local conn = mcp.connect { ..., oauth = { grants = grants.hook(store) } }
--   grants.status(store, "docs")  --> { scope, expires_at, refreshable, usable } | nil
--   grants.forget(store, "docs")  --> rows removed
--
-- Tokens are secrets: the SQLite file is made readable by its owner only
-- (grants.protect), and no function here returns or prints a token to a
-- caller other than the oauth provider's hook.
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"

local json = core.json

local grants = {}

grants.TABLE = "mcp_oauth_grant"

local CREATE = "CREATE TABLE IF NOT EXISTS " .. grants.TABLE .. " (server TEXT NOT NULL, issuer TEXT NOT NULL, "
  .. "resource TEXT NOT NULL, record TEXT NOT NULL, updated INTEGER NOT NULL, "
  .. "PRIMARY KEY (server, issuer, resource))"

-- The store's adapter (see mcpclient.agent.store.sqlite for its interface).
local function adapter_of(store)
  local adapter = rawget(store, "adapter")
  if adapter == nil then error("attempt to use a closed store", 3) end
  return adapter
end

local function failed(what, message, code)
  return errors.fail("store", { operation = what, detail = message, sql_code = code })
end

-- The saved records of one server, newest first; {} when there are none or no table yet.
local function records(store, server)
  local rows = adapter_of(store):rows("SELECT record FROM " .. grants.TABLE
    .. " WHERE server = ? ORDER BY updated DESC", { server })
  local list = {}
  for _, row in ipairs(rows or {}) do
    local record = json.decode(row.record)
    if type(record) == "table" then list[#list + 1] = record end
  end
  return list
end

--- Save one record (the oauth provider's hook calls this after every token).
-- @return true | nil, message, err (kind "store")
function grants.save(store, record)
  local adapter = adapter_of(store)
  local ok, message, code = adapter:exec(CREATE)
  if not ok then return failed("create the grant table", message, code) end
  ok, message, code = adapter:exec("INSERT INTO " .. grants.TABLE .. " (server, issuer, resource, record, updated) "
    .. "VALUES (?, ?, ?, ?, ?) ON CONFLICT (server, issuer, resource) DO UPDATE SET record = excluded.record, "
    .. "updated = excluded.updated",
    { record.server, record.issuer or "", record.resource or "", json.encode(record), os.time() })
  if not ok then return failed("save an authorization grant", message, code) end
  return true
end

--- The grant hook for the oauth option: load(server) and save(record) over `store`.
function grants.hook(store)
  return {
    load = function(server) return records(store, server)[1] end,
    save = function(record) assert(grants.save(store, record)) end,
  }
end

--- What the readout may show of a server's grant, never the token:
--- { scope, expires_at (unix seconds | nil), refreshable, usable, issuer } | nil without one.
function grants.status(store, server)
  local record = records(store, server)[1]
  if not record then return nil end
  local live = math.type(record.expires_at) ~= "integer" or record.expires_at > os.time()
  return { scope = record.scope, expires_at = record.expires_at, issuer = record.issuer,
    refreshable = type(record.refresh_token) == "string", usable = live or type(record.refresh_token) == "string" }
end

--- The oauth option a connection to `row` gets: the stored grant's, when the
--- server has one and no static credential; nil otherwise.
function grants.oauth_option(store, row)
  if type(row.auth_credential) == "string" and row.auth_credential ~= "" then return nil end
  if not records(store, row.identifier)[1] then return nil end
  return { grants = grants.hook(store) }
end

--- Remove every grant of a server.
-- @return the number removed | nil, message, err
function grants.forget(store, server)
  local adapter = adapter_of(store)
  local ok, message, code = adapter:exec(CREATE)
  if not ok then return failed("create the grant table", message, code) end
  local before = #records(store, server)
  ok, message, code = adapter:exec("DELETE FROM " .. grants.TABLE .. " WHERE server = ?", { server })
  if not ok then return failed("remove authorization grants", message, code) end
  return before
end

-- A shell word for `text` (single-quoted).
local function quoted(text)
  return "'" .. text:gsub("'", "'\\''") .. "'"
end

--- Make a SQLite database file (and its WAL and shared-memory files) readable
--- and writable by its owner only: it holds tokens. A URL (another store) is left alone.
function grants.protect(path)
  if type(path) ~= "string" or path:match("^%a[%w+.-]*://") or path == ":memory:" then return end
  for _, suffix in ipairs { "", "-wal", "-shm", "-journal" } do
    local f = io.open(path .. suffix, "rb")
    if f then
      f:close()
      os.execute("chmod 600 " .. quoted(path .. suffix))
    end
  end
end

return grants
