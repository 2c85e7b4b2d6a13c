-- Cancelling a run from another process: one process
-- (spec/support/run_slow_call.lua) runs a call to the slow tool of the
-- official SDK server; this process sets the run's persisted cancel flag. The
-- call must come back cancelled well inside the tool's duration, the server
-- must have seen notifications/cancelled for that request id, and the audit
-- trail must show the cancelled step. Every process started here is stopped
-- by its PID.
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local json = require "mcpclient.json"
local peers = require "support.peers"
local run = require "mcpclient.agent.run"
local store_module = require "mcpclient.agent.store"
local backends = require "support.backends"

local SLOW_SECONDS = 10
-- How long the spec waits for what the other process or the server does: each wait returns as
-- soon as it is done, so the bound is generous (the machine may be loaded).
local WAIT_SECONDS = 60

local shell = require "support.shell"
local quote, read_all = shell.quote, shell.read_all

-- Wait until probe() returns a value, polling every 10 ms, for at most `seconds`.
local wait_for = require("support.wait").for_value

describe("cancelling a run from another process #integration", function()
  local peer, child, db, out, err

  setup(function()
    peers.require_available()
    peer = peers.start("sdk-session", { log = true })
  end)

  teardown(function()
    if child then
      if peers.alive(child.pid) then os.execute("kill -KILL " .. child.pid .. " 2>/dev/null") end
      child.pipe:close()
    end
    if peer then peer.stop() end
    for _, path in ipairs { db, db and db .. "-wal", db and db .. "-shm", out, err } do
      if path then os.remove(path) end
    end
  end)

  it("stops the call in flight, tells the server, and the trail shows it", function()
    db = os.tmpname()
    os.remove(db)
    db = backends.fresh(db)
    out, err = os.tmpname(), os.tmpname()
    local store <close> = assert(store_module.open(db))
    local server = assert(store:add_server {
      identifier = "peer", name = "SDK peer", url = peer.url, data_class = "publicContent",
      requires_approval = "0", enabled = true,
    })
    local report = catalogue.import(store, assert(store:server(server)), { log = function() end })
    assert.is_false(report.refused, table.concat(report.skip_reasons, "\n"))
    assert(store:set_tool_enabled("mcp_peer_slow", true))

    -- the other process
    local env = string.format("LUA_PATH=%s LUA_CPATH=%s",
      quote(peers.root .. "/lua/?.lua;" .. peers.root .. "/lua/?/init.lua;;"), quote(peers.root .. "/build/?.so;;"))
    local pipe = assert(io.popen("echo $$; cd " .. quote(peers.root) .. " && " .. env
      .. " exec lua5.4 spec/support/run_slow_call.lua " .. quote(db) .. " " .. SLOW_SECONDS
      .. " >" .. quote(out) .. " 2>" .. quote(err) .. " </dev/null"))
    child = { pid = math.tointeger(tonumber(pipe:read("l"))), pipe = pipe }
    assert.is_not_nil(child.pid)

    local uid = wait_for("the run to start", WAIT_SECONDS, function()
      return math.tointeger(tonumber(read_all(out):match("started (%d+)")))
    end)
    -- the call is in flight: fenced in the store and received by the server (which logs a message
    -- as it takes it in: its tool is running before it reads the cancellation, a later request)
    wait_for("the call to be in flight", WAIT_SECONDS, function()
      local row = store:run(uid)
      if not (row and row.fence:find('"tool":"mcp_peer_slow"', 1, true)) then return nil end
      for _, line in ipairs(peer.log_lines()) do
        if line:match("^POST tools/call ") then return true end
      end
      return nil
    end)
    local flagged = core.now()
    assert(run.cancel(store, uid))

    -- bounded past the tool's own duration: a call the cancel did not end fails the latency check
    -- below rather than the wait
    local returned = wait_for("the child to return", WAIT_SECONDS, function()
      return read_all(out):match("returned (%S+)")
    end)
    local latency = tonumber(returned) - flagged
    io.stderr:write(string.format("\n  cancel latency (flag set -> call returned in the other process): %.1f ms\n",
      latency * 1000))
    local output = read_all(out)
    child.pipe:close() -- reaps it
    child = nil
    -- well inside the tool's duration: the flag ended the call, not the tool's answer (compared with
    -- that duration, not a small number: on a loaded machine the other process polls late)
    assert.is_true(latency < SLOW_SECONDS / 2, string.format("returned %.3f s after the flag", latency))
    -- the run read the leg's own failure value: kind "cancelled", in flight
    assert.truthy(output:find("returned %S+ cancelled true cancelled in_flight"), output .. read_all(err))
    assert.truthy(output:find("cancelled in flight", 1, true), output)

    -- the server saw the cancellation of that very request, and the call only once
    local call_id, calls
    wait_for("notifications/cancelled in the server log", WAIT_SECONDS, function()
      calls = 0
      for _, line in ipairs(peer.log_lines()) do
        local id = line:match("^POST tools/call (%S+) ")
        if id then call_id, calls = id, calls + 1 end
      end
      for _, line in ipairs(peer.log_lines()) do
        if line:match("^POST notifications/cancelled ") and line:match(" (%S+)$") == call_id then return true end
      end
      return nil
    end)
    assert.equal(1, calls)

    -- the audit trail: one cancelled error step, the run cancelled, the fence cleared
    local row = assert(store:run(uid))
    assert.equal("cancelled", row.status)
    assert.equal("", row.fence)
    local events = assert(store:events(uid))
    assert.equal(1, #events)
    local step = json.decode(events[1].payload)
    assert.equal("tool", step.kind)
    assert.equal("mcp_peer_slow", step.toolName)
    assert.same({ seconds = SLOW_SECONDS }, step.toolArguments)
    assert.is_true(step.toolIsError)
    assert.truthy(step.toolResult:find("cancelled in flight", 1, true))
    assert.truthy(step.toolResult:find("may already have acted", 1, true))
    assert.is_true(step.durationMs < SLOW_SECONDS * 1000 / 2)
  end)
end)
