-- One connection in a process of its own, so a spec can give it an environment
-- (http_proxy, NO_PROXY, ...): lua5.4 spec/support/proxy_child.lua URL [PROXY | false | ""] [CA_FILE | ""]
-- [PROXY_AUTH_REFERENCE] (with the last, proxy_auth = { username = "alice", credential = it }).
-- Calls the "echo" tool once and prints "ok" or "failed <kind>"; with
-- MCPCLIENT_TRACE=1 the trace lines go to stderr.
local mcp = require "mcpclient"

local url, proxy, ca_file = arg[1], arg[2], arg[3]
local options = { url = url, identifier = "child", health = mcp.health.discard, budget = 10 }
if proxy == "false" then options.proxy = false elseif proxy and proxy ~= "" then options.proxy = proxy end
if ca_file and ca_file ~= "" then options.ca_file = ca_file end
if arg[4] then options.proxy_auth = { username = "alice", credential = arg[4] } end
local conn <close> = mcp.connect(options)
local out, _, err = conn:call_tool("echo", { text = "from the child" })
io.write(out and "ok\n" or ("failed " .. tostring(err and err.kind) .. "\n"))
