--- What the Lua side of one warm stdio call does, counted rather than timed (a benchmark
--- helper, not a test): Lua bytes allocated (collectgarbage("count") with the collector
--- stopped), function entries (a "call" hook) and VM instructions (a count hook of 1) per
--- conn:call_tool("echo", { message = "hello" }) on one kept child, each over its own N calls
--- after a warm-up.
--
--   lua5.4 bench/stdio_counts.lua [--calls N] [--detail] -- ARGV...   (ARGV: bench/stdio_echo)
--
-- --detail also lists the VM instructions and entries per call of each function (source:line).
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath
local mcp = require "mcpclient"

local calls, detail, argv = 2000, false, nil
local i = 1
while i <= #arg do
  if arg[i] == "--" then
    argv = table.move(arg, i + 1, #arg, 1, {})
    break
  elseif arg[i] == "--calls" then
    calls = assert(math.tointeger(tonumber(arg[i + 1])), "--calls takes a whole number")
    i = i + 1
  elseif arg[i] == "--detail" then
    detail = true
  else
    error("unknown argument: " .. arg[i])
  end
  i = i + 1
end
assert(argv and #argv > 0, "give the server argv after --")

local conn <close> = mcp.connect { identifier = "bench", command = argv, health = mcp.health.discard,
  log = function() end }
local function echo()
  local outcome, message = conn:call_tool("echo", { message = "hello" })
  assert(outcome and outcome.text == "Echo: hello", message or (outcome and outcome.text))
end
for _ = 1, 200 do echo() end

collectgarbage("collect")
collectgarbage("stop")
local before = collectgarbage("count")
for _ = 1, calls do echo() end
local bytes = (collectgarbage("count") - before) * 1024 / calls
collectgarbage("restart")
collectgarbage("collect")

local getinfo = debug.getinfo
local function site()
  local info = getinfo(3, "S")
  return info.short_src .. ":" .. info.linedefined
end
local function counted(mask, count)
  local per, total = {}, 0
  debug.sethook(function()
    local key = site()
    per[key] = (per[key] or 0) + 1
    total = total + 1
  end, mask, count)
  for _ = 1, calls do echo() end
  debug.sethook()
  return total / calls, per
end
local entries, entries_per = counted("c")
local instructions, instructions_per = counted("", 1)

print(string.format("per warm call: %.0f Lua bytes allocated, %.1f function entries, %.0f VM instructions",
  bytes, entries, instructions))
if detail then
  local keys = {}
  for key in pairs(instructions_per) do keys[#keys + 1] = key end
  for key in pairs(entries_per) do
    if not instructions_per[key] then keys[#keys + 1] = key end
  end
  table.sort(keys, function(a, b) return (instructions_per[a] or 0) > (instructions_per[b] or 0) end)
  print("VM instr  entries  function")
  for _, key in ipairs(keys) do
    print(string.format("%8.1f %8.1f  %s", (instructions_per[key] or 0) / calls, (entries_per[key] or 0) / calls, key))
  end
end
