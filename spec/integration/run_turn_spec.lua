-- A run's turn executes its admitted calls at once: three calls to the slow
-- tool of the official SDK server (started on 127.0.0.1 by this file and
-- stopped by PID) take about one tool's time, and the audit trail lists the
-- steps in the model's order, whatever order the calls finished in.
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local json = require "mcpclient.json"
local peers = require "support.peers"
local run = require "mcpclient.agent.run"
local store_module = require "mcpclient.agent.store"

describe("a run's turn #integration", function()
  local peer, db

  setup(function()
    peers.require_available()
    peer = peers.start("sdk-session", { log = true })
  end)

  teardown(function()
    if peer then peer.stop() end
    for _, path in ipairs { db, db and db .. "-wal", db and db .. "-shm" } do
      if path then os.remove(path) end
    end
  end)

  it("runs three slow calls in about one call's time, the trail in the model's order", function()
    db = os.tmpname()
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
    local t0 = core.monotonic_ns()
    -- the first call is the slowest: it finishes last, yet its step comes first
    local results = r:turn {
      { name = "mcp_peer_slow", arguments = { seconds = 1 } },
      { name = "mcp_peer_slow", arguments = { seconds = 0.5 } },
      { name = "mcp_peer_slow", arguments = { seconds = 0.2 } },
    }
    local wall = (core.monotonic_ns() - t0) / 1e9
    assert.equal("slept 1", results[1].text)
    assert.equal("slept 0.5", results[2].text)
    assert.equal("slept 0.2", results[3].text)
    assert.is_true(wall < 1.6, "the turn took " .. wall .. " s")
    local order = {}
    for _, event in ipairs(assert(r:events())) do
      if event.kind == "tool" then order[#order + 1] = json.decode(event.payload).toolArguments.seconds end
    end
    assert.same({ 1, 0.5, 0.2 }, order)
    assert.equal("", store:run(r.uid).fence or "")
    r:finish()
  end)
end)
