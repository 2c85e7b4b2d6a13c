--- A scripted MCP server over stdio whose tools declare output schemas, for the specs of output
--- validation in the agent host.
--
--   lua5.4 spec/support/output_server.lua ERA
--
-- ERA is "legacy" (2025-11-25: initialize) or "modern" (2026-07-28: server/discover). It needs
-- mcpclient.core on LUA_CPATH (support.stdio.env). Tools:
--   count {give}  declares outputSchema { n: integer, required }; answers structuredContent
--                 { n = 1 } when give is "good", { n = "one\27[31m" } when "bad", none when "none"
--   plain         declares none; answers structuredContent { anything = "goes" }
--   listy         declares an outputSchema that is a JSON array (no schema at all)
--   calls         the number of tools/call requests received so far, as text
local core = require "mcpclient.core"
local json = core.json

local modern = (arg[1] or "legacy") == "modern"
local out = io.stdout
out:setvbuf("no")

local function send(message) out:write(json.encode(message) .. "\n") end

local function result(id, value)
  if modern then value.resultType = "complete" end
  send { jsonrpc = "2.0", id = id, result = value }
end

local function tool(name, extra)
  local t = { name = name, description = "the " .. name .. " tool", inputSchema = { type = "object" } }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local TOOLS = {
  tool("count", { outputSchema = { type = "object", required = { "n" }, properties = { n = { type = "integer" } } } }),
  tool("plain"),
  tool("listy", { outputSchema = json.array { { type = "object" } } }),
  tool("calls"),
}

local calls = 0

local function call(id, params)
  calls = calls + 1
  local name, args = params.name, params.arguments or {}
  local content = { { type = "text", text = name .. " answered" } }
  if name == "count" then
    local given = ({ good = { n = 1 }, bad = { n = "one\27[31m" } })[args.give]
    return result(id, { content = content, structuredContent = given })
  elseif name == "plain" then
    return result(id, { content = content, structuredContent = { anything = "goes" } })
  elseif name == "calls" then
    return result(id, { content = { { type = "text", text = tostring(calls) } } })
  end
  send { jsonrpc = "2.0", id = id, error = { code = -32602, message = "unknown tool" } }
end

local CAPABILITIES = { tools = {} }

while true do
  local line = io.read("l")
  if not line then os.exit(0) end
  local message = json.decode(line)
  local id, method, params = message.id, message.method, message.params or {}
  if method == "server/discover" and modern then
    result(id, { supportedVersions = { "2026-07-28" }, capabilities = CAPABILITIES, ttlMs = 0,
      _meta = { ["io.modelcontextprotocol/serverInfo"] = { name = "output-fake", version = "1" } } })
  elseif method == "initialize" and not modern then
    result(id, { protocolVersion = "2025-11-25", capabilities = CAPABILITIES,
      serverInfo = { name = "output-fake", version = "1" } })
  elseif method == "tools/list" then
    result(id, { tools = TOOLS })
  elseif method == "tools/call" then
    call(id, params)
  elseif method == "ping" and not modern then
    result(id, {})
  elseif id ~= nil then
    send { jsonrpc = "2.0", id = id, error = { code = -32601, message = "Method not found" } }
  end
end
