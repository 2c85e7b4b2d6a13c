--- The servers repository of the store (mcp_server): the operator's rows
-- (add, change, soft delete, read), an import's outcome, and the marks a
-- change notice leaves on a server's catalogue (stale, a re-import due).
-- A server's OAuth grants follow its changes in the same transaction
-- (store/grants.lua). A server is never deleted: a run's audit may name it.
local core = require "mcpclient.agent.store.core"
local grants = require "mcpclient.agent.store.grants"

local check_uid, check_time, adapter_of, fail = core.check_uid, core.check_time, core.adapter_of, core.fail
local encode_fields, append, exec, insert = core.encode_fields, core.append, core.exec, core.insert
local insert_sql, update_sql, select_rows, select_one = core.insert_sql, core.update_sql, core.select_rows,
  core.select_one

local servers = {}

local hydrate_server = core.hydrator {
  uid = "integer", pid = "integer", identifier = "string", name = "string", description = "string",
  url = "string", auth_credential = "string", auth_placement = "string", auth_header_name = "string",
  data_class = "string", requires_approval = "string", enabled = "boolean", import_status = "string",
  import_error = "string", last_imported = "integer", tool_count = "integer", last_contact = "integer",
  last_latency_ms = "integer", updated_at = "integer", created_at = "integer", deleted = "boolean",
  catalogue_stale = "boolean",
  command = "command", env = "env", cwd = "string", reimport = "reimport", reimport_pending = "integer",
  proxy = "string", ca_file = "string", client_cert = "string", client_key = "string", headers = "headers",
  roots = "roots",
}

local server_fields = {
  identifier = "string", name = "string", description = "string", url = "string", auth_credential = "string",
  auth_placement = "string", auth_header_name = "string", data_class = "string", requires_approval = "approval",
  enabled = "flag", command = "command", env = "env", cwd = "string", reimport = "string",
  -- how it is reached beside its URL or command (checked by the operator's actions, agent/server_options.lua)
  proxy = "string", ca_file = "string", client_cert = "string", client_key = "string", headers = "headers",
  roots = "roots",
}

--- Add a server; unset fields take the table defaults. → uid
function servers.add_server(self, fields)
  local columns, values = encode_fields(fields, server_fields, "add_server")
  local now = os.time()
  append(columns, values, "created_at", now)
  append(columns, values, "updated_at", now)
  return insert(self, "add a server", insert_sql("mcp_server", columns), values)
end

--- Change editable fields of a live server and stamp updated_at. A new URL
--- forgets the server's OAuth grants (they were issued for the old one); a
--- new identifier carries them along. → true, the number of grants forgotten
function servers.update_server(self, uid, fields)
  check_uid(uid)
  local columns, values = encode_fields(fields, server_fields, "update_server")
  append(columns, values, "updated_at", os.time())
  values[#values + 1] = uid
  local sql = update_sql("mcp_server", columns, "uid = ? AND deleted = 0")
  if fields.url == nil and fields.identifier == nil then
    -- nothing that concerns the grants: the one statement, as it always was
    local ok, message, err = exec(self, "update server " .. uid, sql, values)
    if not ok then return nil, message, err end
    return true, 0
  end
  return self:transaction(function()
    local row, message, err = select_one(self, "read server " .. uid,
      "SELECT * FROM mcp_server WHERE uid = ? AND deleted = 0", { uid }, hydrate_server)
    if err then return nil, message, err end
    local ok
    ok, message, err = exec(self, "update server " .. uid, sql, values)
    if not ok then return nil, message, err end
    local forgotten = 0
    if row then
      forgotten, message, err = grants.follow(self, row, fields)
      if not forgotten then return nil, message, err end
    end
    return true, forgotten
  end)
end

--- Soft delete (deleted = 1); the server's OAuth grants are forgotten with
--- it, so a server added later under its identifier never inherits them.
--- → true, the number of grants forgotten
function servers.remove_server(self, uid)
  check_uid(uid)
  return self:transaction(function()
    local row, message, err = select_one(self, "read server " .. uid,
      "SELECT * FROM mcp_server WHERE uid = ? AND deleted = 0", { uid }, hydrate_server)
    if err then return nil, message, err end
    local ok
    ok, message, err = exec(self, "remove server " .. uid,
      "UPDATE mcp_server SET deleted = 1, updated_at = ? WHERE uid = ?", { os.time(), uid })
    if not ok then return nil, message, err end
    local forgotten = 0
    if row then
      forgotten, message, err = self:forget_grants(row.identifier)
      if not forgotten then return nil, message, err end
    end
    return true, forgotten
  end)
end

--- A live server's row, or nil (deleted or absent).
function servers.server(self, uid)
  check_uid(uid)
  return select_one(self, "read server " .. uid, "SELECT * FROM mcp_server WHERE uid = ? AND deleted = 0",
    { uid }, hydrate_server)
end

--- Every live server, any enabled state, by identifier.
function servers.servers(self)
  return select_rows(self, "list the servers",
    "SELECT * FROM mcp_server WHERE deleted = 0 ORDER BY identifier ASC, uid ASC", {}, hydrate_server)
end

--- Live servers switched on, by identifier.
function servers.enabled_servers(self)
  return select_rows(self, "list the enabled servers",
    "SELECT * FROM mcp_server WHERE deleted = 0 AND enabled = 1 ORDER BY identifier ASC, uid ASC", {}, hydrate_server)
end

-- A contact is a stale timestamp at worst: it never holds a tool's answer

local import_statuses = { never_imported = true, ok = true, partial = true, error = true }

--- An import's outcome, a refusal included (status "error"). → true
function servers.record_import(self, uid, outcome)
  check_uid(uid)
  if type(outcome) ~= "table" then error("record_import: outcome must be a table", 2) end
  if not import_statuses[outcome.status] then
    error(string.format("record_import: unknown status %q", tostring(outcome.status)), 2)
  end
  local message = outcome.error or ""
  if type(message) ~= "string" then error("record_import: error must be a string", 2) end
  local count = outcome.tool_count or 0
  if math.type(count) ~= "integer" then error("record_import: tool_count must be an integer", 2) end
  local at = check_time(outcome.at, "at")
  return exec(self, "record the import of server " .. uid,
    "UPDATE mcp_server SET import_status = ?, import_error = ?, tool_count = ?, last_imported = ?, updated_at = ? "
      .. "WHERE uid = ?", { outcome.status, message, count, at, at, uid })
end

--- Mark a server's stored catalogue stale (its server said its tools,
--- resources or prompts changed) or current again. A stale mark also makes
--- a re-import due (reimport_pending 1), which a server set to re-import on
--- its own gets at the host's next safe point; with `due` false (a notice
--- heard on an import's own connection) the catalogue is stale and nothing
--- is due unless it was already (reimport_pending 2). Current again clears
--- both. → true | nil, message, err
function servers.set_catalogue_stale(self, uid, stale, due)
  check_uid(uid)
  if type(stale) ~= "boolean" then error("set_catalogue_stale: stale must be a boolean", 2) end
  if due ~= nil and type(due) ~= "boolean" then error("set_catalogue_stale: due must be a boolean", 2) end
  local what = "mark the catalogue of server " .. uid
  if not stale then
    return exec(self, what, "UPDATE mcp_server SET catalogue_stale = 0, reimport_pending = 0 WHERE uid = ?", { uid })
  end
  if due == false then
    return exec(self, what, "UPDATE mcp_server SET catalogue_stale = 1, reimport_pending = CASE WHEN "
      .. "reimport_pending = 1 THEN 1 ELSE 2 END WHERE uid = ?", { uid })
  end
  return exec(self, what, "UPDATE mcp_server SET catalogue_stale = 1, reimport_pending = 1 WHERE uid = ?", { uid })
end

--- An import of server `uid` begins: it answers the notices heard so far
--- (reimport_pending back to 0). With `due_only`, only a due re-import is
--- taken (pending 1 → 0, one compare-and-set: of several processes that see
--- it due, exactly one gets it). → 1 taken, 0 not | nil, message, err
function servers.begin_import(self, uid, due_only)
  check_uid(uid)
  local adapter = adapter_of(self)
  local ok, message, code = adapter:exec("UPDATE mcp_server SET reimport_pending = 0 WHERE uid = ? AND "
    .. (due_only and "reimport_pending = 1" or "reimport_pending <> 0"), { uid })
  if not ok then return fail("begin the import of server " .. uid, message, code) end
  return adapter:changes()
end

--- An import of server `uid` ended well: its catalogue is current again,
--- unless a notice came after the import began (the listing may predate the
--- change): then it stays stale. → true | nil, message, err
function servers.settle_catalogue(self, uid)
  check_uid(uid)
  return exec(self, "mark the catalogue of server " .. uid .. " current",
    "UPDATE mcp_server SET catalogue_stale = 0 WHERE uid = ? AND reimport_pending = 0", { uid })
end

--- The live, enabled servers set to re-import on their own whose re-import
--- is due (a change notice since the last import), by identifier.
--- → rows | nil, message, err
function servers.reimports_due(self)
  return select_rows(self, "list the servers due a re-import", "SELECT * FROM mcp_server WHERE deleted = 0 AND "
    .. "enabled = 1 AND reimport = 'auto' AND reimport_pending = 1 ORDER BY identifier ASC, uid ASC", {},
    hydrate_server)
end

return servers
