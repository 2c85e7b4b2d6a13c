--- The fast C echo server of the benchmarks (bench/echo_server.c), started and stopped by its PID.
--
--   local echo = require "echo"   -- with ./bench/?.lua on package.path
--   local server = echo.start("--session --sse", 0)   -- arguments, the CPU to pin it to (or nil)
--   server.url, server.stats_url, server.pid; server.stop() (idempotent; keeps server.final_stats)
--
-- `echo $$` then exec, so the PID read is the server (a child of this Lua process, reaped by
-- closing the pipe); --exit-with-parent ends it if the benchmark dies first.
local core = require "mcpclient.core"
local peers = require "support.peers"
local shell = require "support.shell"

local quote, read_all = shell.quote, shell.read_all

local echo = {}

function echo.start(args, cpu)
  local out = os.tmpname()
  local pin = cpu and ("taskset -c " .. cpu .. " ") or ""
  local pipe = assert(io.popen("echo $$; exec " .. pin .. "bench/echo_server " .. args
    .. " --exit-with-parent >" .. quote(out) .. " 2>&1 </dev/null"))
  local pid = math.tointeger(tonumber(pipe:read("l") or ""))
  if not pid then error("echo_server did not start") end
  local server = { pid = pid }
  local stopped = false
  function server.stop()
    if stopped then return end
    stopped = true
    if peers.alive(pid) then
      os.execute("kill -TERM " .. pid .. " 2>/dev/null")
      local deadline = core.now() + 3
      while peers.alive(pid) and core.now() < deadline do core.sleep(0.02) end
      if peers.alive(pid) then os.execute("kill -KILL " .. pid .. " 2>/dev/null") end
    end
    pipe:close()
    server.final_stats = read_all(out):match("\nstats (%b{})")
    os.remove(out)
  end
  -- the server prints "listening PORT" once it accepts; a loaded machine may take a while
  local deadline = core.now() + 30
  while true do
    local port = read_all(out):match("^listening (%d+)\n")
    if port then
      server.url = "http://127.0.0.1:" .. port .. "/mcp"
      server.stats_url = "http://127.0.0.1:" .. port .. "/stats"
      return server
    end
    if not peers.alive(pid) or core.now() > deadline then
      local text = read_all(out)
      server.stop()
      error("echo_server " .. args .. " did not start: " .. text)
    end
    core.sleep(0.01)
  end
end

return echo
