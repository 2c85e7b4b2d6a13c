--- A scripted MCP server over stdio for the specs of the host's settings (log level, client
--- identity), raw requests and notifications, listings page by page, stderr and notices between
--- operations.
--
--   lua5.4 spec/support/settings_server.lua ERA [FLAG]
--
-- ERA is "legacy" (2025: initialize; server/discover is "method not found") or "modern"
-- (2026-07-28: server/discover, the envelope in every request's _meta). FLAG: "nolog" (no logging
-- capability), "refuse_level" (logging/setLevel answers an error). It needs mcpclient.core on
-- LUA_CPATH (support.stdio.env). Tools:
--   log         a notifications/message at each of the eight levels at or above the level asked
--               for (2025: logging/setLevel; 2026-07-28: the request's _meta logLevel, none without
--               it), then "logged <n>"
--   stderr {text}  writes text to stderr as it is (no newline added), then "written"
--   seen        JSON { client_info (initialize's, or the latest request's envelope), levels (every
--               logging/setLevel, in order), meta_levels (each request's _meta logLevel, "-" when
--               none), notices (each notification received: { method, params }) }
--   later {delay}  answers, then after delay seconds writes notifications/tools/list_changed,
--               notifications/vendor/ping { text } and a notifications/message at "error"
-- Listings in pages: tools/list (cursor "page 2/=" then the last), resources/list (cursor "r2"),
-- resources/templates/list and prompts/list (one page each). vendor/echo answers { echoed =
-- params }. Anything else: method not found.
local core = require "mcpclient.core"
local json = core.json

local era, flag = arg[1] or "legacy", arg[2]
local modern = era == "modern"
local out = io.stdout
out:setvbuf("no")

local LEVELS = { "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency" }
local RANK = {}
for i, level in ipairs(LEVELS) do RANK[level] = i end

local client_info, level = json.null, nil
local levels, meta_levels, notices = json.array {}, json.array {}, json.array {}

local function send(message) out:write(json.encode(message) .. "\n") end

local function result(id, value)
  if modern then value.resultType = "complete" end
  send { jsonrpc = "2.0", id = id, result = value }
end

local function text(id, words) result(id, { content = { { type = "text", text = words } } }) end

local function tool(name, extra)
  local t = { name = name, description = "the " .. name .. " tool", inputSchema = { type = "object" } }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local PAGES = {
  ["tools/list"] = {
    first = { tools = { tool("log"), tool("stderr"), tool("seen") }, nextCursor = "page 2/=" },
    ["page 2/="] = { tools = { tool("later", { outputSchema = { type = "object", required = { "n" } },
      execution = { taskSupport = "forbidden" } }) } },
  },
  ["resources/list"] = {
    first = { resources = { { uri = "file:///a", name = "a\27[31m" }, { name = "no uri" } }, nextCursor = "r2" },
    r2 = { resources = { { uri = "file:///b", name = "b" } } },
  },
  ["resources/templates/list"] = {
    first = { resourceTemplates = { { uriTemplate = "file:///{path}", name = "files", description = "d\7" } } },
  },
  ["prompts/list"] = {
    first = { prompts = { { name = "greet", description = "hello\27[1m",
      arguments = { { name = "who", description = "whom\27[0m" } } } } },
  },
}

local function log_all(asked)
  local n = 0
  for _, l in ipairs(LEVELS) do
    if asked and RANK[l] >= RANK[asked] then
      n = n + 1
      send { jsonrpc = "2.0", method = "notifications/message", params = { level = l, logger = "fake",
        data = { text = l .. " message\27[31m" } } }
    end
  end
  return n
end

local function call(id, params, meta)
  local name, args = params.name, params.arguments or {}
  if name == "log" then
    local asked = modern and meta["io.modelcontextprotocol/logLevel"] or (not modern and (level or "debug"))
    return text(id, "logged " .. log_all(asked))
  end
  if name == "stderr" then
    io.stderr:write(tostring(args.text))
    io.stderr:flush()
    return text(id, "written")
  end
  if name == "seen" then
    return text(id, json.encode { client_info = client_info, levels = levels, meta_levels = meta_levels,
      notices = notices })
  end
  if name == "later" then
    result(id, { content = { { type = "text", text = "later" } }, structuredContent = { n = 1 } })
    core.sleep(args.delay or 0.2)
    send { jsonrpc = "2.0", method = "notifications/tools/list_changed" }
    send { jsonrpc = "2.0", method = "notifications/vendor/ping", params = { text = "ping\27[31m" } }
    send { jsonrpc = "2.0", method = "notifications/message", params = { level = "error", data = "late" } }
    return
  end
  send { jsonrpc = "2.0", id = id, error = { code = -32602, message = "unknown tool" } }
end

local CAPABILITIES = { tools = { listChanged = true }, resources = {}, prompts = {} }
if flag ~= "nolog" then CAPABILITIES.logging = {} end

while true do
  local line = io.read("l")
  if not line then os.exit(0) end
  local message = json.decode(line)
  local id, method, params = message.id, message.method, message.params or {}
  local meta = type(params._meta) == "table" and params._meta or {}
  if modern and id ~= nil then
    meta_levels[#meta_levels + 1] = meta["io.modelcontextprotocol/logLevel"] or "-"
    client_info = meta["io.modelcontextprotocol/clientInfo"] or json.null
  end
  if method == "server/discover" and modern then
    result(id, { supportedVersions = { "2026-07-28" }, capabilities = CAPABILITIES, ttlMs = 0,
      _meta = { ["io.modelcontextprotocol/serverInfo"] = { name = "settings-fake", version = "1" } } })
  elseif method == "initialize" and not modern then
    client_info = params.clientInfo or json.null
    result(id, { protocolVersion = "2025-11-25", capabilities = CAPABILITIES,
      serverInfo = { name = "settings-fake", version = "1" } })
  elseif method == "logging/setLevel" and not modern then
    levels[#levels + 1] = params.level
    if flag == "refuse_level" then
      send { jsonrpc = "2.0", id = id, error = { code = -32603, message = "no levels here" } }
    else
      level = params.level
      result(id, {})
    end
  elseif PAGES[method] then
    local page = PAGES[method][params.cursor == nil and "first" or params.cursor]
    if page then
      local copy = {}
      for k, v in pairs(page) do copy[k] = v end
      result(id, copy)
    else
      send { jsonrpc = "2.0", id = id, error = { code = -32602, message = "unknown cursor" } }
    end
  elseif method == "tools/call" then
    call(id, params, meta)
  elseif method == "vendor/echo" then
    result(id, { echoed = params })
  elseif method == "ping" and not modern then
    result(id, {})
  elseif id == nil and method then
    notices[#notices + 1] = { method = method, params = message.params or json.null }
  elseif id ~= nil then
    send { jsonrpc = "2.0", id = id, error = { code = -32601, message = "Method not found" } }
  end
end
