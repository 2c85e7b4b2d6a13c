--- mcpclient: a Model Context Protocol client for Lua 5.4 agents.
--
--   local mcp = require "mcpclient"
--   local conn &lt;close&gt; = mcp.connect{ url = ..., identifier = "docs", health = mcp.health.discard }
--   local tools = assert(conn:list_tools())
--   local outcome = assert(conn:call_tool("read_page", { uid = 3 }))
--
-- Failures of the network, the peer or the environment return nil, message,
-- err (err.kind is a fixed string; see README.md "Errors" and docs/ERRORS.md); misuse raises.
local core = require "mcpclient.core"
local connection = require "mcpclient.connection"
local engine = require "mcpclient.engine"

local mcp = {
  version = core.version,
  connect = connection.connect,
  -- Seconds on the monotonic clock the library measures with (fractional):
  -- for deadlines in cancel hooks, e.g. `cancel = function() return mcp.now() > stop_at end`.
  now = core.now,
  -- The text rule, for far-side text a host shows or hands on (an elicitation's field titles, say):
  -- mcp.clip(text [, limit = 200 code points]) -> control, C1 and bidi characters out, clipped.
  clip = core.clip,
  -- mcp.inert(text [, limit = 50000 bytes]) -> text, truncated: the rule for a body (a raw `content`
  -- text a host prints, say): lines kept, escape sequences, C0, C1 and bidi characters out, bounded.
  inert = core.inert,
  -- run functions at once: mcp.gather{ fn, ... } -> { table.pack(fn()) or { n = 0, error = e }, ... }
  gather = engine.gather,
  -- the engine as a pollable for a host's event loop: pollfd(), events(), timeout(), step()
  engine = engine.host,
  -- mcp.loop{ wait = function(engine) ... end }: waits inside host coroutines yield to the host
  loop = engine.loop,
  PROTOCOL_VERSION = connection.PROTOCOL_VERSION,
  SUPPORTED_VERSIONS = connection.SUPPORTED_VERSIONS,
}

-- The rest of the library, loaded on first use. Two layers: the protocol
-- client (this folder) and the agent host built on it (agent/).
local submodules = {
  json = "mcpclient.json", health = "mcpclient.health", errors = "mcpclient.errors",
  tool = "mcpclient.agent.tool", names = "mcpclient.agent.names", policy = "mcpclient.agent.policy",
  store = "mcpclient.agent.store", catalogue = "mcpclient.agent.catalogue", run = "mcpclient.agent.run",
  operator = "mcpclient.agent.operator", oauth = "mcpclient.oauth", config = "mcpclient.config",
  uri_template = "mcpclient.uri_template",
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
