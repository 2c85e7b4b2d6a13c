-- The engine driven by a host's event loop (cqueues): operations inside the
-- host's coroutines wait through mcp.loop's hook instead of blocking, against
-- the official SDK's reference server on 127.0.0.1 (started and stopped by
-- PID here). The host's own work keeps its time, a cancel hook or a budget
-- ends a call as promptly as in blocking mode, nothing is sent twice, the
-- host gate refuses before dialling, a run's turn keeps the model's order,
-- and many calls over many connections give exactly what the blocking API
-- gives.
local catalogue = require "mcpclient.agent.catalogue"
local cqueues = require "cqueues"
local core = require "mcpclient.core"
local json = require "mcpclient.json"
local mcp = require "mcpclient"
local peers = require "support.peers"
local run = require "mcpclient.agent.run"
local store_module = require "mcpclient.agent.store"

local function count(peer, method)
  local n = 0
  for _, line in ipairs(peer.log_lines()) do
    if line:match("^%S+ (%S+)") == method then n = n + 1 end
  end
  return n
end

-- Run fns as cqueues coroutines under one controller, the hook installed meanwhile.
local function under_cqueues(fns)
  mcp.loop { wait = function(engine) cqueues.poll(engine) end }
  local cq = cqueues.new()
  for _, fn in ipairs(fns) do cq:wrap(fn) end
  local ok, err = cq:loop()
  mcp.loop {}
  assert(ok, err)
end

-- What a comparison needs of an outcome (latency differs from run to run).
local function comparable(outcome, message, err)
  if not outcome then return { failed = err.kind, message = message } end
  return { text = outcome.text, is_error = outcome.is_error, content = outcome.content }
end

describe("the engine in a host's event loop #integration", function()
  local peer
  setup(function()
    peers.require_available()
    peer = peers.start("sdk-session", { log = true })
  end)
  teardown(function()
    mcp.loop {}
    if peer then peer.stop() end
  end)

  it("keeps a 100 ms tick on time while a call waits on a stalled server, and a cancel ends it at once", function()
    local conn <close> = mcp.connect { url = peer.url, identifier = "peer", health = mcp.health.discard }
    assert(conn:ping()) -- the session exists: the call below is the only exchange in flight
    local calls_before = count(peer, "tools/call")
    local cancelled, cancel_at = false, nil
    local outcome, message, err, ended_at
    local ticks = {}
    under_cqueues {
      function()
        outcome, message, err = conn:call_tool("slow", { seconds = 5 }, { cancel = function() return cancelled end })
        ended_at = core.now()
      end,
      function()
        local start = core.now()
        for i = 1, 12 do
          cqueues.sleep(start + i * 0.1 - core.now())
          ticks[i] = core.now() - start
        end
        cancelled, cancel_at = true, core.now()
      end,
    }
    assert.is_nil(outcome)
    assert.equal("cancelled", err.kind, message)
    assert.is_true(err.in_flight)
    local latency = ended_at - cancel_at
    -- measured 4-9 ms (the cancellation notice included); the promise is 50 ms
    assert.is_true(latency < 0.15, "the call ended " .. latency .. " s after the cancel")
    local late = 0
    for i, t in ipairs(ticks) do late = math.max(late, t - i * 0.1) end
    -- measured under 2 ms; a blocking call would hold the first tick for 5 s
    assert.is_true(late < 0.05, "a tick came " .. late .. " s late")
    assert.equal(calls_before + 1, count(peer, "tools/call")) -- never sent twice
  end)

  it("ends a call at its budget, the host's loop running meanwhile", function()
    local conn <close> = mcp.connect { url = peer.url, identifier = "peer", health = mcp.health.discard }
    local outcome, err, took
    local ticks = 0
    under_cqueues {
      function()
        local t0 = core.now()
        local message
        outcome, message, err = conn:call_tool("slow", { seconds = 5 }, { budget = 0.6 })
        took = core.now() - t0
        assert(err, message)
      end,
      function()
        for _ = 1, 10 do cqueues.sleep(0.05); ticks = ticks + 1 end
      end,
    }
    assert.is_nil(outcome)
    assert.equal("timeout", err.kind)
    assert.is_true(took >= 0.55 and took < 1.5, "took " .. took .. " s")
    assert.equal(10, ticks)
  end)

  it("gather inside a host coroutine waits through the hook: the host runs meanwhile", function()
    local conn <close> = mcp.connect { url = peer.url, identifier = "peer", health = mcp.health.discard }
    local results, ticks_during = nil, 0
    local done = false
    under_cqueues {
      function()
        results = mcp.gather {
          function() return conn:call_tool("slow", { seconds = 0.5 }) end,
          function() return conn:call_tool("echo", { message = "g" }) end,
        }
        done = true
      end,
      function()
        while not done do cqueues.sleep(0.02); ticks_during = ticks_during + 1 end
      end,
    }
    assert.equal("slept 0.5", results[1][1].text)
    assert.equal("Echo: g", results[2][1].text)
    assert.is_true(ticks_during >= 10, "the host ran " .. ticks_during .. " times during the gather")
  end)

  it("refuses a host the gate refuses, before anything is dialled, as in blocking mode", function()
    local resolved = 0
    local conn <close> = mcp.connect {
      url = "http://169.254.169.254/mcp", identifier = "metadata", health = mcp.health.discard,
      resolver = function() resolved = resolved + 1 end,
    }
    local outcome, message, err
    under_cqueues { function() outcome, message, err = conn:call_tool("echo", { message = "x" }) end }
    assert.is_nil(outcome)
    assert.equal("refused_host", err.kind, message)
    assert.equal(0, resolved)
    assert.equal(0, core.engine_step(0))
  end)

  it("a run's turn inside a host coroutine: calls at once, the host running, the trail in the model's order", function()
    local db = os.tmpname()
    os.remove(db)
    local store <close> = assert(store_module.open(db))
    local server = assert(store:add_server {
      identifier = "peer", name = "SDK peer", url = peer.url, data_class = "publicContent",
      requires_approval = "0", enabled = true,
    })
    local report = catalogue.import(store, assert(store:server(server)), { log = function() end })
    assert.is_false(report.refused, table.concat(report.skip_reasons, "\n"))
    assert(store:set_tool_enabled("mcp_peer_slow", true))
    local r = assert(run.start(store, {
      user = { name = "ops", uid = 1, admin = true },
      configuration = { identifier = "cfg-local", provider = "p-local" },
      providers = { ["p-local"] = { zone = "local" } },
    }))
    local results, wall, ticks, done = nil, nil, 0, false
    under_cqueues {
      function()
        local t0 = core.now()
        results = r:turn {
          { name = "mcp_peer_slow", arguments = { seconds = 1 } },
          { name = "mcp_peer_slow", arguments = { seconds = 0.5 } },
          { name = "mcp_peer_slow", arguments = { seconds = 0.2 } },
        }
        wall, done = core.now() - t0, true
      end,
      function()
        while not done do cqueues.sleep(0.05); ticks = ticks + 1 end
      end,
    }
    assert.equal("slept 1", results[1].text)
    assert.equal("slept 0.5", results[2].text)
    assert.equal("slept 0.2", results[3].text)
    assert.is_true(wall < 1.8, "the turn took " .. wall .. " s")
    assert.is_true(ticks >= 10, "the host ran " .. ticks .. " times during the turn")
    local order = {}
    for _, event in ipairs(assert(r:events())) do
      if event.kind == "tool" then order[#order + 1] = json.decode(event.payload).toolArguments.seconds end
    end
    assert.same({ 1, 0.5, 0.2 }, order)
    r:finish()
    store:close()
    for _, path in ipairs { db, db .. "-wal", db .. "-shm" } do os.remove(path) end
  end)

  it("200 calls over 20 connections give exactly what the blocking API gives", function()
    local function make(i)
      return mcp.connect { url = peer.url, identifier = "peer" .. i, health = mcp.health.discard }
    end
    local function args(i, k)
      local n = (i - 1) * 10 + k
      if n % 7 == 0 then return "fail", {} end
      if n % 5 == 0 then return "add", { a = n, b = 0.5 } end
      return "echo", { message = "m" .. n .. string.rep("é", n % 3) }
    end
    local blocking, hosted = {}, {}
    local conns = {}
    for i = 1, 20 do conns[i] = make(i) end
    for i = 1, 20 do
      for k = 1, 10 do
        local name, arguments = args(i, k)
        blocking[(i - 1) * 10 + k] = comparable(conns[i]:call_tool(name, arguments))
      end
    end
    for i = 1, 20 do conns[i]:close() end
    for i = 1, 20 do conns[i] = make(i) end -- fresh sessions: the handshakes run inside the loop too
    local fns = {}
    for i = 1, 20 do
      for k = 1, 10 do
        fns[#fns + 1] = function()
          local name, arguments = args(i, k)
          hosted[(i - 1) * 10 + k] = comparable(conns[i]:call_tool(name, arguments))
        end
      end
    end
    local t0 = core.now()
    under_cqueues(fns)
    local took = core.now() - t0
    for i = 1, 20 do conns[i]:close() end
    assert.equal(200, #hosted)
    assert.same(blocking, hosted)
    assert.is_true(took < 30, "took " .. took .. " s")
    assert.equal(0, core.engine_step(0), "a transfer was left in the engine")
  end)

  it("outside any coroutine, or with no hook, every call blocks as before", function()
    local conn <close> = mcp.connect { url = peer.url, identifier = "peer", health = mcp.health.discard }
    mcp.loop { wait = function() error("the hook must not be called outside a coroutine") end }
    local outcome = conn:call_tool("echo", { message = "main" })
    mcp.loop {}
    assert.equal("Echo: main", outcome.text)
    local co = coroutine.create(function() return conn:call_tool("echo", { message = "co" }) end)
    local ok, res = coroutine.resume(co)
    assert.is_true(ok)
    assert.equal("dead", coroutine.status(co)) -- no hook: it blocked instead of yielding
    assert.equal("Echo: co", res.text)
  end)

  it("raises on a hook that is not a function", function()
    assert.has_error(function() mcp.loop(nil) end)
    assert.has_error(function() mcp.loop { wait = 42 } end, "loop: 'wait' must be a function")
  end)
end)
