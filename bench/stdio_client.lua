--- mcpclient over stdio, under benchmark (bench/stdio.lua starts it; it is not a test).
--
--   lua5.4 bench/stdio_client.lua [--calls N] [--warmup W] [--protocol 2025-11-25|2026-07-28] -- ARGV...
--
-- One connection: the time from connect to the first answer of one call_tool echo (spawn,
-- opening, call), then W untimed calls and N timed sequential call_tool echo {message}. Prints
-- the JSON line bench/sdk_stdio_client.mjs prints: client, era, n, wall_s, wall_per_op_us, cpu_s,
-- cpu_per_op_us (os.clock: the process's CPU time, user + system), peak_rss_kb (VmHWM),
-- first_answer_ms, errors.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath
local mcp = require "mcpclient"
local core = require "mcpclient.core"

local opts = { calls = 2000, warmup = 200, protocol = "2025-11-25" }
local argv
for i = 1, #arg do
  if arg[i] == "--" then
    argv = table.move(arg, i + 1, #arg, 1, {})
    break
  end
  local key = arg[i]:match("^%-%-(%w+)$")
  if key and arg[i + 1] and opts[key] ~= nil and (i % 2 == 1) then
    opts[key] = math.tointeger(tonumber(arg[i + 1])) or arg[i + 1]
  end
end
assert(argv and #argv > 0, "give the server argv after --")

local errors, first_error = 0, nil
local function echo(conn)
  local outcome, message = conn:call_tool("echo", { message = "hello" })
  if not outcome or outcome.text ~= "Echo: hello" then
    errors = errors + 1
    first_error = first_error or message or (outcome and outcome.text)
  end
end

local started = core.now()
local conn <close> = mcp.connect { identifier = "bench", command = argv, health = mcp.health.discard,
  protocol = opts.protocol, log = function() end }
echo(conn)
local first_answer_ms = (core.now() - started) * 1000
for _ = 1, opts.warmup do echo(conn) end
local cpu0, t0 = os.clock(), core.now()
for _ = 1, opts.calls do echo(conn) end
local wall, cpu = core.now() - t0, os.clock() - cpu0
conn:close()

local peak = 0
for line in io.lines("/proc/self/status") do
  local kb = line:match("^VmHWM:%s+(%d+)")
  if kb then peak = tonumber(kb) end
end
print(mcp.json.encode {
  client = "mcpclient-stdio", era = opts.protocol == "2026-07-28" and "modern" or "legacy", n = opts.calls,
  wall_s = wall, wall_per_op_us = wall / opts.calls * 1e6, cpu_s = cpu, cpu_per_op_us = cpu / opts.calls * 1e6,
  peak_rss_kb = peak, first_answer_ms = first_answer_ms, errors = errors, first_error = first_error,
})
