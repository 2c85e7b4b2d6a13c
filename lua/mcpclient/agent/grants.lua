--- OAuth grants in the store: what `mcpclient login` obtains and every later
--- connection to that server (the command's, an agent loop's) uses and
--- refreshes. One row per server, protected resource and issuer, in the
--- store's table mcp_oauth_grant (its migrations and dialect); the record is
--- JSON. A grant is used only for the resource it was issued for.
--
--   local grants = require "mcpclient.agent.grants"
--   local conn = mcp.connect { ..., oauth = { grants = grants.hook(store) } }
--   grants.status(store, row)     --> { scope, expires_at, refreshable, usable } | nil
--   grants.forget(store, "docs")  --> rows removed
--
-- Tokens are secrets: the SQLite file is made readable by its owner only
-- (grants.protect), and no function here returns or prints a token to a
-- caller other than the oauth provider's hook.
local core = require "mcpclient.core"
local discovery = require "mcpclient.oauth.discovery"

local json = core.json

local grants = {}

grants.TABLE = "mcp_oauth_grant"

-- The saved records of one server, newest first, or the failure triple: a
-- store that cannot be read is never taken for one without grants.
local function records(store, server)
  local rows, message, err = store:grants(server)
  if not rows then return nil, message, err end
  local list = {}
  for _, row in ipairs(rows) do
    local record = json.decode(row.record)
    if type(record) == "table" then
      -- the row's key is what the record is bound to, whatever its JSON says
      record.server, record.resource, record.issuer = row.server, row.resource, row.issuer
      list[#list + 1] = record
    end
  end
  return list
end

--- Save one record (the oauth provider's hook calls this after every token).
-- @return true | nil, message, err (kind "store")
function grants.save(store, record)
  if type(record) ~= "table" then error("grants.save: record must be a table", 2) end
  for _, key in ipairs { "server", "resource", "issuer" } do
    if type(record[key]) ~= "string" or record[key] == "" then
      error("grants.save: record." .. key .. " must be a non-empty string", 2)
    end
  end
  return store:save_grant(record.server, record.resource, record.issuer, json.encode(record))
end

--- The grant hook for the oauth option over `store`: load(server) gives the
--- server's records (the provider uses one only where its resource covers the
--- connection's URL, and only while its issuer is the resource's), save(record)
--- keeps one. Both report a store failure as nil, message, err.
function grants.hook(store)
  return {
    load = function(server) return records(store, server) end,
    save = function(record) return grants.save(store, record) end,
  }
end

-- The record a connection to `row` would use: the newest whose resource
-- covers the row's URL (nil without one), or the failure triple.
local function usable_record(store, row)
  local list, message, err = records(store, row.identifier)
  if not list then return nil, message, err end
  for _, record in ipairs(list) do
    if type(record.access_token) == "string" and discovery.covers(record.resource, row.url) then return record end
  end
  return nil
end

--- What the readout may show of a server's grant, never the token:
--- { scope, expires_at (unix seconds | nil), refreshable, usable, issuer } | nil without one
--- | nil, message, err when the store could not be read.
-- @param row the server's row (identifier and url), or its identifier (then any resource counts)
function grants.status(store, row)
  local record, message, err
  if type(row) == "table" then
    record, message, err = usable_record(store, row)
  else
    local list
    list, message, err = records(store, row)
    record = list and list[1]
  end
  if err then return nil, message, err end
  if not record then return nil end
  local live = math.type(record.expires_at) ~= "integer" or record.expires_at > os.time()
  return { scope = record.scope, expires_at = record.expires_at, issuer = record.issuer,
    refreshable = type(record.refresh_token) == "string", usable = live or type(record.refresh_token) == "string" }
end

--- The oauth option a connection to `row` gets: the stored grant's, when the
--- server has one for its URL and no static credential; nil otherwise; or
--- nil, message, err when the store could not be read.
function grants.oauth_option(store, row)
  if type(row.auth_credential) == "string" and row.auth_credential ~= "" then return nil end
  local record, message, err = usable_record(store, row)
  if err then return nil, message, err end
  if not record then return nil end
  return { grants = grants.hook(store) }
end

--- Remove every grant of a server.
-- @return the number removed | nil, message, err
function grants.forget(store, server)
  return store:forget_grants(server)
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
