--- Call one tool of an MCP server over HTTP after a delay, from a process of its own: what a spec
--- uses to make a server act while the spec's own process waits in mcp.engine.step.
--
--   lua5.4 spec/support/call_later.lua URL DELAY TOOL
--
-- Prints the tool's text (or the failure) and exits; it needs the C core on LUA_CPATH and the Lua
-- modules on LUA_PATH (support.stdio.env gives both).
local mcp = require "mcpclient"
local core = require "mcpclient.core"

local url, delay, name = arg[1], tonumber(arg[2]), arg[3]
core.sleep(delay)
local conn <close> = mcp.connect { identifier = "later", url = url, health = mcp.health.discard, budget = 10 }
local outcome, message = conn:call_tool(name, {})
print(outcome and outcome.text or message)
