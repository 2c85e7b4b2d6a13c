-- A call that is abandoned tells the server at once, and a budget holds however the call waits.
--
-- Against spec/support/hostile_server.mjs (started and stopped by this file, 127.0.0.1 only):
-- its cancel-watch tool opens an event stream with a progress notification and runs until it is
-- stopped, recording on CLOCK_MONOTONIC (the clock core.monotonic_ns reads) when the notice
-- arrived, when the client closed the stream, and how the tool was stopped. In every cancel path —
-- the blocking call, a task of gather once the stream started, a run's turn, a budget that ran
-- out — the server must see the cancellation within 250 ms: notifications/cancelled in the 2025
-- era, the closed stream in the 2026-07-28 era; and the tool must stop.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local engine = require "mcpclient.engine"
local hostile = require "support.hostile"
local catalogue = require "mcpclient.agent.catalogue"
local run = require "mcpclient.agent.run"
local store_module = require "mcpclient.agent.store"

local json = core.json
local LIMIT_NS = 250 * 1000000

local server

local function url(path) return hostile.url(server, path) end
local function state(path) return hostile.state(server, path) end
local function requests_of(path, method) return hostile.requests_of(server, path, method) end

local function connect(path, extra)
  local options = { url = url(path), identifier = "h", health = mcp.health.memory() }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

local function ns(text)
  return text ~= json.null and math.tointeger(tonumber(text)) or nil
end

-- The server's record of the tool, once it was stopped (waiting up to 2 s for it).
local function stopped_tool(path)
  local limit = core.monotonic_ns() + 30e9  -- generous: it returns once the tool has stopped
  while true do
    local tool = state(path).tool
    assert.is_table(tool, "the tool never ran on " .. path)
    if ns(tool.stopped_ns) or core.monotonic_ns() > limit then return tool end
    core.sleep(0.02)
  end
end

-- The server saw the cancellation within 250 ms of `cancelled_ns` and stopped the tool: by the
-- notice in the 2025 era, by the closed stream in the 2026-07-28 era (which sends no notice).
local function assert_stopped_in_time(path, era, cancelled_ns)
  assert.is_number(cancelled_ns, "the cancellation never happened")
  local tool = stopped_tool(path)
  assert.is_truthy(ns(tool.stopped_ns), "the server's tool was never stopped")
  local seen
  if era == "modern" then
    assert.equal("closed stream", tool.stopped_by)
    seen = ns(tool.closed_ns)
    assert.equal(0, #requests_of(path, "notifications/cancelled"))
  else
    assert.equal("notice", tool.stopped_by)
    seen = ns(tool.cancel_ns)
    local notices = requests_of(path, "notifications/cancelled")
    assert.equal(1, #notices)
    assert.equal(tool.id, notices[1].id == json.null and tool.id or notices[1].id)
  end
  local latency = seen - cancelled_ns
  assert.is_true(latency < LIMIT_NS, string.format("the server saw the cancellation %.1f ms after it", latency / 1e6))
end

-- A cancel hook that fires 100 ms after the first progress notification, remembering when.
local function after_progress()
  local watch = {}
  watch.on_progress = function() watch.progressed = watch.progressed or core.monotonic_ns() end
  watch.cancel = function()
    if not watch.progressed or core.monotonic_ns() - watch.progressed < 1e8 then return false end
    watch.fired = watch.fired or core.monotonic_ns()
    return true
  end
  return watch
end

describe("cancel notices, measured at the server #integration", function()
  setup(function() server = hostile.start() end)
  teardown(function() hostile.stop(server) end)

  for _, era in ipairs { "legacy", "modern" } do
    local mode = era == "modern" and "cancel-watch-modern" or "cancel-watch"

    describe(era == "modern" and "2026-07-28 era" or "2025 era", function()
      it("the blocking call: cancelled once the stream started", function()
        local path = "/" .. mode .. "/blocking"
        local conn <close> = connect(path)
        assert(conn:call_tool("echo", { text = "warm" }))
        local watch = after_progress()
        local out, _, err = conn:call_tool("hostile", {}, { budget = 5, cancel = watch.cancel,
          on_progress = watch.on_progress })
        assert.is_nil(out)
        assert.equal("cancelled", err.kind)
        assert.is_true(err.in_flight)
        assert_stopped_in_time(path, era, watch.fired)
      end)

      it("a task of gather: cancelled once the stream started, the other task unharmed", function()
        local path = "/" .. mode .. "/gather"
        local conn <close> = connect(path)
        assert(conn:call_tool("echo", { text = "warm" }))
        local watch = after_progress()
        local results = mcp.gather {
          function() return conn:call_tool("hostile", {}, { budget = 5, cancel = watch.cancel,
            on_progress = watch.on_progress }) end,
          function() return conn:call_tool("echo", { text = "beside" }) end,
        }
        assert.equal("cancelled", results[1][3].kind)
        assert.equal("echo: beside", results[2][1].text)
        assert_stopped_in_time(path, era, watch.fired)
      end)

      it("a call whose budget runs out: timeout, and the server is told", function()
        local path = "/" .. mode .. "/budget"
        local conn <close> = connect(path)
        assert(conn:call_tool("echo", { text = "warm" }))
        local t0 = core.monotonic_ns()
        local out, _, err = conn:call_tool("hostile", {}, { budget = 0.6 })
        assert.is_nil(out)
        assert.equal("timeout", err.kind)
        -- the deadline opened a little after t0, so this overstates the latency, never understates it
        assert_stopped_in_time(path, era, t0 + 600000000)
      end)

      it("a budget running out inside gather: timeout, and the server is told", function()
        local path = "/" .. mode .. "/gather-budget"
        local conn <close> = connect(path)
        assert(conn:call_tool("echo", { text = "warm" }))
        local t0 = core.monotonic_ns()
        local results = mcp.gather { function() return conn:call_tool("hostile", {}, { budget = 0.6 }) end }
        assert.equal("timeout", results[1][3].kind)
        assert_stopped_in_time(path, era, t0 + 600000000)
      end)

      local function cancel_a_turn(path, slow_store)
        local db = os.tmpname()
        os.remove(db)
        local store <close> = assert(store_module.open(db))
        if slow_store then
          -- a store whose commit waits a second (a disk busy with other writes)
          local request_cancel = store.request_cancel
          store.request_cancel = function(...) core.sleep(1) return request_cancel(...) end
        end
        local uid = assert(store:add_server { identifier = "h", name = "hostile", url = url(path),
          data_class = "publicContent", requires_approval = "0", enabled = true })
        local report = catalogue.import(store, assert(store:server(uid)), { log = function() end })
        assert.is_false(report.refused, table.concat(report.skip_reasons, "\n"))
        assert(store:set_tool_enabled("mcp_h_hostile", true))
        assert(store:set_tool_enabled("mcp_h_echo", true))
        local r = assert(run.start(store, {
          user = { name = "ops", uid = 1, admin = true },
          configuration = { identifier = "cfg-local", provider = "p-local" },
          providers = { ["p-local"] = { zone = "local" } },
        }))
        local fired
        local results = mcp.gather {
          function()
            return r:turn {
              { name = "mcp_h_hostile", arguments = {} },
              { name = "mcp_h_echo", arguments = { text = "x" } },
            }
          end,
          function()
            -- the tool is running (its stream open) before the run is cancelled
            local limit = core.monotonic_ns() + 30e9
            repeat engine.sleep(0.02) until (state(path).tool ~= json.null) or core.monotonic_ns() > limit
            engine.sleep(0.1)
            fired = core.monotonic_ns()
            assert(r:cancel())
          end,
        }
        local turn = results[1][1]
        assert.is_table(turn, tostring(results[1].error))
        assert.equal("cancelled", turn[1].err.kind)
        assert.equal("cancelled", r.status)
        assert_stopped_in_time(path, era, fired)
        assert.is_true(assert(store:run(r.uid)).cancel_requested, "the cancel was never written down")
        r:finish()
        for _, p in ipairs { db, db .. "-wal", db .. "-shm" } do os.remove(p) end
      end

      it("a run's turn: run:cancel stops the call in flight", function()
        cancel_a_turn("/" .. mode .. "/turn")
      end)

      it("a run's turn: the server is told before a slow store has written the cancel down", function()
        cancel_a_turn("/" .. mode .. "/turn-slow-store", true)
      end)
    end)
  end
end)

describe("budgets that hold however a call waits #integration", function()
  setup(function() server = hostile.start() end)
  teardown(function() hostile.stop(server) end)

  it("a call queued behind the 16 connections of one server keeps its 1 s budget: timeout, nothing sent", function()
    local path = "/never-answers/queued"
    local conn <close> = connect(path)
    assert(conn:call_tool("echo", { text = "warm" }))
    local fns = {}
    for i = 1, 16 do fns[i] = function() return conn:call_tool("hostile", {}, { budget = 3 }) end end
    local sent_before, waited
    fns[17] = function()
      -- the 16 others hold every connection before this one asks
      local limit = core.monotonic_ns() + 30e9
      repeat engine.sleep(0.02) until #requests_of(path, "tools/call") >= 17 or core.monotonic_ns() > limit
      sent_before = #requests_of(path, "tools/call")
      local t0 = core.monotonic_ns()
      local out, message, err = conn:call_tool("hostile", {}, { budget = 1 })
      waited = (core.monotonic_ns() - t0) / 1e9
      -- nothing of this call reached the server while it waited
      return out, message, err, #requests_of(path, "tools/call")
    end
    local results = mcp.gather(fns)
    local queued = results[17]
    assert.equal(17, sent_before, "16 calls and the warm-up echo were in flight")
    assert.equal("timeout", queued[3].kind, queued[2])
    assert.truthy(queued[3].detail:find("nothing was sent", 1, true), queued[3].detail)
    assert.is_true(waited < 1.2, string.format("the 1 s budget returned after %.2f s", waited))
    assert.equal(sent_before, queued[4])
    for i = 1, 16 do assert.equal("timeout", results[i][3].kind) end
  end)

  for _, inside in ipairs { false, true } do
    it("a call flooded with 3 000 pings whose budget runs out while reading: timeout, not malformed"
      .. (inside and " (gather)" or ""), function()
      local path = "/ping-flood/" .. (inside and "gather" or "blocking")
      local conn <close> = connect(path)
      -- the server writes its 3 000 pings and ends the stream within a few milliseconds; answering
      -- them takes the client longer than this budget, so it runs out while the stream is read
      local budget = inside and 0.1 or 0.04
      local function call() return conn:call_tool("hostile", {}, { budget = budget }) end
      local t0 = core.monotonic_ns()
      local out, message, err
      if inside then
        local results = mcp.gather { call }
        out, message, err = results[1][1], results[1][2], results[1][3]
      else
        out, message, err = call()
      end
      local took = (core.monotonic_ns() - t0) / 1e9
      assert.is_nil(out)
      assert.equal("timeout", err.kind, message)
      assert.is_true(took < 1, string.format("returned after %.2f s", took))
    end)
  end
end)
