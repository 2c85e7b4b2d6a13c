--- The tools repository of the store: a server's imported tools (mcp_tool),
-- the resources, templates and prompts it offers beside them (mcp_offer),
-- and the operator's switches the gate reads (tool_state, tool_group_state).
-- An import reconciles what the server lists in one transaction taken in
-- turn with the server's other imports; rows the server no longer lists are
-- kept, orphaned (a run's audit may name them), and a local tool name stays
-- taken by its server.
local core = require "mcpclient.agent.store.core"
local dialect = require "mcpclient.agent.store.dialect"

local check_uid, check_time, adapter_of, fail = core.check_uid, core.check_time, core.adapter_of, core.fail
local as_integer, as_boolean, exec, select_rows = core.as_integer, core.as_boolean, core.exec, core.select_rows
local take_turn = core.take_turn

local tools = {}

local hydrate_tool = core.hydrator {
  uid = "integer", pid = "integer", server = "integer", tool_name = "string", remote_name = "string",
  description = "string", input_schema = "string", remote_annotations = "string", output_schema = "string",
  orphaned = "boolean", updated_at = "integer", created_at = "integer",
}

--- All tools of a server, live first, by tool_name.
function tools.tools_of(self, server_uid)
  check_uid(server_uid, "server_uid")
  return select_rows(self, "list the tools of server " .. server_uid,
    "SELECT * FROM mcp_tool WHERE server = ? ORDER BY orphaned ASC, tool_name ASC", { server_uid }, hydrate_tool)
end

--- A server's live (not orphaned) tools by tool_name.
function tools.live_tools_of(self, server_uid)
  check_uid(server_uid, "server_uid")
  return select_rows(self, "list the live tools of server " .. server_uid,
    "SELECT * FROM mcp_tool WHERE server = ? AND orphaned = 0 ORDER BY tool_name ASC", { server_uid }, hydrate_tool)
end

--- The uid of the server owning a local tool name (orphaned rows count: the name stays taken), or nil.
function tools.tool_owner(self, tool_name)
  if type(tool_name) ~= "string" then error("tool_name must be a string", 2) end
  local rows, message, code = adapter_of(self):rows("SELECT server FROM mcp_tool WHERE tool_name = ?", { tool_name })
  if not rows then return fail("look up the owner of a tool", message, code) end
  if rows[1] == nil then return nil end
  return as_integer(rows[1].server)
end

-- output_schema: the tool's outputSchema as JSON text, "" when it declares none
local accepted_fields = { "tool_name", "remote_name", "description", "input_schema", "remote_annotations",
  "output_schema" }

-- The accepted tools as rows of values in accepted_fields order (misuse raises).
local function accepted_values(accepted)
  if type(accepted) ~= "table" then error("reconcile: accepted must be an array", 3) end
  local values = {}
  for i, tool in ipairs(accepted) do
    if type(tool) ~= "table" then error(string.format("reconcile: accepted[%d] must be a table", i), 3) end
    local row = {}
    for j, key in ipairs(accepted_fields) do
      local value = tool[key]
      if value == nil and key ~= "tool_name" then value = "" end
      if type(value) ~= "string" then error(string.format("reconcile: accepted[%d].%s must be a string", i, key), 3) end
      row[j] = value
    end
    values[i] = row
  end
  return values
end

-- Update the row of a tool the server had.
local function update_tool(adapter, row, server, v, now)
  return adapter:exec("UPDATE mcp_tool SET server = ?, pid = ?, remote_name = ?, description = ?, "
    .. "input_schema = ?, remote_annotations = ?, output_schema = ?, orphaned = 0, updated_at = ? WHERE uid = ?",
    { server.uid, server.pid, v[2], v[3], v[4], v[5], v[6], now, row.uid })
end

-- How many new tools one INSERT carries: 100 rows of 10 parameters stay far
-- below every database's parameter limit, and a large catalogue then costs a
-- hundredth of the round trips, which count when the database is across a
-- network.
local INSERT_BATCH = 100

-- Insert the new tools (values rows, in order) in batches of INSERT_BATCH.
local function insert_tools(adapter, fresh, server, now)
  for first = 1, #fresh, INSERT_BATCH do
    local groups, params = {}, {}
    for i = first, math.min(first + INSERT_BATCH - 1, #fresh) do
      local v = fresh[i]
      groups[#groups + 1] = "(?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)"
      for _, value in ipairs { server.uid, server.pid, v[1], v[2], v[3], v[4], v[5], v[6], now, now } do
        params[#params + 1] = value
      end
    end
    local ok, message, code = adapter:exec("INSERT INTO mcp_tool (server, pid, tool_name, remote_name, description, "
      .. "input_schema, remote_annotations, output_schema, orphaned, updated_at, created_at) VALUES "
      .. table.concat(groups, ", "), params)
    if not ok then return nil, message, code end
  end
  return true
end

-- Write the accepted tools: update the rows the server had, insert the
-- others (a name listed twice is written once, with its last values, as
-- an insert followed by an update would leave it). → seen names | nil, message, code
local function write_tools(adapter, existing, server, values, now)
  local seen, fresh, at = {}, {}, {}
  for _, v in ipairs(values) do
    local name = v[1]
    if existing[name] then
      local ok, message, code = update_tool(adapter, existing[name], server, v, now)
      if not ok then return nil, message, code end
    elseif at[name] then
      fresh[at[name]] = v
    else
      fresh[#fresh + 1] = v
      at[name] = #fresh
    end
    seen[name] = true
  end
  local ok, message, code = insert_tools(adapter, fresh, server, now)
  if not ok then return nil, message, code end
  return seen
end

-- Mark the rows of `uids` orphaned, INSERT_BATCH at a time.
local function mark_orphaned(adapter, uids, now)
  for first = 1, #uids, INSERT_BATCH do
    local params, marks = { now }, {}
    for i = first, math.min(first + INSERT_BATCH - 1, #uids) do
      params[#params + 1] = uids[i]
      marks[#marks + 1] = "?"
    end
    local ok, message, code = adapter:exec("UPDATE mcp_tool SET orphaned = 1, updated_at = ? WHERE uid IN ("
      .. table.concat(marks, ", ") .. ")", params)
    if not ok then return nil, message, code end
  end
  return true
end

-- Mark every row the catalogue no longer lists as orphaned (rows stay: a
-- run's audit may name them). → how many are orphaned now, or nil, message, code
local function sweep_orphans(adapter, existing, seen, now)
  local orphaned, newly = 0, {}
  for name, row in pairs(existing) do
    if not seen[name] then
      orphaned = orphaned + 1
      if not as_boolean(row.orphaned) then newly[#newly + 1] = row.uid end
    end
  end
  local ok, message, code = mark_orphaned(adapter, newly, now)
  if not ok then return nil, message, code end
  return orphaned
end

-- The server's tool rows by tool_name.
local function existing_tools(adapter, server_uid)
  local rows, message, code = adapter:rows("SELECT uid, tool_name, orphaned FROM mcp_tool WHERE server = ?",
    { server_uid })
  if not rows then return nil, message, code end
  local existing = {}
  for _, row in ipairs(rows) do existing[row.tool_name] = row end
  return existing
end

--- Upsert the accepted catalogue and sweep the rest into orphans, in one
-- transaction. → orphaned count (already-orphaned rows included)
function tools.reconcile(self, server_row, accepted, now)
  if type(server_row) ~= "table" then error("reconcile: server_row must be a table", 2) end
  local server = { uid = check_uid(server_row.uid, "server_row.uid"), pid = check_uid(server_row.pid or 0,
    "server_row.pid") }
  local values = accepted_values(accepted)
  now = check_time(now, "now")
  local adapter = adapter_of(self)
  local what = "reconcile the tools of server " .. server.uid
  return self:transaction(function()
    local turn, turn_message, turn_err = take_turn(self, dialect.IMPORTS, server.uid, what)
    if not turn then return nil, turn_message, turn_err end
    local existing, message, code = existing_tools(adapter, server.uid)
    if not existing then return fail(what, message, code) end
    local seen
    seen, message, code = write_tools(adapter, existing, server, values, now)
    if not seen then return fail(what, message, code) end
    local orphaned
    orphaned, message, code = sweep_orphans(adapter, existing, seen, now)
    if not orphaned then return fail(what, message, code) end
    return orphaned
  end)
end

---------------------------------------------------------------------------
-- Enablement: per-tool and per-group override rows the gate reads
---------------------------------------------------------------------------

local function set_flag(self, tbl, key_column, key, enabled, what)
  if type(key) ~= "string" then error(key_column .. " must be a string", 3) end
  if type(enabled) ~= "boolean" then error("enabled must be a boolean", 3) end
  return exec(self, what, string.format("INSERT INTO %s (%s, enabled, updated_at) VALUES (?, ?, ?) "
    .. "ON CONFLICT (%s) DO UPDATE SET enabled = excluded.enabled, updated_at = excluded.updated_at",
    tbl, key_column, key_column), { key, enabled and 1 or 0, os.time() })
end

local function get_flag(self, tbl, key_column, key, what)
  if type(key) ~= "string" then error(key_column .. " must be a string", 3) end
  local rows, message, code = adapter_of(self):rows(
    string.format("SELECT enabled FROM %s WHERE %s = ?", tbl, key_column), { key })
  if not rows then return fail(what, message, code) end
  if rows[1] == nil then return nil end
  return as_boolean(rows[1].enabled)
end

--- Switch a local tool on or off (the override row). → true
function tools.set_tool_enabled(self, tool_name, enabled)
  return set_flag(self, "tool_state", "tool_name", tool_name, enabled, "switch a tool")
end

--- true | false | nil (no override row)
function tools.tool_enabled(self, tool_name)
  return get_flag(self, "tool_state", "tool_name", tool_name, "read a tool's switch")
end

--- Switch a tool group on or off. → true
function tools.set_group_enabled(self, group, enabled)
  return set_flag(self, "tool_group_state", "group_name", group, enabled, "switch a tool group")
end

--- true | false | nil (no override row: the group is on)
function tools.group_enabled(self, group)
  return get_flag(self, "tool_group_state", "group_name", group, "read a tool group's switch")
end

---------------------------------------------------------------------------
-- What a server offers beside its tools: resources, templates, prompts
---------------------------------------------------------------------------

--- The kinds of offer an import keeps.
tools.OFFER_KINDS = { resource = true, template = true, prompt = true }
local OFFER_FIELDS = { "name", "title", "description", "mime_type", "detail" }

local hydrate_offer = core.hydrator {
  uid = "integer", server = "integer", kind = "string", ident = "string", name = "string", title = "string",
  description = "string", mime_type = "string", detail = "string", orphaned = "boolean", updated_at = "integer",
  created_at = "integer",
}

-- The entries as rows of values (misuse raises): ident first, then OFFER_FIELDS.
local function offer_values(entries)
  if type(entries) ~= "table" then error("reconcile_offers: entries must be an array", 3) end
  local values = {}
  for i, entry in ipairs(entries) do
    if type(entry) ~= "table" or type(entry.ident) ~= "string" then
      error(string.format("reconcile_offers: entries[%d] must be a table with a string ident", i), 3)
    end
    local row = { entry.ident }
    for j, key in ipairs(OFFER_FIELDS) do
      local value = entry[key]
      if value == nil then value = "" end
      if type(value) ~= "string" then
        error(string.format("reconcile_offers: entries[%d].%s must be a string", i, key), 3)
      end
      row[j + 1] = value
    end
    values[i] = row
  end
  return values
end

-- Upsert each entry live, after every row of the kind was marked orphaned:
-- what the server still lists comes back, the rest stays orphaned.
local function write_offers(adapter, server_uid, kind, values, now)
  local ok, message, code = adapter:exec("UPDATE mcp_offer SET orphaned = 1, updated_at = ? WHERE server = ? "
    .. "AND kind = ? AND orphaned = 0", { now, server_uid, kind })
  if not ok then return nil, message, code end
  for _, v in ipairs(values) do
    ok, message, code = adapter:exec("INSERT INTO mcp_offer (server, kind, ident, name, title, description, "
      .. "mime_type, detail, orphaned, updated_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?) "
      .. "ON CONFLICT (server, kind, ident) DO UPDATE SET name = excluded.name, title = excluded.title, "
      .. "description = excluded.description, mime_type = excluded.mime_type, detail = excluded.detail, "
      .. "orphaned = 0, updated_at = excluded.updated_at",
      { server_uid, kind, v[1], v[2], v[3], v[4], v[5], v[6], now, now })
    if not ok then return nil, message, code end
  end
  local rows
  rows, message, code = adapter:rows("SELECT COUNT(*) AS n FROM mcp_offer WHERE server = ? AND kind = ? "
    .. "AND orphaned = 1", { server_uid, kind })
  if not rows then return nil, message, code end
  return as_integer(rows[1] and rows[1].n)
end

--- Keep what a server lists of one kind ("resource", "template", "prompt"):
--- each entry { ident (uri, uriTemplate or prompt name), name, title,
--- description, mime_type, detail (JSON text: a prompt's arguments) } live,
--- every other row of that kind orphaned, in one transaction taken in turn
--- with the server's imports. → how many rows of the kind are orphaned
function tools.reconcile_offers(self, server_uid, kind, entries, now)
  check_uid(server_uid, "server_uid")
  if not tools.OFFER_KINDS[kind] then error(string.format("reconcile_offers: unknown kind %q", tostring(kind)), 2) end
  local values = offer_values(entries)
  now = check_time(now, "now")
  local adapter = adapter_of(self)
  local what = string.format("reconcile the %ss of server %d", kind, server_uid)
  return self:transaction(function()
    local turn, turn_message, turn_err = take_turn(self, dialect.IMPORTS, server_uid, what)
    if not turn then return nil, turn_message, turn_err end
    local orphaned, message, code = write_offers(adapter, server_uid, kind, values, now)
    if not orphaned then return fail(what, message, code) end
    return orphaned
  end)
end

--- The offers of one kind a server lists now (orphans left out), by ident;
--- with `all`, the orphans too. → rows | nil, message, err
function tools.offers_of(self, server_uid, kind, all)
  check_uid(server_uid, "server_uid")
  if not tools.OFFER_KINDS[kind] then error(string.format("offers_of: unknown kind %q", tostring(kind)), 2) end
  return select_rows(self, "read the offers of server " .. server_uid, "SELECT * FROM mcp_offer WHERE server = ? "
    .. "AND kind = ?" .. (all and "" or " AND orphaned = 0") .. " ORDER BY ident ASC", { server_uid, kind },
    hydrate_offer)
end

return tools
