--- Starts and stops real proxies for the specs, each in the foreground under
-- its own PID, with a configuration of its own in a temporary directory,
-- listening on a free port of 127.0.0.1 and allowing only 127.0.0.1: tinyproxy
-- (an HTTP proxy: forwarding and CONNECT) and Dante's danted (SOCKS5). Their
-- own logs say what reached them.
local shell = require "support.shell"
local peers = require "support.peers"

local quote, read_all = shell.quote, shell.read_all

local proxies = {}

-- Does something accept connections on 127.0.0.1:port?
local function accepts(port)
  return shell.run("bash -c " .. quote("exec 3<>/dev/tcp/127.0.0.1/" .. port))
end

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- Run `command` (a shell line ending in exec) and wait until `port` accepts.
local function launch(name, command, port, dir)
  local pipe = assert(io.popen("exec sh -c " .. quote("echo $$; " .. command), "r"))
  local pid = assert(math.tointeger(tonumber(pipe:read("l"))), "no pid from the " .. name .. " shell")
  local proxy = { name = name, pid = pid, pipe = pipe, port = port, dir = dir }
  for _ = 1, 100 do
    if accepts(port) then return proxy end
    if not peers.alive(pid) then break end
    shell.sleep(0.05)
  end
  proxies.stop(proxy)
  error(name .. " did not start: " .. read_all(dir .. "/" .. name .. ".out") .. read_all(dir .. "/" .. name .. ".log"))
end

--- An HTTP proxy: tinyproxy. `name` (default "tinyproxy") names its files in `dir`; `lines`
--- are more lines of its configuration (e.g. "BasicAuth user password").
--- @return { pid, port, log = path, url }
function proxies.tinyproxy(dir, name, lines)
  name = name or "tinyproxy"
  local port = peers.free_port()
  local conf = dir .. "/" .. name .. ".conf"
  write_file(conf, table.concat({
    "Port " .. port, "Listen 127.0.0.1", "Timeout 30", "MaxClients 32", "Allow 127.0.0.1",
    "LogFile " .. '"' .. dir .. "/" .. name .. '.log"', "LogLevel Connect", "DisableViaHeader Yes",
    table.concat(lines or {}, "\n"), "",
  }, "\n"))
  local proxy = launch(name, string.format("exec tinyproxy -d -c %s >%s 2>&1", quote(conf),
    quote(dir .. "/" .. name .. ".out")), port, dir)
  proxy.log = dir .. "/" .. name .. ".log"
  proxy.url = "http://127.0.0.1:" .. port
  return proxy
end

--- A SOCKS5 proxy: danted, no authentication, CONNECT only. @return { pid, port, log = path, url }
function proxies.dante(dir)
  local port = peers.free_port()
  local conf = dir .. "/danted.conf"
  write_file(conf, table.concat({
    "logoutput: " .. dir .. "/danted.log",
    "internal: 127.0.0.1 port = " .. port,
    "external: 127.0.0.1",
    "clientmethod: none",
    "socksmethod: none",
    -- no user.* lines: danted then runs as whoever starts it (root or not) without switching
    "client pass {", "  from: 127.0.0.1/32 to: 0.0.0.0/0", "  log: connect disconnect error", "}",
    "socks pass {", "  from: 127.0.0.1/32 to: 0.0.0.0/0", "  command: connect", "  log: connect disconnect error", "}",
    "",
  }, "\n"))
  local proxy = launch("danted", string.format("exec danted -f %s -p %s >%s 2>&1", quote(conf),
    quote(dir .. "/danted.pid"), quote(dir .. "/danted.out")), port, dir)
  proxy.log = dir .. "/danted.log"
  proxy.url = "socks5h://127.0.0.1:" .. port
  return proxy
end

--- The lines of the proxy's log that contain `text` (plain).
function proxies.lines(proxy, text)
  local found = {}
  for line in read_all(proxy.log):gmatch("[^\n]+") do
    if line:find(text, 1, true) then found[#found + 1] = line end
  end
  return found
end

--- Stop a proxy by its PID (TERM, then KILL) and wait until it is gone. Idempotent.
function proxies.stop(proxy)
  if not proxy or proxy.stopped then return end
  proxy.stopped = true
  os.execute("kill " .. proxy.pid .. " 2>/dev/null")
  for _ = 1, 40 do
    if not peers.alive(proxy.pid) then break end
    shell.sleep(0.05)
  end
  if peers.alive(proxy.pid) then os.execute("kill -9 " .. proxy.pid .. " 2>/dev/null") end
  proxy.pipe:close()
end

return proxies
