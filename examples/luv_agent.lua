--- mcpclient inside a luv (libuv) program: tool calls run as coroutines the
--- loop resumes, while a timer keeps ticking every 10 ms.
--
--   lua5.4 examples/luv_agent.lua <server url> [tool] [arguments JSON] [count]
--
-- libuv knows nothing of coroutines: the library's bridge, mcp.loop{ luv = uv },
-- parks a waiting call's coroutine, watches the engine's descriptor with a
-- poll handle and its timeout with a timer, and resumes it when either fires.
-- The calls run in coroutines started with bridge.wrap. `count` calls
-- (default 3) of `tool` (default "echo" with { message = "hi" }) run at once;
-- the program prints each answer, how many ticks the timer made meanwhile and
-- the longest gap between two ticks.
local uv = require "luv"
local mcp = require "mcpclient"

local usage = "usage: lua5.4 examples/luv_agent.lua <server url> [tool] [arguments JSON] [count]"
local url = arg[1] or error(usage)
local tool = arg[2] or "echo"
local arguments = arg[3] and assert(mcp.json.decode(arg[3])) or { message = "hi" }
local count = math.tointeger(tonumber(arg[4] or "3")) or error(usage)

-- The bridge: every wait of a call started with bridge.wrap goes through libuv.
local bridge = mcp.loop { luv = uv }

-- The program's own work: a tick every 10 ms, its gaps measured while the calls run.
local calls_left, ticks, longest = count, 0, 0
local ticker = uv.new_timer()
local last
ticker:start(10, 10, function()
  local now = mcp.now()
  if last then longest = math.max(longest, now - last) end
  ticks, last = ticks + 1, now
  if calls_left == 0 then ticker:stop() end
end)

-- The calls, each a coroutine of its own; a cancel hook stops them after 10 s.
local remote = mcp.connect { url = url, identifier = "remote", health = mcp.health.discard }
local stop_at = mcp.now() + 10
local cancel = function() return mcp.now() > stop_at end
local started, results = mcp.now(), {}
for i = 1, count do
  bridge.wrap(function()
    results[i] = table.pack(remote:call_tool(tool, arguments, { cancel = cancel }))
    calls_left = calls_left - 1
  end)
end

uv.run()
ticker:close()
bridge.close()
uv.run() -- lets the closed handles go (luv needs this before the program ends)
remote:close()

for i = 1, count do
  local outcome, message, err = table.unpack(results[i], 1, results[i].n)
  if outcome then
    print(i, outcome.is_error and "tool error:" or "answer:", outcome.text)
  else
    print(i, "failed (" .. err.kind .. "):", message)
  end
end
print(string.format("%d calls in %.3f s; %d ticks meanwhile, the longest gap between two %.1f ms",
  count, mcp.now() - started, ticks, longest * 1000))
