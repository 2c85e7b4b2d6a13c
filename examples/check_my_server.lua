--- Does my server work with this client? The live conformance run from Lua.
--
--   lua5.4 examples/check_my_server.lua <server url> [tool to call] [arguments as JSON]
--
-- (From the project root with LUA_PATH="./lua/?.lua;./lua/?/init.lua;;" LUA_CPATH="./build/?.so;;".)
-- The same checks as `mcpclient check <server>` and spec/conformance/live_spec.lua: one line per
-- check, exit 0 when every applicable one passed. A tool is called only when named here or when
-- the server declares it read-only and it needs no argument.
local mcp = require "mcpclient"
local check = require "mcpclient.agent.check"

local url = arg[1] or error("usage: lua5.4 examples/check_my_server.lua <server url> [tool] [arguments JSON]")
local call = arg[2] and { name = arg[2], arguments = arg[3] and assert(mcp.json.decode(arg[3])) or {} } or nil

local results, summary = check.run(function(recorder, budget)
  return mcp.connect { url = url, identifier = "mine", health = recorder, budget = budget }
end, { call = call })

for _, r in ipairs(results) do
  -- details quote what the server said: already clipped and control-free
  print(string.format("%-14s  %-12s  %s", r.status, r.id, r.detail))
end
print(string.format("%d passed, %d failed, %d not applicable", summary.passed, summary.failed,
  summary.not_applicable))
os.exit(summary.ok and 0 or 1)
