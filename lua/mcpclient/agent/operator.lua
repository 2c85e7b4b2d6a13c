--- Operator actions (REFERENCE §11, DESIGN D10): the readout, the connection
--- test, the import, and server and tool administration, usable from Lua.
--
--   local operator = require "mcpclient.agent.operator"
--   local admin = { name = "ops", admin = true }
--   local result = operator.test(store, "3", { actor = admin })   -- ids as an operator types them
--   local report = operator.import(store, 3, { actor = admin })
--   for _, card in ipairs(assert(operator.readout(store))) do ... end
--
-- Every action that changes something or reaches a server checks, first, that
-- options.actor is an administrator, then that the server id is a real
-- positive integer naming a server that exists (the AJAX routes' 403 and 404,
-- here nil, message, err with err.kind "forbidden" or "unknown_server").
-- Text in cards and results is as stored or as the server sent it (labels are
-- control-stripped and clipped); whoever prints it passes it through core.clip.
local catalogue = require "mcpclient.agent.catalogue"
local credentials = require "mcpclient.credentials"
local hostgate = require "mcpclient.hostgate"
local names = require "mcpclient.agent.names"

local operator = {}

operator.TRANSPORT = "HTTP (JSON-RPC)"
operator.NEVER_REACHED = "Never reached"
operator.NEVER_IMPORTED = "Never imported"
operator.GONE = "Gone from the server"
operator.NO_SERVERS = "No MCP server is configured. Add one with `mcpclient add`."
operator.NO_TOOLS = "No tools imported yet."
operator.FORBIDDEN = "This action requires administrator privileges."
operator.UNKNOWN_SERVER = "Unknown MCP server"

local function failure(kind, message)
  return nil, message, { kind = kind, message = message }
end

---------------------------------------------------------------------------
-- Gates
---------------------------------------------------------------------------

--- Is the actor an administrator? An absent actor is not one (fail closed).
-- @return true | nil, message, err (kind "forbidden")
function operator.require_admin(actor)
  if type(actor) == "table" and actor.admin == true then return true end
  return failure("forbidden", operator.FORBIDDEN)
end

-- PHP FILTER_VALIDATE_INT, as REFERENCE §11.1 uses it: surrounding whitespace,
-- an optional sign, then 0 or digits without a leading zero, within 64 bits.
local function strict_integer(text)
  local sign, digits = text:match("^[ \t\n\r\v%z]*([+-]?)(%d+)[ \t\n\r\v%z]*$")
  if not digits then return nil end
  if #digits > 1 and digits:sub(1, 1) == "0" then return nil end
  local n = math.tointeger(tonumber(sign .. digits))
  if not n then return nil end -- beyond 64 bits
  return n
end

--- A server id as an operator or a form hands it over.
-- Integers are taken as they are; strings must pass strict integer validation;
-- anything else (floats, tables, nil) is no id. With a store, the id must also
-- name an existing, non-deleted server.
-- @return uid [, row] | nil, message, err (kind "unknown_server", or "store")
function operator.server_id(value, store)
  local uid
  if math.type(value) == "integer" then
    uid = value
  elseif type(value) == "string" then
    uid = strict_integer(value)
  end
  if not uid or uid <= 0 then return failure("unknown_server", operator.UNKNOWN_SERVER) end
  if store == nil then return uid end
  local row, message, err = store:server(uid)
  if not row then
    if message then return nil, message, err end
    return failure("unknown_server", operator.UNKNOWN_SERVER)
  end
  return uid, row
end

-- Both gates, in the reference's order.
local function admitted(store, id, options)
  local ok, message, err = operator.require_admin((options or {}).actor)
  if not ok then return nil, message, err end
  return operator.server_id(id, store)
end

---------------------------------------------------------------------------
-- Readout
---------------------------------------------------------------------------

local function stamp(t)
  return os.date("%Y-%m-%d %H:%M", t)
end

local function positive(n) return math.type(n) == "integer" and n > 0 or (type(n) == "number" and n > 0) end

--- The last successful contact: the one line both the readout and the
--- connection test show.
function operator.contact_line(row)
  if not positive(row.last_contact) then return operator.NEVER_REACHED end
  return string.format("%s — Latency: %d ms", stamp(row.last_contact), math.tointeger(row.last_latency_ms) or 0)
end

--- Authentication as configured, not as resolved; the credential reference is
--- never shown.
-- @return text, warning (true when the stored placement is not one this client offers)
function operator.authentication(row)
  if type(row.auth_credential) ~= "string" or row.auth_credential == "" then
    return "None — requests are sent unauthenticated", false
  end
  local placement = row.auth_placement
  if placement == "header" then
    return "Secret in header " .. tostring(row.auth_header_name), false
  elseif placement == "bearer" then
    return "Bearer token from a credential reference", false
  end
  return "Stored placement, not one this client offers: " .. tostring(placement), true
end

function operator.last_import_line(row)
  if not positive(row.last_imported) then return operator.NEVER_IMPORTED end
  return string.format("%s — %s", stamp(row.last_imported), tostring(row.import_status))
end

function operator.approval_line(row)
  if tostring(row.requires_approval) ~= "0" then return "A human approves every call", false end
  return "Tools run without asking", true
end

function operator.data_class_line(row)
  local class = catalogue.data_class(row)
  if class then return class, false end
  return "No data class declared — this server supplies no tools until you declare one.", true
end

--- One card of the readout (REFERENCE §11.3).
-- @return card | nil, message, err
function operator.card(store, row)
  local tools, message, err = store:tools_of(row.uid)
  if not tools then return nil, message, err end
  local authentication, auth_warning = operator.authentication(row)
  local data_class, class_warning = operator.data_class_line(row)
  local approval, approval_warning = operator.approval_line(row)
  local card = {
    uid = row.uid, identifier = row.identifier, name = row.name, description = row.description, url = row.url,
    enabled = row.enabled == true,
    state = row.enabled == true and "Enabled" or "Disabled",
    never_reached = not positive(row.last_contact),
    transport = operator.TRANSPORT,
    authentication = authentication, authentication_warning = auth_warning,
    data_class = data_class, data_class_warning = class_warning,
    approval = approval, approval_warning = approval_warning,
    last_import = operator.last_import_line(row),
    import_status = row.import_status,
    contact = operator.contact_line(row),
    tool_count = row.tool_count or 0,
    import_error = row.import_error or "",
    tools = {},
  }
  for i, t in ipairs(tools) do
    card.tools[i] = { tool_name = t.tool_name, remote_name = t.remote_name, orphaned = t.orphaned == true,
      badge = t.orphaned == true and operator.GONE or nil }
  end
  return card
end

--- Every non-deleted server, enabled or not, in identifier order.
-- @return array of cards | nil, message, err
function operator.readout(store)
  local rows, message, err = store:servers()
  if not rows then return nil, message, err end
  local cards = {}
  for i, row in ipairs(rows) do
    cards[i], message, err = operator.card(store, row)
    if not cards[i] then return nil, message, err end
  end
  return cards
end

---------------------------------------------------------------------------
-- Connection test and import
---------------------------------------------------------------------------

--- The line a reachable server gets: `Reachable — 12 ms · Protocol 2025-06-18 · Example MCP 4.2`.
function operator.report_line(report)
  local line = string.format("Reachable — %d ms", report.latency_ms)
  if report.protocol_version ~= "" then line = line .. " · Protocol " .. report.protocol_version end
  local who = ((report.server_name or "") .. " " .. (report.server_version or "")):match("^%s*(.-)%s*$")
  if who ~= "" then line = line .. " · " .. who end
  return line
end

-- The options a connection for `row` is made with: the caller's, plus the store for health.
local function connect_with(store, options)
  local connect_options = setmetatable({ store = store }, { __index = options })
  return options.connect or function(row) return catalogue.connect(row, connect_options) end
end

--- Is the server there? One handshake on a fresh connection (REFERENCE §2.5).
-- Stores nothing but the contact a successful handshake records; never the
-- import columns.
-- @param id a server id (integer or string)
-- @param options { actor, connect = function(row) -> connection, and catalogue.connect's options }
-- @return { success = true, error = "", report, contact } | { success = false, error }
--   | nil, message, err (kind "forbidden", "unknown_server", "store")
function operator.test(store, id, options)
  options = options or {}
  local uid, row, err = admitted(store, id, options)
  if not uid then return nil, row, err end
  if type(row.url) ~= "string" or row.url == "" then return { success = false, error = "The server has no URL." } end
  local conn, message = connect_with(store, options)(row)
  if not conn then return { success = false, error = message } end
  local report
  report, message = conn:ping()
  conn:close()
  if not report then return { success = false, error = message } end
  local fresh = store:server(uid) or row
  return { success = true, error = "", report = operator.report_line(report), contact = operator.contact_line(fresh),
    reached = report }
end

--- Import one server's catalogue, enabled or not (the module's button).
-- @param options { actor, and catalogue.import's options }
-- @return the catalogue report | nil, message, err
function operator.import(store, id, options)
  options = options or {}
  local uid, row, err = admitted(store, id, options)
  if not uid then return nil, row, err end
  return catalogue.import(store, row, options)
end

---------------------------------------------------------------------------
-- Server administration
---------------------------------------------------------------------------

local FIELDS = {
  "identifier", "name", "description", "url", "auth_credential", "auth_placement", "auth_header_name",
  "data_class", "requires_approval", "enabled",
}
local field_set = {}
for _, f in ipairs(FIELDS) do field_set[f] = true end

local function trim(s) return (s:match("^%s*(.-)%s*$")) end

local function invalid(message) return failure("invalid", message) end

-- Clean one field (trim, lower-case the identifier) or say why it cannot be stored.
local checks = {
  identifier = function(v)
    v = trim(v):lower()
    if not v:match("^[a-z0-9_-]+$") or #v > 32 then
      return nil, "The identifier must be 1 to 32 characters of a-z, 0-9, _ and -."
    end
    return v
  end,
  name = function(v)
    v = trim(v)
    if v == "" then return nil, "The server needs a name." end
    return v
  end,
  description = function(v) return v end,
  url = function(v)
    v = trim(v)
    local ok, why = hostgate.parse_url(v)
    if not ok then return nil, "The URL is not usable: " .. why .. "." end
    return v
  end,
  auth_credential = function(v)
    v = trim(v)
    if v:find("[%c]") then return nil, "The credential reference contains control characters." end
    return v
  end,
  auth_placement = function(v)
    if not credentials.placements[v] then return nil, 'The placement must be "bearer" or "header".' end
    return v
  end,
  auth_header_name = function(v)
    v = trim(v)
    if v ~= "" and not v:match("^[!#$%%&'*+.^_`|~%w-]+$") then
      return nil, "The header name is not an HTTP header name."
    end
    return v
  end,
  data_class = function(v)
    if v ~= "" and not catalogue.data_class { data_class = v } then
      return nil, "The data class must be one of " .. table.concat(catalogue.DATA_CLASSES, ", ") .. "."
    end
    return v
  end,
  requires_approval = function(v)
    if v ~= "0" and v ~= "1" then return nil, 'requires_approval is "1" or "0".' end
    return v
  end,
}

local function clean(fields)
  local out = {}
  for key, value in pairs(fields) do
    if not field_set[key] then error(string.format("unknown server field %q", tostring(key)), 3) end
    if key == "enabled" then
      if type(value) ~= "boolean" then error("enabled must be a boolean", 3) end
      out.enabled = value
    else
      if type(value) ~= "string" then error(string.format("%s must be a string", key), 3) end
      local v, why = checks[key](value)
      if not v then return nil, why end
      out[key] = v
    end
  end
  return out
end

-- What the row would look like after the change, checked as a whole.
local function coherent(store, uid, row)
  if row.identifier == nil or row.identifier == "" then return nil, "The server needs an identifier.", "invalid" end
  if row.name == nil or row.name == "" then return nil, "The server needs a name.", "invalid" end
  if row.url == nil or row.url == "" then return nil, "The server needs a URL.", "invalid" end
  if row.auth_placement == "header" and (row.auth_header_name or "") == "" and (row.auth_credential or "") ~= "" then
    return nil, "A credential placed in a header needs a header name.", "invalid"
  end
  if row.enabled then
    local enabled, message = store:enabled_servers()
    if not enabled then return nil, message, "store" end
    for _, other in ipairs(enabled) do
      if other.uid ~= uid and other.identifier == row.identifier then
        return nil, string.format('The identifier "%s" is also used by server "%s"; identifiers must be unique '
          .. "because they name the imported tools.", row.identifier, other.name), "conflict"
      end
    end
  end
  return true
end

--- Add a server. fields: identifier, name, url (required), description,
--- auth_credential (a reference such as "env:NAME", never the secret),
--- auth_placement, auth_header_name, data_class, requires_approval ("1"/"0"), enabled.
-- @return uid | nil, message, err (kind "forbidden", "invalid", "conflict" (an enabled twin), "store")
function operator.add(store, fields, options)
  local ok, message, err = operator.require_admin((options or {}).actor)
  if not ok then return nil, message, err end
  local values, why = clean(fields)
  if not values then return invalid(why) end
  local merged = { auth_placement = "bearer", requires_approval = "1", enabled = false }
  for k, v in pairs(values) do merged[k] = v end
  local kind
  ok, why, kind = coherent(store, 0, merged)
  if not ok then return failure(kind, why) end
  return store:add_server(values)
end

--- Change a server's editable fields.
-- @return true | nil, message, err
function operator.edit(store, id, fields, options)
  local uid, row, err = admitted(store, id, options)
  if not uid then return nil, row, err end
  local values, why = clean(fields)
  if not values then return invalid(why) end
  for k, v in pairs(values) do row[k] = v end
  local ok, kind
  ok, why, kind = coherent(store, uid, row)
  if not ok then return failure(kind, why) end
  return store:update_server(uid, values)
end

--- Remove a server (soft delete; its tool rows stay, as the reference's do).
function operator.remove(store, id, options)
  local uid, row, err = admitted(store, id, options)
  if not uid then return nil, row, err end
  return store:remove_server(uid)
end

---------------------------------------------------------------------------
-- Tools
---------------------------------------------------------------------------

--- Whether a tool is switched on (REFERENCE §7.3 step 4): its group is on (no
--- row: on) and the tool is on (no row: off, as imported tools are).
function operator.tool_enabled(store, tool_name, identifier)
  local group = store:group_enabled(names.group(identifier))
  local own = store:tool_enabled(tool_name)
  return group ~= false and own == true, own, group
end

--- The imported tools, of one server or of all, with their state.
-- @param id a server id, or nil for every server
-- @return array of { server_uid, identifier, tool_name, remote_name, description, orphaned, enabled,
--   tool_state, group_state } | nil, message, err
function operator.tools(store, id)
  local rows
  if id ~= nil then
    local uid, row, err = operator.server_id(id, store)
    if not uid then return nil, row, err end
    rows = { row }
  else
    local message, err
    rows, message, err = store:servers()
    if not rows then return nil, message, err end
  end
  local list = {}
  for _, row in ipairs(rows) do
    local tools, message, err = store:tools_of(row.uid)
    if not tools then return nil, message, err end
    for _, t in ipairs(tools) do
      local enabled, own, group = operator.tool_enabled(store, t.tool_name, row.identifier)
      list[#list + 1] = { server_uid = row.uid, identifier = row.identifier, tool_name = t.tool_name,
        remote_name = t.remote_name, description = t.description, orphaned = t.orphaned == true,
        enabled = enabled, tool_state = own, group_state = group, group = names.group(row.identifier) }
    end
  end
  return list
end

-- What a name refers to: a stored tool, a server's group, both or neither.
local function lookup(store, name)
  local is_tool = store:tool_owner(name) ~= nil
  local is_group = false
  local rows, message, err = store:servers()
  if not rows then return nil, message, err end
  for _, row in ipairs(rows) do
    if names.group(row.identifier) == name then is_group = true end
  end
  return is_tool, is_group
end

--- Switch a tool or a whole group on or off.
-- @param what nil (decide from the name), "tool" or "group"
-- @return "tool" | "group" | nil, message, err (kind "forbidden", "unknown_tool", "ambiguous", "store")
function operator.set_enabled(store, name, enabled, options)
  options = options or {}
  local ok, message, err = operator.require_admin(options.actor)
  if not ok then return nil, message, err end
  if type(name) ~= "string" then error("the tool or group name must be a string", 2) end
  local is_tool, is_group, lookup_err = lookup(store, name)
  if is_tool == nil then return nil, is_group, lookup_err end
  local what = options.what
  if what == nil then
    if is_tool and is_group then
      return failure("ambiguous", string.format('"%s" names both a tool and a group; say which with --tool or '
        .. "--group.", name))
    end
    what = is_tool and "tool" or is_group and "group" or nil
  elseif (what == "tool" and not is_tool) or (what == "group" and not is_group) then
    what = nil
  end
  if not what then
    return failure("unknown_tool", string.format('No imported tool or server group is named "%s".', name))
  end
  if what == "tool" then
    ok, message, err = store:set_tool_enabled(name, enabled)
  else
    ok, message, err = store:set_group_enabled(name, enabled)
  end
  if not ok then return nil, message, err end
  return what
end

return operator
