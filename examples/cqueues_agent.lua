--- mcpclient inside a cqueues program: tool calls run as cqueues coroutines
--- next to the program's own work, and nothing blocks the loop.
--
--   lua5.4 examples/cqueues_agent.lua <server url> [tool] [arguments JSON] [count]
--
-- One wait hook (mcp.loop) hands every wait of an operation to cqueues:
-- `cqueues.poll(engine)` suspends the calling coroutine until the engine's
-- descriptor is readable or its timeout has passed, and the controller runs
-- everything else meanwhile. Here "everything else" is a TCP echo server on
-- 127.0.0.1 and a client that talks to it every 10 ms; `count` calls (default
-- 3) of `tool` (default "echo" with { message = "hi" }) run at the same time.
-- It prints each answer, how many echoes came back while the calls ran and
-- the longest wait for one (a blocked loop would show one echo, and a gap as
-- long as the calls).
local cqueues = require "cqueues"
local socket = require "cqueues.socket"
local mcp = require "mcpclient"

local usage = "usage: lua5.4 examples/cqueues_agent.lua <server url> [tool] [arguments JSON] [count]"
local url = arg[1] or error(usage)
local tool = arg[2] or "echo"
local arguments = arg[3] and assert(mcp.json.decode(arg[3])) or { message = "hi" }
local count = math.tointeger(tonumber(arg[4] or "3")) or error(usage)

-- Every wait of an operation inside a cqueues coroutine now yields to cqueues
-- (in a coroutine cqueues does not manage, false: that wait blocks instead).
mcp.loop {
  wait = function(engine)
    local _, managed = cqueues.running()
    if not managed then return false end
    cqueues.poll(engine)
  end,
}

local cq = cqueues.new()
local listener = socket.listen { host = "127.0.0.1", port = 0 }
local _, _, port = listener:localname()

-- The echo server: one client, every line sent back.
cq:wrap(function()
  local client = listener:accept()
  for line in client:lines("*L") do
    client:write(line)
    client:flush()
  end
  client:close()
  listener:close()
end)

-- The echo client: a line every 10 ms until the calls are done.
local calls_left, echoes, longest = count, 0, 0
cq:wrap(function()
  local conn = socket.connect("127.0.0.1", port)
  local last = mcp.now()
  while calls_left > 0 do
    conn:write("ping\n")
    conn:flush()
    if conn:read("*l") == "ping" then
      local now = mcp.now()
      echoes, longest, last = echoes + 1, math.max(longest, now - last), now
    end
    cqueues.sleep(0.01)
  end
  conn:close()
end)

-- The calls, each in a cqueues coroutine of its own; a cancel hook stops them after 10 s.
local remote = mcp.connect { url = url, identifier = "remote", health = mcp.health.discard }
local stop_at = mcp.now() + 10
local cancel = function() return mcp.now() > stop_at end
local started, results = mcp.now(), {}
for i = 1, count do
  cq:wrap(function()
    results[i] = table.pack(remote:call_tool(tool, arguments, { cancel = cancel }))
    calls_left = calls_left - 1
  end)
end

assert(cq:loop())
remote:close()

for i = 1, count do
  local outcome, message, err = table.unpack(results[i], 1, results[i].n)
  if outcome then
    print(i, outcome.is_error and "tool error:" or "answer:", outcome.text)
  else
    print(i, "failed (" .. err.kind .. "):", message)
  end
end
print(string.format("%d calls in %.3f s; %d echoes meanwhile, the longest wait for one %.1f ms",
  count, mcp.now() - started, echoes, longest * 1000))
