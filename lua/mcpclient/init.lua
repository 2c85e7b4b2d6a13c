--- mcpclient: a Model Context Protocol client for Lua 5.4 agents.
--
--   local mcp = require "mcpclient"
--   local conn <close> = mcp.connect{ url = ..., identifier = "docs", health = mcp.health.discard }
--   local tools = assert(conn:list_tools())
--   local outcome = assert(conn:call_tool("read_page", { uid = 3 }))
--
-- Failures of the network, the peer or the environment return nil, message,
-- err (err.kind is a fixed string; see README "Errors"); misuse raises.
local core = require "mcpclient.core"
local client = require "mcpclient.client"

local mcp = {
  version = core.version,
  connect = client.connect,
  PROTOCOL_VERSION = client.PROTOCOL_VERSION,
  SUPPORTED_VERSIONS = client.SUPPORTED_VERSIONS,
}

-- The rest of the library, loaded on first use: mcp.store, mcp.run, ...
local submodules = {
  json = "mcpclient.json", health = "mcpclient.health", tool = "mcpclient.tool", names = "mcpclient.names",
  policy = "mcpclient.policy", store = "mcpclient.store", catalogue = "mcpclient.catalogue",
  run = "mcpclient.run", operator = "mcpclient.operator",
}

return setmetatable(mcp, {
  __index = function(t, key)
    local name = submodules[key]
    if not name then return nil end
    local module = require(name)
    rawset(t, key, module)
    return module
  end,
})
