--- Operator actions: the readout, the connection test, the import, and
--- server and tool administration, usable from Lua.
--
--   local operator = require "mcpclient.agent.operator"
--   local admin = { name = "ops", admin = true }
--   local result = operator.test(store, "3", { actor = admin })   -- ids as an operator types them
--   local report = operator.import(store, 3, { actor = admin })
--   for _, card in ipairs(assert(operator.readout(store))) do ... end
--
-- Every action that changes something or reaches a server checks, first, that
-- options.actor is an administrator, then that the server id is a real
-- positive integer naming a server that exists. A refusal is the library's
-- one failure value, nil, message, err, with err.kind "forbidden",
-- "unknown_server", "invalid" (err.field names the input), "conflict",
-- "unknown_tool" or "store".
-- Text in cards and results is as stored or as the server sent it (labels are
-- control-stripped and clipped); whoever prints it passes it through core.clip.
local catalogue = require "mcpclient.agent.catalogue"
local check = require "mcpclient.agent.check"
local command = require "mcpclient.command"
local looks_secret = require("mcpclient.config").looks_secret
local grants = require "mcpclient.agent.grants"
local connection = require "mcpclient.connection"
local core = require "mcpclient.core"
local credentials = require "mcpclient.credentials"
local errors = require "mcpclient.errors"
local hostgate = require "mcpclient.hostgate"
local names = require "mcpclient.agent.names"
local run = require "mcpclient.agent.run"
local server_options = require "mcpclient.agent.server_options"
local trim = require("mcpclient.agent.options").trim

local json = core.json

local operator = {}

operator.TRANSPORT = "HTTP (JSON-RPC)"
operator.STDIO = "stdio (a local process)"
operator.NEVER_REACHED = "Never reached"
operator.NEVER_IMPORTED = "Never imported"
operator.GONE = "Gone from the server"
operator.NO_SERVERS = "No MCP server is configured. Add one with `mcpclient add`."
operator.NO_TOOLS = "No tools imported yet."

-- Whether a credential is an environment reference (env:NAME).
local env_reference = credentials.env_reference

---------------------------------------------------------------------------
-- Gates
---------------------------------------------------------------------------

--- Is the actor an administrator? An absent actor is not one (fail closed).
-- @return true | nil, message, err (kind "forbidden")
function operator.require_admin(actor)
  if type(actor) == "table" and actor.admin == true then return true end
  return errors.fail("forbidden")
end

-- A server id typed as text: after trimming, an optional sign, then 0 or
-- digits without a leading zero, within 64 bits. "01", "1.0", "1e3" and "0x1"
-- are not ids: an id that could be read two ways is no id.
local function strict_integer(text)
  local sign, digits = trim(text):match("^([+-]?)(%d+)$")
  if not digits then return nil end
  if #digits > 1 and digits:sub(1, 1) == "0" then return nil end
  return math.tointeger(tonumber(sign .. digits)) -- nil beyond 64 bits
end

-- The positive integer an id stands for, or nil.
local function id_of(value)
  local uid
  if math.type(value) == "integer" then
    uid = value
  elseif type(value) == "string" then
    uid = strict_integer(value)
  end
  if uid and uid > 0 then return uid end
  return nil
end

-- The live server row with that uid | nil, message, err.
local function existing_server(store, uid)
  local row, message, err = store:server(uid)
  if message then return nil, message, err end
  if not row then return errors.fail("unknown_server", { uid = uid }) end
  return row
end

--- A server id as an operator or a form hands it over.
-- Integers are taken as they are; strings must pass strict integer validation;
-- anything else (floats, tables, nil) is no id. With a store, the id must also
-- name an existing, non-deleted server.
-- @return uid [, row] | nil, message, err (kind "unknown_server", or "store")
function operator.server_id(value, store)
  local uid = id_of(value)
  if not uid then return errors.fail("unknown_server") end
  if store == nil then return uid end
  local row, message, err = existing_server(store, uid)
  if not row then return nil, message, err end
  return uid, row
end

--- The server an operator names: a numeric id, or an identifier (compared
--- in lower case, as identifiers are stored).
-- @return row | nil, message, err (kind "unknown_server"; err.given is the name, clipped;
--   err.matches lists the ids when several servers share the identifier; or "store")
function operator.find_server(store, given)
  if type(given) ~= "string" and math.type(given) ~= "integer" then return errors.fail("unknown_server") end
  local uid = id_of(given)
  if uid then return existing_server(store, uid) end
  local rows, message, err = store:servers()
  if not rows then return nil, message, err end
  local wanted, found = trim(given):lower(), {}
  for _, row in ipairs(rows) do
    if row.identifier == wanted then found[#found + 1] = row end
  end
  if #found == 1 then return found[1] end
  local matches = {}
  for i, row in ipairs(found) do matches[i] = row.uid end
  return errors.fail("unknown_server", { given = core.clip(given, 64), matches = #found > 1 and matches or nil })
end

-- Both gates, in that order (a stranger learns nothing about which ids exist).
-- @return the server's row | nil, message, err
local function admitted(store, id, options)
  local ok, message, err = operator.require_admin((options or {}).actor)
  if not ok then return nil, message, err end
  local uid = id_of(id)
  if not uid then return errors.fail("unknown_server") end
  return existing_server(store, uid)
end

---------------------------------------------------------------------------
-- Readout
---------------------------------------------------------------------------

-- Timestamps as people read them: UTC, and saying so, so two operators in
-- different zones read the same line the same way; to the second, one format
-- wherever the command prints a time (render.stamp; --json keeps ISO 8601).
local function stamp(t)
  return os.date("!%Y-%m-%d %H:%M:%S UTC", t)
end

local function positive(n) return math.type(n) == "integer" and n > 0 end

-- The last successful contact: the one line both the readout and the
-- connection test show.
local function contact_line(row)
  if not positive(row.last_contact) then return operator.NEVER_REACHED end
  return string.format("%s — Latency: %d ms", stamp(row.last_contact), row.last_latency_ms)
end

-- Authentication as configured, not as resolved; the stored credential is
-- never shown. A stored value that is not env:NAME (a resolver's key, or a
-- secret stored before secrets were refused) is pointed out, not repeated.
-- @return text, warning (true when the stored placement is not one this client offers, or the value
--   is not an environment reference)
local function authentication_line(row)
  local credential = row.auth_credential
  if type(credential) ~= "string" or credential == "" then
    return "None — requests are sent unauthenticated", false
  end
  local placement, text = row.auth_placement
  if placement == "header" then
    text = "Secret in header " .. tostring(row.auth_header_name)
  elseif placement == "bearer" then
    text = "Bearer token from a credential reference"
  else
    return "Stored placement, not one this client offers: " .. tostring(placement), true
  end
  if env_reference(credential) then return text, false end
  return text .. " (not env:NAME: if the stored value is the secret itself, replace it with "
    .. "`mcpclient edit <id> --credential env:NAME`)", true
end

local function last_import_line(row)
  if not positive(row.last_imported) then return operator.NEVER_IMPORTED end
  return string.format("%s — %s", stamp(row.last_imported), tostring(row.import_status))
end

local function approval_line(row)
  if tostring(row.requires_approval) ~= "0" then return "A human approves every call", false end
  return "Tools run without asking", true
end

-- The OAuth grant `mcpclient login` stored, as the readout shows it (never the token):
-- "authorized (scope ..., expires ...)" or "needs login"; nil when the server has none.
local function authorization_line(store, row)
  local status, message = grants.status(store, row)
  if message then return "unknown: the stored grants could not be read (" .. message .. ")", true end
  if not status then return nil end
  if not status.usable then return "needs login (the grant expired): `mcpclient login " .. row.identifier .. "`", true,
    status end
  local scope = (status.scope and status.scope ~= "") and ("scope " .. status.scope) or "no scope named"
  local expiry = status.expires_at and ("expires " .. stamp(status.expires_at)) or "no expiry named"
  if status.refreshable then expiry = expiry .. ", refreshed as needed" end
  return string.format("authorized (%s, %s)", scope, expiry), false, status
end

local function data_class_line(row)
  local class = catalogue.data_class(row)
  if class then return class, false end
  return "No data class declared — this server supplies no tools until you declare one.", true
end

-- Has the row a command (a stdio server)?
local function has_command(row)
  return type(row.command) == "table" and next(row.command) ~= nil
end

-- The names of a stdio server's env, sorted; never a value.
local function env_names(env)
  local list = {}
  for name in pairs(env or {}) do list[#list + 1] = name end
  table.sort(list)
  return list
end

-- The client key as the readout shows it: its file's path, or that a
-- reference names it (the reference is not repeated, as a credential's is not).
local function key_line(key)
  if type(key) ~= "string" or key == "" then return nil end
  if key:match("^env:") then return "from a credential reference" end
  return key
end

-- The plain headers as the readout shows them, sorted: { { name, value } };
-- a value that looks like a secret (stored before such headers were refused) is hidden.
local function shown_headers(headers)
  if type(headers) ~= "table" or next(headers) == nil then return nil end
  local list = {}
  for name, value in pairs(headers) do
    list[#list + 1] = { name = name, value = looks_secret(name, value) and "(hidden: looks like a secret)" or value }
  end
  table.sort(list, function(a, b) return a.name < b.name end)
  return list
end

-- One card of the readout: a server as configured, its liveness and its tools.
-- @return card | nil, message, err
local function card_of(store, row)
  local tools, message, err = store:tools_of(row.uid)
  if not tools then return nil, message, err end
  local authentication, auth_warning = authentication_line(row)
  if has_command(row) then
    authentication, auth_warning = "None — a local process, given only the env named here", false
  end
  local data_class, class_warning = data_class_line(row)
  local approval, approval_warning = approval_line(row)
  local authorization, authorization_warning, grant = authorization_line(store, row)
  if authorization and (row.auth_credential or "") == "" then
    -- no static credential, but a grant: requests are not sent unauthenticated
    authentication, auth_warning = "OAuth — the grant `mcpclient login` keeps (below)", false
  end
  local card = {
    uid = row.uid, identifier = row.identifier, name = row.name, description = row.description, url = row.url,
    enabled = row.enabled == true,
    state = row.enabled == true and "Enabled" or "Disabled",
    never_reached = not positive(row.last_contact),
    transport = has_command(row) and operator.STDIO or operator.TRANSPORT,
    -- a stdio server: the command clipped, the env by its names only (a value may be a secret)
    command = has_command(row) and command.describe(row.command) or nil,
    env_names = has_command(row) and env_names(row.env) or nil,
    cwd = has_command(row) and (row.cwd or "") ~= "" and row.cwd or nil,
    authentication = authentication, authentication_warning = auth_warning,
    data_class = data_class, data_class_warning = class_warning,
    approval = approval, approval_warning = approval_warning,
    last_import = last_import_line(row),
    import_status = row.import_status,
    contact = contact_line(row),
    tool_count = row.tool_count or 0,
    catalogue_stale = row.catalogue_stale == true,
    reimport = row.reimport == "auto" and "auto" or "manual",
    import_error = row.import_error or "",
    tools = {},
    authorization = authorization, authorization_warning = authorization_warning, grant = grant,
    -- how it is reached: never a key's content, a secret-looking header's value shown as hidden
    proxy = (row.proxy or "") ~= "" and row.proxy or nil,
    ca_file = (row.ca_file or "") ~= "" and row.ca_file or nil,
    client_cert = (row.client_cert or "") ~= "" and row.client_cert or nil,
    client_key = key_line(row.client_key),
    headers = shown_headers(row.headers),
    roots = (type(row.roots) == "table" and #row.roots > 0) and row.roots or nil,
    -- The same facts as data, for machine readers (--json): unix seconds,
    -- integer milliseconds, booleans; nil where there is nothing yet.
    last_contact_at = positive(row.last_contact) and row.last_contact or nil,
    latency_ms = positive(row.last_contact) and math.tointeger(row.last_latency_ms) or nil,
    last_imported_at = positive(row.last_imported) and row.last_imported or nil,
    requires_approval = tostring(row.requires_approval) ~= "0",
    declared_data_class = catalogue.data_class(row),
    auth_placement = (type(row.auth_credential) == "string" and row.auth_credential ~= "")
      and row.auth_placement or nil,
  }
  for i, t in ipairs(tools) do
    card.tools[i] = { tool_name = t.tool_name, remote_name = t.remote_name, orphaned = t.orphaned == true,
      badge = t.orphaned == true and operator.GONE or nil }
  end
  return card
end

--- Every non-deleted server, enabled or not, in identifier order, as cards:
--- { uid, identifier, name, description, url, enabled, state, never_reached, transport,
---   authentication, authentication_warning, data_class, data_class_warning, approval,
---   approval_warning, last_import, import_status, contact, tool_count, catalogue_stale (the server
---   said its tools, resources or prompts changed since the last import), reimport ("auto" | "manual":
---   what such a notice does), import_error,
---   tools = { { tool_name, remote_name, orphaned, badge }, ... } }
--- (a *_warning is true where the operator should look; text is as stored).
-- @return array of cards | nil, message, err
function operator.readout(store)
  local rows, message, err = store:servers()
  if not rows then return nil, message, err end
  local cards = {}
  for i, row in ipairs(rows) do
    cards[i], message, err = card_of(store, row)
    if not cards[i] then return nil, message, err end
  end
  return cards
end

---------------------------------------------------------------------------
-- Connection test and import
---------------------------------------------------------------------------

-- The line a reachable server gets: `Reachable — 12 ms · Protocol 2025-06-18 · Example MCP 4.2`.
-- What the server says about itself is far-side text: each part passes
-- core.label (controls and formatting characters out, bounded).
local function report_line(report)
  local line = string.format("Reachable — %d ms", report.latency_ms)
  local protocol = core.label(report.protocol_version)
  if protocol ~= "" then line = line .. " · Protocol " .. protocol end
  local who = trim(core.label(report.server_name) .. " " .. core.label(report.server_version))
  if who ~= "" then line = line .. " · " .. who end
  return line
end

-- The options a connection for `row` is made with: the caller's, plus the store for health.
local function connect_with(store, options)
  local connect_options = setmetatable({ store = store }, { __index = options })
  return options.connect or function(row) return catalogue.connect(row, connect_options) end
end

--- Is the server there? One handshake on a fresh connection.
-- Stores nothing but the contact a successful handshake records; never the
-- import columns.
-- @param id a server id (integer or string)
-- @param options { actor, connect = function(row) -> connection, and catalogue.connect's options }
-- @return { success = true, error = "", report, contact, reached }
--   | { success = false, error = message, err } (the server's failure, as the connection returned it)
--   | nil, message, err (kind "forbidden", "unknown_server", "store")
function operator.test(store, id, options)
  options = options or {}
  local row, message, err = admitted(store, id, options)
  if not row then return nil, message, err end
  local conn
  conn, message, err = connect_with(store, options)(row)
  if not conn then return { success = false, error = message, err = err } end
  local report
  report, message, err = conn:ping()
  conn:close()
  if not report then return { success = false, error = message, err = err } end
  local fresh = store:server(row.uid) or row
  return { success = true, error = "", report = report_line(report), contact = contact_line(fresh),
    reached = report }
end

--- Ask a server, enabled or not, for what it offers beside its tools, on a
--- connection of its own (closed after): `what` is "resources" (the
--- resources and the templates), "prompts", or "read" with `uri`.
-- @param options { actor, connect, and catalogue.connect's options }
-- @return { row, resources, templates } | { row, prompts } | { row, read } | nil, message, err
--   (the server's failure as the connection returned it, or "forbidden", "unknown_server", "store")
function operator.offers(store, id, what, uri, options)
  options = options or {}
  local row, message, err = admitted(store, id, options)
  if not row then return nil, message, err end
  local conn
  conn, message, err = connect_with(store, options)(row)
  if not conn then return nil, message, err end
  local out = { row = row }
  if what == "resources" then
    out.resources, message, err = conn:list_resources()
    if out.resources then
      -- a server may offer resources without templates: an empty list, not a failure
      out.templates, message, err = conn:list_resource_templates()
    end
    if not out.templates then out = nil end
  elseif what == "prompts" then
    out.prompts, message, err = conn:list_prompts()
    if not out.prompts then out = nil end
  else
    out.read, message, err = conn:read_resource(uri)
    if not out.read then out = nil end
  end
  conn:close()
  if not out then return nil, message, err end
  return out
end

--- Import one server's catalogue, enabled or not.
-- @param options { actor, and catalogue.import's options }
-- @return the catalogue report | nil, message, err
function operator.import(store, id, options)
  options = options or {}
  local row, message, err = admitted(store, id, options)
  if not row then return nil, message, err end
  return catalogue.import(store, row, options)
end

--- The live conformance run (mcpclient.agent.check) against one server, on
--- connections of its own that record no contact in the store.
-- @param options { actor, call = { name, arguments }, budget, progress, and catalogue.connect's options }
-- @return results, summary (see check.run) | nil, message, err (kind "forbidden", "unknown_server", "store")
function operator.check(store, id, options)
  options = options or {}
  local row, message, err = admitted(store, id, options)
  if not row then return nil, message, err end
  local function open(recorder, budget)
    local connect_options = setmetatable({ health = recorder, budget = budget, store = store }, { __index = options })
    return catalogue.connect(row, connect_options)
  end
  return check.run(open, { call = options.call, budget = options.budget, progress = options.progress })
end

---------------------------------------------------------------------------
-- Server administration
---------------------------------------------------------------------------

-- The refusal of one field's value; `detail` says what the field must be and
-- never repeats the value (it may be a secret typed in the wrong place).
local function invalid(field, detail)
  return errors.fail("invalid", { field = field, detail = detail })
end

-- Whether `name` is an HTTP header name, by the rule a connection applies
-- when it attaches the credential (credentials.validate), so the operator
-- cannot store a name a connection would refuse.
local function header_name_ok(name)
  return (pcall(credentials.validate, { placement = "header", credential = "env:X", header_name = name }))
end

-- Whether a stored credential can only be a reference: "env:NAME" with a
-- variable name, or a key the host's resolver (options.resolver, the one its
-- connections use) resolves. Anything else may be the secret itself, which
-- must never land in the database.
local function reference_ok(reference, resolver)
  if reference:find("^env:") then return env_reference(reference) end
  if resolver == nil or reference:find("%c") then return false end
  local ok, secret = pcall(resolver, reference)
  return ok and type(secret) == "string" and secret ~= ""
end

-- A TLS file setting: "" (none) or a file this process can read.
local function tls_file(field, what, v)
  if v == "" then return v end
  local problem = server_options.file_problem(v)
  if problem then
    return invalid(field, string.format("The %s %s: %s.", what, problem, core.clip(v, 200)))
  end
  return v
end

local NOT_A_REFERENCE = "The credential must be a reference, never the secret itself: put the secret in an "
  .. "environment variable and give env:NAME (letters, digits and _, not starting with a digit)."

-- Clean one field (trim, lower-case the identifier) or refuse it.
-- @return value | nil, message, err (kind "invalid")
local checks = {
  identifier = function(v)
    v = trim(v):lower()
    if not connection.valid_identifier(v) then
      return invalid("identifier", "The identifier must be " .. connection.IDENTIFIER_RULE
        .. " (it is stored in lower case).")
    end
    return v
  end,
  name = function(v)
    v = trim(v)
    if v == "" then return invalid("name", "The server needs a name.") end
    return v
  end,
  description = function(v) return v end,
  url = function(v)
    v = trim(v)
    local ok, why = hostgate.parse_url(v)
    if not ok then return invalid("url", "The URL is not usable: " .. why .. ".") end
    return v
  end,
  auth_credential = function(v, options)
    v = trim(v)
    if v ~= "" and not reference_ok(v, options.resolver) then
      return invalid("auth_credential", NOT_A_REFERENCE)
    end
    return v
  end,
  auth_placement = function(v)
    if not credentials.placements[v] then
      return invalid("auth_placement", 'The placement must be "bearer" or "header".')
    end
    return v
  end,
  auth_header_name = function(v)
    v = trim(v)
    if v ~= "" and not header_name_ok(v) then
      return invalid("auth_header_name", "The header name is not an HTTP header name.")
    end
    return v
  end,
  data_class = function(v)
    if v ~= "" and not catalogue.data_class { data_class = v } then
      return invalid("data_class", "The data class must be one of "
        .. table.concat(catalogue.DATA_CLASSES, ", ") .. ".")
    end
    return v
  end,
  requires_approval = function(v)
    if v ~= "0" and v ~= "1" then return invalid("requires_approval", 'requires_approval is "1" or "0".') end
    return v
  end,
  -- what a change notice does: "manual" marks the catalogue stale, "auto" re-imports it at a safe point
  reimport = function(v)
    v = trim(v)
    if v ~= "auto" and v ~= "manual" then return invalid("reimport", 'reimport is "auto" or "manual".') end
    return v
  end,
  -- a stdio server: the argv (an empty list clears it), the env, the directory
  command = function(v)
    if next(v) == nil then return v end
    local problem = command.problem(v)
    if problem then return invalid("command", "The " .. problem .. ".") end
    return v
  end,
  env = function(v)
    local problem = command.problem({ "x" }, v)
    if problem then return invalid("env", "The " .. problem .. ".") end
    return v
  end,
  cwd = function(v)
    if v ~= "" and command.problem({ "x" }, nil, v) then return invalid("cwd", "The cwd must be a directory path.") end
    return v
  end,
  -- how it is reached beside the URL: "" the environment's proxy, "none" none, or the proxy's URL
  proxy = function(v)
    v = trim(v)
    local problem = server_options.proxy_problem(v)
    if problem then return invalid("proxy", "The proxy is not usable: " .. problem .. ".") end
    return v
  end,
  -- TLS files must be there when they are configured (the key file's content is never read into a message)
  ca_file = function(v) return tls_file("ca_file", "CA file", v) end,
  client_cert = function(v) return tls_file("client_cert", "client certificate", v) end,
  client_key = function(v, options)
    if v == "" then return v end
    local problem = server_options.client_key_problem(v, options.resolver)
    if problem then return invalid("client_key", "The client key " .. problem .. ".") end
    return v
  end,
  headers = function(v)
    local problem = server_options.headers_problem(v)
    if problem then return invalid("headers", "The headers are not usable: " .. problem .. ".") end
    return v
  end,
  roots = function(v)
    local problem = server_options.roots_problem(v)
    if problem then return invalid("roots", "The roots are not usable: " .. problem .. ".") end
    return v
  end,
}

-- The fields whose value is a table, not a string.
local TABLE_FIELDS = { command = true, env = true, headers = true, roots = true }

-- One field's cleaned value; wrong types and unknown fields are misuse.
local function clean_field(key, value, options)
  if checks[key] == nil and key ~= "enabled" then error(string.format("unknown server field %q", tostring(key)), 4) end
  if key == "enabled" then
    if type(value) ~= "boolean" then error("enabled must be a boolean", 4) end
    return value
  end
  if TABLE_FIELDS[key] then
    if type(value) ~= "table" then error(string.format("%s must be a table", key), 4) end
    return checks[key](value, options)
  end
  if type(value) ~= "string" then error(string.format("%s must be a string", key), 4) end
  return checks[key](value, options)
end

-- Every given field cleaned | nil, message, err (the first refusal).
local function clean(fields, options)
  if type(fields) ~= "table" then error("the server fields must be a table", 3) end
  local out = {}
  for key, value in pairs(fields) do
    local v, message, err = clean_field(key, value, options)
    if v == nil then return nil, message, err end
    out[key] = v
  end
  return out
end

local REQUIRED = { identifier = "an identifier", name = "a name" }

-- What the row would look like after the change, checked as a whole: a
-- server is reached by a URL or started by a command, never both; env and
-- cwd belong to a command.
-- @return true | nil, message, err (kind "invalid", "conflict" or "store")
local function coherent(store, uid, row)
  for _, field in ipairs { "identifier", "name" } do
    if (row[field] or "") == "" then return invalid(field, "The server needs " .. REQUIRED[field] .. ".") end
  end
  local url = (row.url or "") ~= ""
  if url == has_command(row) then
    return invalid(url and "command" or "url",
      "The server needs a URL or a command (the program and its arguments after --), not both.")
  end
  if not has_command(row) and (next(row.env or {}) ~= nil or (row.cwd or "") ~= "") then
    return invalid("env", "env and cwd are for a server started by a command.")
  end
  if has_command(row) and (row.auth_credential or "") ~= "" then
    return invalid("auth_credential", "A server started by a command takes no credential: give it env instead.")
  end
  if has_command(row) then
    for _, field in ipairs(server_options.HTTP_ONLY) do
      local v = row[field]
      if (type(v) == "string" and v ~= "") or (type(v) == "table" and next(v) ~= nil) then
        return invalid(field, "A proxy, TLS files and headers are for a server reached by URL, not one started by "
          .. "a command.")
      end
    end
  end
  if row.auth_placement == "header" and (row.auth_header_name or "") == "" and (row.auth_credential or "") ~= "" then
    return invalid("auth_header_name", "A credential placed in a header needs a header name.")
  end
  if not row.enabled then return true end
  return catalogue.identifier_free(store, uid, row.identifier)
end

-- A new server's identifier must be free among all servers, enabled or not:
-- a disabled twin would otherwise be refused only later, when it is enabled.
local function identifier_unused(store, identifier)
  local rows, message, err = store:servers()
  if not rows then return nil, message, err end
  for _, other in ipairs(rows) do
    if other.identifier == identifier then
      return errors.fail("conflict", { field = "identifier", identifier = identifier, other = other.name })
    end
  end
  return true
end

--- Add a server. fields: identifier, name, and url or command (required; a
--- command is an argv list, with env { NAME = value or "env:VAR" } and cwd), description,
--- auth_credential (a reference such as "env:NAME", never the secret),
--- auth_placement, auth_header_name, data_class, requires_approval ("1"/"0"), enabled,
--- reimport ("manual", the default: a change notice marks the catalogue stale; "auto": the host
--- imports it again at its next safe point); for a URL server proxy ("" the environment's, "none",
--- or http://, https://, socks5h:// HOST:PORT), ca_file and client_cert (readable files), client_key
--- (a readable file, or a reference env:NAME resolving to its path), headers { NAME = value }
--- (non-secret); roots { { uri = "file://…", name }, … }.
-- @param options { actor, resolver (accept keys this credential resolver resolves) }
-- @return uid | nil, message, err (kind "forbidden", "invalid", "conflict" (any server with that
--   identifier, enabled or not), "store")
function operator.add(store, fields, options)
  options = options or {}
  local ok, message, err = operator.require_admin(options.actor)
  if not ok then return nil, message, err end
  local values
  values, message, err = clean(fields, options)
  if not values then return nil, message, err end
  local merged = { auth_placement = "bearer", requires_approval = "1", enabled = false }
  for k, v in pairs(values) do merged[k] = v end
  ok, message, err = coherent(store, 0, merged)
  if not ok then return nil, message, err end
  ok, message, err = identifier_unused(store, merged.identifier)
  if not ok then return nil, message, err end
  return store:add_server(values)
end

--- What keeps a server from supplying tools to a run, each with the server
--- flags that fix it: [{ field, text, flags }] (empty when it is usable).
function operator.missing(row)
  local missing = {}
  if not catalogue.data_class(row) then
    missing[#missing + 1] = { field = "data_class", text = "no data class is declared, so no tool of it is offered",
      flags = "--data-class " .. table.concat(catalogue.DATA_CLASSES, "|") }
  end
  if row.enabled ~= true then
    missing[#missing + 1] = { field = "enabled", text = "it is disabled", flags = "--enabled" }
  end
  return missing
end

--- Change a server's editable fields (the same checks as add). A new URL
--- forgets the server's OAuth grants: they were issued for the old one.
-- @return true, the number of grants forgotten | nil, message, err
function operator.edit(store, id, fields, options)
  options = options or {}
  local row, message, err = admitted(store, id, options)
  if not row then return nil, message, err end
  local values
  values, message, err = clean(fields, options)
  if not values then return nil, message, err end
  -- a new URL turns a stdio server into an HTTP one, and a new command the other way
  if values.url and values.command == nil and has_command(row) then
    values.command, values.env, values.cwd = {}, {}, ""
  end
  if values.command and next(values.command) and (row.url or "") ~= "" and values.url == nil then
    values.url = ""
    -- what only a URL server has goes with the URL, unless given again (and then refused below)
    for _, field in ipairs(server_options.HTTP_ONLY) do
      if values[field] == nil then values[field] = server_options.FIELDS[field] == "table" and {} or "" end
    end
  end
  for k, v in pairs(values) do row[k] = v end
  local ok
  ok, message, err = coherent(store, row.uid, row)
  if not ok then return nil, message, err end
  return store:update_server(row.uid, values)
end

--- Remove a server (soft delete; its tool rows stay, so a run's audit can still name them).
--- Its OAuth grants are forgotten with it.
-- @return true, the number of grants forgotten | nil, message, err
function operator.remove(store, id, options)
  local row, message, err = admitted(store, id, options)
  if not row then return nil, message, err end
  return store:remove_server(row.uid)
end

---------------------------------------------------------------------------
-- Tools
---------------------------------------------------------------------------

-- Whether a tool is switched on: its group is on (no row: on) and the tool
-- is on (no row: off, as imported tools are). A switch that cannot be read
-- is a failure, never "no row" (which would show a switched-off group as on).
-- @return { enabled, own = the tool's switch (true/false/nil), group = the group's (true/false/nil) }
--   | nil, message, err
local function tool_enabled(store, tool_name, identifier)
  local group, message, err = store:group_enabled(names.group(identifier))
  if group == nil and message then return nil, message, err end
  local own
  own, message, err = store:tool_enabled(tool_name)
  if own == nil and message then return nil, message, err end
  return { enabled = group ~= false and own == true, own = own, group = group }
end

-- The server rows `operator.tools` lists | nil, message, err.
local function listed_servers(store, id)
  if id == nil then return store:servers() end
  local uid = id_of(id)
  if not uid then return errors.fail("unknown_server") end
  local row, message, err = existing_server(store, uid)
  if not row then return nil, message, err end
  return { row }
end

--- The imported tools, of one server or of all, with their state.
-- @param id a server id, or nil for every server
-- @return array of { server_uid, identifier, tool_name, remote_name, description, orphaned, enabled,
--   tool_state, group_state, group } | nil, message, err
function operator.tools(store, id)
  local rows, message, err = listed_servers(store, id)
  if not rows then return nil, message, err end
  local list = {}
  for _, row in ipairs(rows) do
    local tools
    tools, message, err = store:tools_of(row.uid)
    if not tools then return nil, message, err end
    for _, t in ipairs(tools) do
      local switches
      switches, message, err = tool_enabled(store, t.tool_name, row.identifier)
      if not switches then return nil, message, err end
      list[#list + 1] = { server_uid = row.uid, identifier = row.identifier, tool_name = t.tool_name,
        remote_name = t.remote_name, description = t.description, orphaned = t.orphaned == true,
        enabled = switches.enabled, tool_state = switches.own, group_state = switches.group,
        group = names.group(row.identifier) }
    end
  end
  return list
end

-- What a name refers to.
-- @return { tool = boolean, group = boolean } | nil, message, err
local function lookup(store, name)
  local owner, message, err = store:tool_owner(name)
  if message then return nil, message, err end
  local rows
  rows, message, err = store:servers()
  if not rows then return nil, message, err end
  local found = { tool = owner ~= nil, group = false }
  for _, row in ipairs(rows) do
    if names.group(row.identifier) == name then found.group = true end
    -- a server named instead of its group: the refusal names the group
    if row.identifier == name then found.group_of_server = names.group(row.identifier) end
  end
  return found
end

-- Which switch `name` means: options.what when it names one that exists,
-- else the only thing the name refers to.
-- @return "tool" | "group" | nil, message, err (kind "invalid" when it names both, "unknown_tool")
local function target_of(store, name, what)
  local found, message, err = lookup(store, name)
  if not found then return nil, message, err end
  if what == nil and found.tool and found.group then
    return errors.fail("invalid", { field = "name", detail = string.format('"%s" names both a tool and a group; say '
      .. "which with --tool or --group.", core.clip(name, 100)) })
  end
  if what == nil then what = found.tool and "tool" or found.group and "group" or nil end
  if what == nil or not found[what] then
    return errors.fail("unknown_tool", { name = name, group = found.group_of_server })
  end
  return what
end

--- Switch a tool or a whole group on or off.
-- @param options { actor, what = nil (decide from the name) | "tool" | "group" }
-- @return "tool" | "group" | nil, message, err (kind "forbidden", "unknown_tool", "invalid", "store")
function operator.set_enabled(store, name, enabled, options)
  options = options or {}
  local ok, message, err = operator.require_admin(options.actor)
  if not ok then return nil, message, err end
  if type(name) ~= "string" then error("the tool or group name must be a string", 2) end
  local what
  what, message, err = target_of(store, name, options.what)
  if not what then return nil, message, err end
  if what == "tool" then
    ok, message, err = store:set_tool_enabled(name, enabled)
  else
    ok, message, err = store:set_group_enabled(name, enabled)
  end
  if not ok then return nil, message, err end
  return what
end

---------------------------------------------------------------------------
-- Runs: what was left behind, and what to do about it
---------------------------------------------------------------------------

-- Does the run's audit hold the fenced call? A tool step that names the tool
-- with the same arguments, at the fence's sequence or after it (a refusal
-- whose step could not be written shifts the numbers, never backwards).
local function recorded(events, entry)
  for _, e in ipairs(events) do
    if e.kind == "tool" and (entry.sequence == nil or e.sequence >= entry.sequence) then
      local ok, step = pcall(json.decode, e.payload)
      if ok and type(step) == "table" and step.toolName == entry.tool
          and run.digest(step.toolArguments) == entry.arguments_sha256 then
        return true
      end
    end
  end
  return false
end

-- What the operator does next about a run, in one sentence.
-- Does the step that stopped the waiting turn still wait for a person's decision?
local function undecided(waiting)
  for _, step in ipairs(waiting.steps) do
    if step.reason == "approval" then return step.decision == nil end
  end
  return false
end

local function next_step(view)
  local unrecorded, tasks = 0, 0
  for _, entry in ipairs(view.fence) do
    if not entry.recorded then unrecorded = unrecorded + 1 end
    if not entry.recorded and entry.task_id then tasks = tasks + 1 end
  end
  if tasks > 0 and tasks == unrecorded and view.status == "running" and view.lease_expired then
    return "Its worker stopped while its call ran as a task on the server (see `mcpclient tasks`): take the run "
      .. "over (run.take_over) to follow the same task to its end; nothing is called again."
  elseif unrecorded > 0 and (view.status ~= "running" or view.lease_expired) then
    return "A fenced write may have run without its audit step: ask the server (or its logs) whether the call "
      .. "named in the fence ran, with arguments of that digest, and act on it there; the run is not resumed."
  elseif unrecorded > 0 then
    return "A write is on the wire under a live lease: wait for its owner, or for the lease to expire."
  elseif view.status == "running" and view.lease_expired then
    return "Its worker stopped between calls (nothing is unrecorded): a worker may claim it, or leave it."
  elseif view.status == "running" then
    return "Running: its owner holds the lease."
  elseif view.status == "waiting_approval" and not view.waiting then
    return "Waiting for a person to approve its calls in the process that holds it (its waiting steps are not "
      .. "kept on its row, so no other process can take it over)."
  elseif view.status == "waiting_approval" and not view.waiting.approval and undecided(view.waiting) then
    return "Waiting for a person: `mcpclient approve " .. view.uid .. " [<step id>]` or `mcpclient deny "
      .. view.uid .. " [<step id>] [--reason TEXT]`; the process that holds it (or, once its lease expired or it "
      .. "was released, any process: run.take_over) then resumes it."
  elseif view.status == "waiting_approval" and not view.waiting.approval then
    return string.format("Decided step by step; waiting for its holder to resume it%s.", view.lease_expired
      and " (its lease expired: any process may take it over with run.take_over and resume it)" or "")
  elseif view.status == "waiting_approval" then
    return string.format("%s; waiting for its holder to resume it%s.", view.waiting.approval == "approved"
      and "Approved" or "Denied", view.lease_expired and " (its lease expired: any process may take it over with "
      .. "run.take_over and resume it)" or "")
  end
  return "Nothing to do: the audit holds every call the run made."
end

-- One run as the operator sees it.
local function run_view(store, row, now)
  local view = { uid = row.uid, uuid = row.uuid, status = row.status, owner = row.claimed_by,
    lease_expires = row.lease_expires, lease_expired = row.lease_expires < now, user_name = row.user_name,
    configuration = row.configuration, created = row.created_at, updated = row.updated_at,
    cancel_requested = row.cancel_requested, fence = run.fence(row.fence), waiting = run.waiting(row) }
  if #view.fence > 0 then
    local events, message, err = store:events(row.uid)
    if not events then return nil, message, err end
    for _, entry in ipairs(view.fence) do entry.recorded = not entry.unnamed and recorded(events, entry) end
  end
  view.next = next_step(view)
  return view
end

--- The runs, newest first, with what an operator needs after a crash: state,
-- owner, lease, the fenced calls (each with whether the audit holds it) and
-- the next step. Runs left behind are marked failed first (store:recover_runs).
-- @param options { open = true: only runs still running or waiting, or with their fence set;
--   waiting = true: only runs waiting for approval;
--   now = unix seconds (default os.time()) }
-- @return array of { uid, uuid, status, owner, lease_expires, lease_expired, user_name, configuration,
--   created, updated, cancel_requested, fence = { { tool, arguments_sha256, sequence, recorded }
--   | { unnamed = true, text, recorded = false } }, waiting (a waiting run's steps and decision, see
--   run.waiting; nil otherwise), next } | nil, message, err
function operator.runs(store, options)
  options = options or {}
  local now = options.now or os.time()
  -- a store that cannot be written (read-only) is still listed: a run left
  -- behind then shows as running with its lease expired, and the same next step
  store:recover_runs(now)
  local rows, message, err = store:runs(options.open == true)
  if not rows then return nil, message, err end
  local views = {}
  for _, row in ipairs(rows) do
    if not options.waiting or row.status == "waiting_approval" then
      local view
      view, message, err = run_view(store, row, now)
      if not view then return nil, message, err end
      views[#views + 1] = view
    end
  end
  return views
end

--- Record a person's decision on a run waiting for approval (run.decide,
--- by an administrator); the run's holder, or a process that takes it over,
--- resumes it with that decision.
-- @param options { actor, by = who decided (default the actor's name) }
-- @return the run's view after the decision | nil, message, err (kind "forbidden", "invalid", "store")
function operator.decide(store, run_uid, approved, options)
  options = options or {}
  local ok, message, err = operator.require_admin(options.actor)
  if not ok then return nil, message, err end
  local by = options.by or (type(options.actor) == "table" and options.actor.name) or "operator"
  ok, message, err = run.decide(store, run_uid, approved, { by = by, id = options.id, reason = options.reason })
  if not ok then return nil, message, err end
  local row
  row, message, err = store:run(run_uid)
  if not row then return nil, message, err end
  return run_view(store, row, os.time())
end

return operator
