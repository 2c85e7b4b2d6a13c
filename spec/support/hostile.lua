--- Starts and stops spec/support/hostile_server.mjs (one node process per call),
-- by its own PID. Its first stdout line is "listening <port>".
local read_all = require("support.shell").read_all

local hostile = {}

--- @param args extra command-line words (e.g. "--tls-cert c --tls-key k"), or nil
--- @return { pipe, pid, port, stderr }
function hostile.start(args)
  local stderr = os.tmpname()
  local pipe = assert(io.popen(string.format(
    "exec sh -c 'echo $$; exec node spec/support/hostile_server.mjs %s 2>%s'", args or "", stderr), "r"))
  local pid = assert(math.tointeger(tonumber(pipe:read("l"))), "no pid from the server shell")
  local line = pipe:read("l")
  local port = line and line:match("^listening (%d+)$")
  if not port then
    os.execute("kill " .. pid .. " 2>/dev/null")
    pipe:close()
    error("the hostile server did not start: " .. tostring(line) .. " " .. read_all(stderr))
  end
  return { pipe = pipe, pid = pid, port = tonumber(port), stderr = stderr }
end

function hostile.stop(server)
  if not server then return end
  os.execute("kill " .. server.pid .. " 2>/dev/null")
  server.pipe:close()
  os.remove(server.stderr)
end

return hostile
