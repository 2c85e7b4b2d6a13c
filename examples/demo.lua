--- The demo: connect to a real MCP server, list its tools, call one, print the result.
--
--   lua5.4 examples/demo.lua <server url>
--
-- `make demo` starts server-everything on 127.0.0.1 and runs this against it.
local mcp = require "mcpclient"

local url = arg[1] or error("usage: lua5.4 examples/demo.lua <server url>")

local conn <close> = mcp.connect {
  url = url,
  identifier = "demo",
  budget = 20,                  -- seconds for one operation, every leg together
  health = function(identifier, latency_ms)
    print(string.format("  (health: %s answered, last leg %d ms)", identifier, latency_ms))
  end,
}

local report = assert(conn:ping())
print(string.format("Reached %s %s, protocol %s, in %d ms", report.server_name, report.server_version,
  report.protocol_version, report.latency_ms))

local tools = assert(conn:list_tools())
print(string.format("%d tools:", #tools))
for _, tool in ipairs(tools) do
  -- Far-side text: strip control characters before it reaches the terminal.
  local description = (tool.description or ""):gsub("%c+", " ")
  print(string.format("  %-30s %s", tool.name, description:sub(1, 60)))
end

local outcome = assert(conn:call_tool("echo", { message = "hello from Lua" }))
print("echo says: " .. outcome.text)

outcome = assert(conn:call_tool("get-sum", { a = 2, b = 40 }))
print("get-sum says: " .. outcome.text)

outcome = assert(conn:call_tool("get-tiny-image", {}))
print("get-tiny-image says:\n" .. outcome.text)
