--- A headless agent: no person at hand, so OAuth's client credentials grant
--- (machine to machine), then the catalogue and one call.
--
--   MCP_CLIENT_ID=... MCP_CLIENT_SECRET=... lua5.4 examples/headless_agent.lua <server url> [tool] [arguments JSON]
--
-- Without MCP_CLIENT_ID it connects without authorization (a local test server).
-- The secret is a reference (env:MCP_CLIENT_SECRET), resolved when the token is
-- requested; tokens stay in memory and never appear in a message.
local mcp = require "mcpclient"

local url = arg[1] or error("usage: lua5.4 examples/headless_agent.lua <server url> [tool] [arguments JSON]")

local options = { url = url, identifier = "remote", health = mcp.health.discard, budget = 20 }
if os.getenv("MCP_CLIENT_ID") then
  options.oauth = { grant = "client_credentials", client_id = os.getenv("MCP_CLIENT_ID"),
    client_secret = "env:MCP_CLIENT_SECRET" }
end

local conn <close> = mcp.connect(options)
local tools, message, err = conn:list_tools()
if not tools then
  io.stderr:write(message, " (", err.kind, ")\n")
  os.exit(1)
end
for _, t in ipairs(tools) do print(mcp.json.encode(t.name)) end

if arg[2] then
  local arguments = arg[3] and assert(mcp.json.decode(arg[3])) or {}
  local outcome
  outcome, message, err = conn:call_tool(arg[2], arguments)
  if not outcome then
    io.stderr:write(message, " (", err.kind, ")\n")
    os.exit(1)
  end
  print(outcome.is_error and "tool error:" or "answer:", outcome.text)
end
