--- A child process for spec/integration/oauth_spec.lua: runs an authorized
--- session against spec/support/oauth_server.mjs and prints everything the
--- library hands back (results, messages, every field of every err) and lets
--- the library log to stderr, so the spec can grep all of it for the token.
-- usage: lua5.4 spec/support/oauth_client.lua <port>
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local mcp = require "mcpclient"

local port = assert(arg[1], "usage: oauth_client.lua <port>")
local clock_offset = 0

local function dump(label, value, message, err)
  print(label, type(value) == "table" and mcp.json.encode(value) or tostring(value), tostring(message))
  for k, v in pairs(type(err) == "table" and err or {}) do print("  err." .. tostring(k), tostring(v)) end
end

local conn = mcp.connect {
  url = "http://127.0.0.1:" .. port .. "/mcp", identifier = "oauthspec", health = mcp.health.discard,
  log = function(level, line) io.stderr:write(level, " ", line, "\n") end,
  clock = function() return os.time() + clock_offset end,
  oauth = { authorize = mcp.oauth.follow_immediate_redirect },
}
dump("tools", conn:list_tools())
dump("call", conn:call_tool("echo", {}))
clock_offset = 7200   -- the token has expired: the next operation refreshes it
dump("after expiry", conn:list_tools())
dump("server", conn:server())
-- A failing operation too: the token endpoint stalls past the budget.
local leg = require("mcpclient.core").http_leg()
assert(leg:send { method = "POST", url = "http://127.0.0.1:" .. port .. "/_config",
  body = '{"stall_token":true}', timeout_ms = 2000 })
clock_offset = 99999
dump("stalled", conn:list_tools { budget = 1 })
print(tostring(conn))
conn:close()
