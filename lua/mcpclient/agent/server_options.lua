--- How a configured server is reached and what it is told, beyond its URL
--- or command: its proxy, the TLS files (a private CA, a client certificate
--- and key), plain request headers and its roots. The operator's checks of
--- each value (agent/operator.lua's add and edit use them) and the connect
--- options a server row gives a connection (agent/catalogue.lua, login).
--
-- Stored forms (mcp_server): proxy "" (the environment's proxy, as curl reads
-- HTTPS_PROXY and the rest), "none" (no proxy, whatever the environment
-- says) or the proxy's URL; ca_file and client_cert file paths; client_key a
-- file path or a credential reference (env:NAME or a resolver key) that
-- resolves, at every connect, to the key file's path: the key itself is
-- never stored; headers NAME -> value; roots a list of { uri, name }.
local answers = require "mcpclient.answers"
local config = require "mcpclient.config"
local credentials = require "mcpclient.credentials"
local errors = require "mcpclient.errors"
local proxy = require "mcpclient.proxy"
local settings = require "mcpclient.settings"

local server_options = {}

server_options.MAX_HEADERS = settings.MAX_HEADERS
server_options.MAX_ROOTS = 64

-- The fields of a row this module owns; every other field is the operator's.
server_options.FIELDS = { proxy = "string", ca_file = "string", client_cert = "string", client_key = "string",
  headers = "table", roots = "table" }
-- The fields that only mean something over HTTP.
server_options.HTTP_ONLY = { "proxy", "ca_file", "client_cert", "client_key", "headers" }

--- Why a plain header cannot be configured, or nil: connect's `headers`
--- rules (mcpclient.settings: a token name, none the client writes itself or
--- a credential's, a value of one line), worded for the operator, and no
--- value that looks like a secret (secrets go through the credential
--- reference, which is resolved per leg and never stored or logged).
-- @param name the header's name
-- @param value its value
-- @return reason | nil
function server_options.header_problem(name, value)
  local refused, rule = settings.header_problem(name, value)
  if rule == "secret" then
    return string.format("%s is not a plain header: a secret goes through the credential (--credential env:NAME, "
      .. "--placement, --header-name)", name)
  elseif rule == "owned" then
    return string.format("%s is not a plain header: the client writes it itself", name)
  elseif refused then
    return (refused:gsub("^headers: ", ""))
  end
  if config.looks_secret(name, value) then
    return string.format("%s looks like a secret: give it as the credential (--credential env:NAME "
      .. "--placement header --header-name %s)", name, name)
  end
  return nil
end

--- Why a set of plain headers cannot be configured, or nil: each by the
--- rules above, then connect's rules for the set (how many, one name in two
--- spellings), so what a connection would refuse is never stored.
function server_options.headers_problem(headers)
  for name, value in pairs(headers) do
    local problem = server_options.header_problem(name, value)
    if problem then return problem end
  end
  local refused = settings.problem { headers = headers }
  if refused then return (refused:gsub("^headers: ", "")) end
  return nil
end

--- Why a list of roots cannot be configured, or nil. A root is
--- { uri = "file://...", name = optional text }: connect's rules for roots
--- (answers.roots), so what a connection would refuse is never stored, then
--- the operator's: fewer of them, a name of one line, no root twice.
function server_options.roots_problem(roots)
  local ok, refused = pcall(answers.roots, roots, "roots")
  if not ok then return (tostring(refused):gsub("^[^\n]-:%d+: ", ""):gsub("^roots: ", "")) end
  if #roots > server_options.MAX_ROOTS then return string.format("at most %d roots", server_options.MAX_ROOTS) end
  local seen = {}
  for i, root in ipairs(roots) do
    if root.name ~= nil and root.name:find("[%c\127]") then
      return string.format("the name of root %d is not one line of text", i)
    end
    if seen[root.uri] then return string.format("root %d is given twice", i) end
    seen[root.uri] = true
  end
  return nil
end

--- Why a proxy setting cannot be stored, or nil: "" (the environment's),
--- "none", or a URL with its scheme written (http, https or socks5h) that
--- mcp.connect takes (mcpclient.proxy's rules: no user or password, no path).
--- The reason never repeats the value (it may carry a password).
function server_options.proxy_problem(value)
  if value == "" or value == "none" then return nil end
  local scheme = value:match("^(%a[%w+.-]*)://")
  if not scheme then return 'the proxy is a URL (http://, https:// or socks5h://HOST:PORT) or "none"' end
  local parsed, why = proxy.parse(value)
  if not parsed then return why end
  return nil
end

--- Why `path` is no readable file, or nil. Nothing of the file is shown.
function server_options.file_problem(path)
  if path == "" or path:find("[%c\127]") then return "is not a file path" end
  local file = io.open(path, "rb")
  if not file then return "names no file this process can read" end
  local ok, chunk = pcall(file.read, file, 1)
  file:close()
  if not ok or chunk == nil then return "names no readable file (a directory, or an empty file)" end
  return nil
end

-- Whether a client key setting is a credential reference rather than a path.
local function key_reference(value)
  return value:match("^env:") ~= nil
end

--- Why a client key setting cannot be stored, or nil: a readable file, an
--- env:NAME reference, or a key the resolver resolves. The value itself is
--- never repeated (it may be the key, typed in the wrong place).
function server_options.client_key_problem(value, resolver)
  if key_reference(value) then
    if not credentials.env_reference(value) then
      return "an env: reference names an environment variable (letters, digits and _)"
    end
    return nil
  end
  if value:find("-----BEGIN", 1, true) or value:find("[\r\n]") then
    return "is the key itself, which is never stored: give the key file's path, or env:NAME"
  end
  if server_options.file_problem(value) == nil then return nil end
  if resolver and not value:find("%c") then
    local ok, resolved = pcall(resolver, value)
    if ok and type(resolved) == "string" and resolved ~= "" then return nil end
  end
  return "names no readable file (the value is not repeated: give the key file's path, or env:NAME)"
end

-- A failure value about the row's settings (kind "configuration").
local function unusable(row, detail)
  return errors.fail("configuration", { server = row.identifier, detail = detail })
end

--- The connect options a row's settings give, added to `spec` (a table
--- mcp.connect takes): only what is set, so a row without them connects as
--- before. proxy false for "none"; a client key reference is resolved to the
--- key file's path here, at every connect.
-- @param row a server row (hydrated: headers a table, roots a list)
-- @param spec the connect options being built (changed in place)
-- @param resolver the host's credential resolver (optional)
-- @return spec | nil, message, err (kind "configuration": a key reference that does not resolve)
function server_options.apply(row, spec, resolver)
  local http = type(row.command) ~= "table"
  if http then
    local setting = row.proxy
    if setting == "none" then
      spec.proxy = false
    elseif type(setting) == "string" and setting ~= "" then
      spec.proxy = setting
    end
    for _, field in ipairs { "ca_file", "client_cert" } do
      if type(row[field]) == "string" and row[field] ~= "" then spec[field] = row[field] end
    end
    local key = row.client_key
    if type(key) == "string" and key ~= "" then
      if key_reference(key) or (resolver and server_options.file_problem(key) ~= nil) then
        local path, why = credentials.resolve(key, resolver)
        if not path then return unusable(row, "its client key reference does not resolve: " .. why) end
        spec.client_key = path
      else
        spec.client_key = key
      end
    end
    if type(row.headers) == "table" and next(row.headers) ~= nil then
      local headers = {}
      for name, value in pairs(row.headers) do headers[name] = value end
      spec.headers = headers
    end
  end
  if type(row.roots) == "table" and #row.roots > 0 then
    local roots = {}
    for i, root in ipairs(row.roots) do roots[i] = { uri = root.uri, name = root.name } end
    spec.roots = roots
  end
  return spec
end

return server_options
