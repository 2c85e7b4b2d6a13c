--- The host's settings of a connection that reach the server: the log level
-- it asks for, the client's identity, and header lines of its own. Each is
-- checked once, when the connection is made, and kept as it will be sent.
local settings = {}

--- The log levels a server may be asked for (RFC 5424's, as MCP names them), least severe first.
settings.LOG_LEVELS = { "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency" }
local LEVEL = {}
for _, level in ipairs(settings.LOG_LEVELS) do LEVEL[level] = true end

--- Is `level` one of the log levels?
function settings.log_level_ok(level)
  return LEVEL[level] == true
end

settings.LEVEL_RULE = 'log_level must be one of "' .. table.concat(settings.LOG_LEVELS, '", "') .. '"'

-- How long the client's name, version and title may be.
local INFO_LIMIT = 200
local INFO_KEYS = { name = true, version = true, title = true }

-- A text of the client's identity: 1 to INFO_LIMIT bytes of UTF-8 with no control character.
local function info_text(value)
  return type(value) == "string" and #value > 0 and #value <= INFO_LIMIT and utf8.len(value) ~= nil
    and not value:find("%c")
end

-- The header names the library writes itself, and those that carry secrets or
-- frame the message: never the host's to set.
local OWNED = { authorization = true, cookie = true, ["proxy-authorization"] = true, host = true, accept = true,
  ["last-event-id"] = true, ["transfer-encoding"] = true, connection = true, dpop = true, expect = true, te = true,
  upgrade = true, ["keep-alive"] = true, ["proxy-connection"] = true }
local SECRETS = { authorization = true, cookie = true, ["proxy-authorization"] = true, dpop = true }
-- An HTTP field name: one or more token characters.
local TOKEN = "^[!#$%%&'*+%-%.%^_`|~0-9A-Za-z]+$"
local NAME_LIMIT, VALUE_LIMIT = 128, 4096
settings.MAX_HEADERS = 32

--- Why the header `name: value` cannot be the host's, or nil. The second
--- value says which rule refused it when the name is a header the host may
--- never set: "secret" (a credential's) or "owned" (the client writes it).
-- @return reason, "secret" | "owned" | nil
function settings.header_problem(name, value)
  if type(name) ~= "string" or not name:find(TOKEN) or #name > NAME_LIMIT then
    return string.format("headers: the name %s is not an HTTP header name (1 to %d token characters: "
      .. "letters, digits and !#$%%&'*+-.^_`|~)", type(name) == "string" and string.format("%q", name:sub(1, 40))
      or ("of type " .. type(name)), NAME_LIMIT)
  end
  local lower = name:lower()
  if SECRETS[lower] then
    return string.format("headers: %s is not set here: credentials go through auth (a credential reference) "
      .. "or oauth, which keep them out of logs and traces", name), "secret"
  end
  if OWNED[lower] or lower:find("^mcp%-") or lower:find("^content%-") then
    return string.format("headers: %s is written by the client itself (as are Accept, Host, Content-*, "
      .. "Mcp-*, Last-Event-ID, Transfer-Encoding and Connection)", name), "owned"
  end
  if type(value) ~= "string" then return string.format("headers: the value of %s must be a string", name) end
  if value == "" or #value > VALUE_LIMIT then
    return string.format("headers: the value of %s must be 1 to %d bytes", name, VALUE_LIMIT)
  end
  if value:find("[%z\r\n]") then
    return string.format("headers: the value of %s holds a CR, LF or NUL (control characters that would end "
      .. "the header line)", name)
  end
  if (value:gsub("\t", "")):find("%c") then
    return string.format("headers: the value of %s holds a control character", name)
  end
  if value:find("^[ \t]") or value:find("[ \t]$") then
    return string.format("headers: the value of %s starts or ends with white space, which HTTP drops", name)
  end
  return nil
end

-- Why the headers option is refused, or nil.
local function headers_problem(headers)
  local seen, count = {}, 0
  for name, value in pairs(headers) do
    count = count + 1
    if count > settings.MAX_HEADERS then
      return string.format("headers: at most %d header lines", settings.MAX_HEADERS)
    end
    local why = settings.header_problem(name, value)
    if why then return why end
    local lower = name:lower()
    if seen[lower] then return string.format("headers: %s is named twice (header names ignore case)", name) end
    seen[lower] = true
  end
  return nil
end

--- Why connect's options for the settings are refused, or nil: log_level
--- one of LOG_LEVELS; client_info { name, version[, title] }; headers a table
--- of name = value for a server reached by url, none the client writes
--- itself or a secret's; on_stderr only for a server started by command.
function settings.problem(options)
  if options.log_level ~= nil and not LEVEL[options.log_level] then return settings.LEVEL_RULE end
  local info = options.client_info
  if info ~= nil then
    for key in pairs(info) do
      if not INFO_KEYS[key] then
        return string.format("client_info takes name, version and title, not %s", tostring(key))
      end
    end
    if not info_text(info.name) or not info_text(info.version) or (info.title ~= nil and not info_text(info.title)) then
      return string.format("client_info: name and version (and title, when given) must be strings of 1 to %d "
        .. "bytes of UTF-8 with no control characters", INFO_LIMIT)
    end
  end
  if options.headers ~= nil then
    if options.command ~= nil then
      return "headers are HTTP header lines, for a server reached by url: a server started with command "
        .. "(stdio) has no HTTP requests (give it what it needs in env)"
    end
    if options.channel ~= nil then return "headers go with the library's HTTP channel, not an injected one" end
    local why = headers_problem(options.headers)
    if why then return why end
  end
  if options.on_stderr ~= nil and options.command == nil then
    return "on_stderr is for a server started with command (stdio): a server reached by url has no stderr"
  end
  return nil
end

--- The header lines of a checked headers option ("Name: value", sorted by
--- name, so every request sends them in the same order), or nil when none.
function settings.header_lines(headers)
  if headers == nil or next(headers) == nil then return nil end
  local names = {}
  for name in pairs(headers) do names[#names + 1] = name end
  table.sort(names)
  local lines = {}
  for i, name in ipairs(names) do lines[i] = name .. ": " .. headers[name] end
  return lines
end

--- A copy of a checked client_info (the host's table may change later), or nil.
function settings.client_info(info)
  if info == nil then return nil end
  return { name = info.name, version = info.version, title = info.title }
end

return settings
