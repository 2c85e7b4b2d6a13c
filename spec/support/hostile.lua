--- Starts and stops spec/support/hostile_server.mjs (one node process per call),
-- by its own PID. Its first stdout line is "listening <port>".
local read_all = require("support.shell").read_all
local core = require "mcpclient.core"

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

--- The URL of `path` on a started server.
function hostile.url(server, path)
  return string.format("http://127.0.0.1:%d%s", server.port, path)
end

--- What the server saw on one path (GET /_state): { initializes, requests, sessions, other, tool, now }.
function hostile.state(server, path)
  local leg <close> = core.http_leg()
  local res = assert(leg:send { method = "GET", url = hostile.url(server, "/_state?path=" .. path), timeout_ms = 5000 })
  assert(res.status == 200, "the hostile server's state answered " .. res.status)
  return core.json.decode(res.body)
end

--- The requests on `path` whose JSON-RPC method (or HTTP method) is `method` (all when nil).
function hostile.requests_of(server, path, method)
  local list = {}
  for _, r in ipairs(hostile.state(server, path).requests) do
    if method == nil or r.method == method or r.http == method then list[#list + 1] = r end
  end
  return list
end

return hostile
