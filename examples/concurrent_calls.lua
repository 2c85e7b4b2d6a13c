--- Several calls at once: mcp.gather runs operations side by side over the
--- process's one engine, on one connection or several.
--
--   lua5.4 examples/concurrent_calls.lua <server url> [tool] [arguments JSON] [count]
--
-- Calls `tool` (default "echo" with { message = "hi" }, as server-everything
-- has it) `count` times at once (default 5) and prints each answer in call
-- order with the whole wall time. A cancel hook stops every call after 10 s.
local mcp = require "mcpclient"

local usage = "usage: lua5.4 examples/concurrent_calls.lua <server url> [tool] [arguments JSON] [count]"
local url = arg[1] or error(usage)
local tool = arg[2] or "echo"
local arguments = arg[3] and assert(mcp.json.decode(arg[3])) or { message = "hi" }
local count = math.tointeger(tonumber(arg[4] or "5")) or error(usage)

local conn <close> = mcp.connect { url = url, identifier = "remote", health = mcp.health.discard }
local stop_at = mcp.now() + 10
local cancel = function() return mcp.now() > stop_at end

local calls = {}
for i = 1, count do
  calls[i] = function() return conn:call_tool(tool, arguments, { cancel = cancel }) end
end

local started = mcp.now()
local results = mcp.gather(calls)
for i, packed in ipairs(results) do
  local outcome, message, err = table.unpack(packed, 1, packed.n)
  if packed.error ~= nil then
    print(i, "raised:", tostring(packed.error))
  elseif outcome then
    print(i, outcome.is_error and "tool error:" or "answer:", outcome.text)
  else
    print(i, "failed (" .. err.kind .. "):", message)
  end
end
print(string.format("%d calls in %.3f s", count, mcp.now() - started))
