-- Many transfers at once over the one engine, against real servers nobody
-- here wrote (the SDK reference server and server-everything), started on
-- 127.0.0.1 by this file and stopped by PID: concurrent calls on one
-- connection, several servers with one cancelled, progress, elicitation.
local core = require "mcpclient.core"
local mcp = require "mcpclient"
local peers = require "support.peers"

local function connect(url, extra)
  local options = { url = url, identifier = "peer", health = mcp.health.discard }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

local function seconds_since(t0)
  return (core.monotonic_ns() - t0) / 1e9
end

local function count(peer, method)
  local n = 0
  for _, line in ipairs(peer.log_lines()) do
    if line:match("^%S+ (%S+)") == method then n = n + 1 end
  end
  return n
end

-- n calls of the slow tool, each as one task of gather.
local function slow_calls(conn, n, seconds, opts)
  local fns = {}
  for i = 1, n do
    fns[i] = function() return conn:call_tool("slow", { seconds = seconds }, opts and opts[i]) end
  end
  return fns
end

describe("the engine #integration", function()
  local session, stateless, everything
  setup(function()
    session = peers.start("sdk-session", { log = true })
    stateless = peers.start("sdk-stateless", { log = true })
    everything = peers.start("everything")
  end)
  teardown(function()
    for _, p in ipairs { session, stateless, everything } do if p then p.stop() end end
  end)

  for _, kind in ipairs { "session", "stateless" } do
    it("runs five 1-second tool calls on one " .. kind .. " connection in about 1 s", function()
      local peer = kind == "session" and session or stateless
      local conn <close> = connect(peer.url)
      local before = count(peer, "initialize")
      local t0 = core.monotonic_ns()
      local results = mcp.gather(slow_calls(conn, 5, 1))
      local wall = seconds_since(t0)
      assert.equal(5, #results)
      for i = 1, 5 do
        assert.equal(1, results[i].n, tostring(results[i][2]))
        assert.equal("slept 1", results[i][1].text)
      end
      assert.is_true(wall < 1.8, "five 1-second calls took " .. wall .. " s")
      -- the handshake ran once, not once per task
      assert.equal(before + 1, count(peer, "initialize"))
    end)
  end

  it("keeps each result in its place and each function's error as pcall would show it", function()
    local conn <close> = connect(session.url)
    local results = mcp.gather {
      function() return conn:call_tool("slow", { seconds = 0.3 }) end,
      function() error({ mine = true }) end,
      function() return 1, nil, 3 end,
      function() return conn:call_tool("echo", { message = "fast" }) end,
    }
    assert.equal("slept 0.3", results[1][1].text)
    assert.same({ n = 0, error = { mine = true } }, results[2])
    assert.same({ n = 3, 1, nil, 3 }, results[3])
    assert.equal("Echo: fast", results[4][1].text)
  end)

  it("calls three servers at once; cancelling one leaves the others running", function()
    local a <close> = connect(session.url, { identifier = "a" })
    local b <close> = connect(stateless.url, { identifier = "b" })
    local c <close> = connect(everything.url, { identifier = "c" })
    local t0 = core.monotonic_ns()
    local function stop_b() return seconds_since(t0) > 0.3 end
    local results = mcp.gather {
      function() return a:call_tool("slow", { seconds = 1 }) end,
      function() return b:call_tool("slow", { seconds = 5 }, { cancel = stop_b }) end,
      function() return c:call_tool("trigger-long-running-operation", { duration = 1, steps = 1 }) end,
    }
    local wall = seconds_since(t0)
    assert.equal("slept 1", results[1][1].text)
    assert.truthy(results[3][1].text:find("Long running operation completed", 1, true))
    assert.is_nil(results[2][1])
    assert.equal("cancelled", results[2][3].kind)
    assert.equal("b", results[2][3].server)
    assert.is_true(wall < 1.8, "took " .. wall .. " s")
  end)

  it("blocks outside gather exactly as before", function()
    local conn <close> = connect(session.url)
    local t0 = core.monotonic_ns()
    assert.equal("slept 0.2", assert(conn:call_tool("slow", { seconds = 0.2 })).text)
    assert.equal("slept 0.2", assert(conn:call_tool("slow", { seconds = 0.2 })).text)
    assert.is_true(seconds_since(t0) >= 0.4)
  end)

  it("a task that raises mid-transfer leaves nothing in flight, and the connection stays usable", function()
    local conn <close> = connect(everything.url)
    local results = mcp.gather {
      function()
        return conn:call_tool("trigger-long-running-operation", { duration = 1, steps = 2 },
          { on_progress = function() error("host bug") end })
      end,
      function() return conn:call_tool("echo", { message = "still" }) end,
    }
    assert.equal(0, results[1].n)
    assert.truthy(tostring(results[1].error):find("host bug", 1, true))
    assert.equal("Echo: still", results[2][1].text)
    assert.equal(0, core.engine_step(0), "a transfer was left in the engine")
    assert.equal("Echo: again", assert(conn:call_tool("echo", { message = "again" })).text)
  end)

  it("hands progress notifications to on_progress, and sends a token only then", function()
    local conn <close> = connect(everything.url)
    local seen = {}
    local out = assert(conn:call_tool("trigger-long-running-operation", { duration = 0.6, steps = 3 }, {
      on_progress = function(progress, total, message) seen[#seen + 1] = { progress, total, message } end,
    }))
    assert.truthy(out.text:find("Long running operation completed", 1, true))
    assert.same({ { 1, 3 }, { 2, 3 }, { 3, 3 } }, seen)
    -- without a callback the server is asked for no progress (nothing to see, nothing breaks)
    assert(conn:call_tool("trigger-long-running-operation", { duration = 0.2, steps = 2 }))
  end)

  it("answers an elicitation request with the host's handler", function()
    local asked
    local conn <close> = connect(everything.url, { on_elicitation = function(request)
      asked = request
      return { action = "accept", content = { name = "Ada", check = true } }
    end })
    local out = assert(conn:call_tool("trigger-elicitation-request", {}))
    assert.truthy(asked and asked.requestedSchema, "the handler was not called")
    assert.truthy(out.text:find("Name: Ada", 1, true), out.text)
  end)

  it("declares no elicitation capability without a handler, and never waits", function()
    local conn <close> = connect(everything.url)
    local names = {}
    for _, t in ipairs(assert(conn:list_tools())) do names[t.name] = true end
    assert.is_nil(names["trigger-elicitation-request"])
  end)
end)
