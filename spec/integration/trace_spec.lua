-- The trace switch against the official SDK server (sessions, event streams): one line per exchange on
-- stderr, with method, outcome, time and size, and never a credential, a session id or a body.
local peers = require "support.peers"
local shell = require "support.shell"

local quote, read_all = shell.quote, shell.read_all

-- Run a Lua chunk in a child lua5.4 with `env` (a shell prefix); returns stdout, stderr.
local function child(env, chunk)
  local script, errfile = os.tmpname(), os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(chunk)
  f:close()
  local pipe = assert(io.popen("cd " .. quote(peers.root) .. " && " .. env
    .. ' LUA_PATH="./lua/?.lua;./lua/?/init.lua;;" LUA_CPATH="./build/?.so;;" lua5.4 ' .. quote(script)
    .. " 2>" .. quote(errfile)))
  local out = pipe:read("a")
  pipe:close()
  local err = read_all(errfile)
  os.remove(script)
  os.remove(errfile)
  return out, err
end

local CHUNK = [[
local mcp = require "mcpclient"
local conn = mcp.connect { url = %q, identifier = "peer", health = mcp.health.discard,
  auth = { placement = "bearer", credential = "env:TRACE_SECRET" } %s }
assert(conn:list_tools())
assert(conn:call_tool("echo", { message = "body-text-never-traced" }))
local _, _, err = conn:call_tool("nosuch", {})
io.write(conn.session.state.id or "", "\n", tostring(err and err.kind), "\n")
conn:close()
]]

describe("the trace switch #integration", function()
  local peer
  setup(function()
    peers.require_available()
    peer = peers.start("sdk-session")
  end)
  teardown(function() if peer then peer:stop() end end)

  it("writes one redacted line per exchange when MCPCLIENT_TRACE=1", function()
    local out, err = child("MCPCLIENT_TRACE=1 TRACE_SECRET=sk-trace-4f9a2c", CHUNK:format(peer.url, ""))
    local session = out:match("^([^\n]*)\n")
    assert.truthy(session and #session > 8, out)
    local lines = {}
    for line in err:gmatch("[^\n]+") do lines[#lines + 1] = line end
    local methods = {}
    for _, line in ipairs(lines) do
      local method, rest = line:match('^mcpclient trace "peer": (%S+) (.*)$')
      assert.truthy(method, line)
      assert.truthy(rest:find("^ok %d+ ms") or rest:find("^failed %S+"), line)
      methods[#methods + 1] = method
    end
    -- the era probe first: this 2025 server refuses server/discover, so the connection falls back
    assert.same({ "server/discover", "initialize", "notifications/initialized", "tools/list", "tools/call",
      "tools/call", "DELETE" }, methods)
    assert.truthy(lines[4]:find(" %d+ bytes$"), lines[4])
    assert.falsy(err:find("sk-trace-4f9a2c", 1, true))
    assert.falsy(err:find(session, 1, true))
    assert.falsy(err:find("body-text-never-traced", 1, true))
  end)

  it("stays silent without the switch, and `trace = false` overrides the environment", function()
    local _, err = child("TRACE_SECRET=x", CHUNK:format(peer.url, ""))
    assert.equal("", err)
    _, err = child("MCPCLIENT_TRACE=1 TRACE_SECRET=x", CHUNK:format(peer.url, ", trace = false"))
    assert.equal("", err)
    _, err = child("TRACE_SECRET=x", CHUNK:format(peer.url, ", trace = true"))
    assert.truthy(err:find('^mcpclient trace "peer": server/discover failed http_status 400'), err)
    assert.truthy(err:find('\nmcpclient trace "peer": initialize ok'), err)
  end)
end)

describe("the trace of a stdio server silent at the probe", function()
  it("names the silence, not a JSON-RPC error the server never sent", function()
    local stdio = require "support.stdio"
    -- the server's env (the core's path, a sanitizer's preload) written into the child's chunk
    local env = {}
    for k, v in pairs(stdio.env()) do env[#env + 1] = string.format("[%q] = %q", k, v) end
    local chunk = string.format([[
local mcp = require "mcpclient"
local conn = mcp.connect { command = { "lua5.4", %q, "silent_probe" }, env = { %s },
  identifier = "mute", health = mcp.health.discard, trace = true }
assert(conn:ping())
conn:close()
]], stdio.command("silent_probe")[2], table.concat(env, ", "))
    local _, err = child("", chunk)
    assert.truthy(err:find('^mcpclient trace "mute": server/discover silent: no answer within 5 s %(taken for a '
      .. "2025%-era server; initialize follows%) %d+ ms\n"), err)
    assert.falsy(err:find("rpc_error", 1, true), err)
    assert.truthy(err:find('\nmcpclient trace "mute": initialize ok', 1, true), err)
  end)

  it("keeps a server's own refusal of the probe a failure of its kind", function()
    local trace = require "mcpclient.trace"
    local lines = {}
    local channel = { request = function(_, _, _)
      return nil, "refused", { kind = "rpc_error", rpc_code = -32601, detail = "Method not found" }
    end, notify = function() end, end_session = function() end }
    local t = 0
    trace.wrap(channel, "x", function() t = t + 0.001 return t end, function(text) lines[#lines + 1] = text end)
    channel:request({}, { method = "server/discover" })
    assert.equal('mcpclient trace "x": server/discover failed rpc_error 1 ms\n', lines[1])
  end)
end)

describe("mcp.now", function()
  it("is the library's monotonic clock in seconds", function()
    local mcp = require "mcpclient"
    local a = mcp.now()
    local b = mcp.now()
    assert.equal("float", math.type(a))
    assert.is_true(b >= a)
    assert.is_true(math.abs(mcp.now() - require("mcpclient.core").now()) < 1)
  end)
end)
