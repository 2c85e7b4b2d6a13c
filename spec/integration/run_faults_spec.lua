-- Faults an operator's bad day brings, against a real MCP server (the
-- official SDK's, whose log is the server side's record of every call it
-- ran): a worker killed (-9) while its write is on the wire, and a database
-- that is full when the step is written. For each, the server's executions
-- against the audit: nothing lost (every execution is a step of the audit or
-- named by the run's fence), nothing twice, and the run never ends
-- "completed" with a call unrecorded. On SQLite, and on PostgreSQL with
-- MCPCLIENT_TEST_PG (the full disk is SQLite's: a PostgreSQL cluster here
-- cannot be filled without filling the machine's disk).
local backends = require "support.backends"
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local fence = require "support.fence"
local operator = require "mcpclient.agent.operator"
local peers = require "support.peers"
local run = require "mcpclient.agent.run"
local shell = require "support.shell"
local store_module = require "mcpclient.agent.store"

local json = core.json
local quote, read_all = shell.quote, shell.read_all

local ADMIN = { name = "ops", uid = 1, admin = true }
local CONFIG = { identifier = "cfg-local", provider = "p-local" }
local PROVIDERS = { ["p-local"] = { zone = "local" } }

-- Wait until probe() returns a value, polling every 10 ms, for at most `seconds`.
local wait_for = require("support.wait").for_value
-- How long the spec waits for what the worker or the server does: each wait returns as soon as it
-- is done, so the bound is generous (the machine may be loaded).
local WAIT_SECONDS = 60

-- The tools/call requests the server received, as { id, tool } (its log: one line per message).
local function executions(peer)
  local out = {}
  for _, line in ipairs(peer.log_lines()) do
    local id = line:match("^POST tools/call (%S+) ")
    if id then out[#out + 1] = id end
  end
  return out
end

local function tool_steps(store, run_uid)
  local out = {}
  for _, e in ipairs(assert(store:events(run_uid))) do
    if e.kind == "tool" then out[#out + 1] = json.decode(e.payload) end
  end
  return out
end

-- The peer's tools imported into a fresh store at `location` and `names` switched on.
local function imported(location, peer, names)
  local store = assert(store_module.open(location))
  local uid = assert(store:add_server { identifier = "peer", name = "SDK peer", url = peer.url,
    data_class = "publicContent", requires_approval = "0", enabled = true })
  local report = catalogue.import(store, assert(store:server(uid)), { log = function() end })
  assert.is_false(report.refused, table.concat(report.skip_reasons, "\n"))
  for _, name in ipairs(names) do assert(store:set_tool_enabled(name, true)) end
  return store
end

describe("a run's faults against a real server #integration", function()
  local peer, child, paths

  setup(function()
    peers.require_available()
  end)

  before_each(function()
    peer = peers.start("sdk-stateless", { log = true })
    paths = {}
  end)

  after_each(function()
    if child then
      if peers.alive(child.pid) then os.execute("kill -KILL " .. child.pid .. " 2>/dev/null") end
      child.pipe:close()
      child = nil
    end
    if peer then peer.stop() end
    for _, path in ipairs(paths) do
      for _, suffix in ipairs { "", "-wal", "-shm" } do os.remove(path .. suffix) end
    end
  end)

  local function tmp()
    local path = os.tmpname()
    paths[#paths + 1] = path
    return path
  end

  it("a worker killed while its write is on the wire: the fence names the call the server ran", function()
    local location = backends.fresh(tmp())
    local store <close> = imported(location, peer, { "mcp_peer_slow" })
    local out, err = tmp(), tmp()
    local env = string.format("LUA_PATH=%s LUA_CPATH=%s",
      quote(peers.root .. "/lua/?.lua;" .. peers.root .. "/lua/?/init.lua;;"), quote(peers.root .. "/build/?.so;;"))
    -- a lease of 1 s: the worker's run is left behind soon after it dies
    local pipe = assert(io.popen("echo $$; cd " .. quote(peers.root) .. " && " .. env
      .. " exec lua5.4 spec/support/run_slow_call.lua " .. quote(location) .. " 5 1 >" .. quote(out) .. " 2>"
      .. quote(err) .. " </dev/null"))
    child = { pid = math.tointeger(tonumber(pipe:read("l"))), pipe = pipe }
    local uid = wait_for("the run to start", WAIT_SECONDS, function()
      return math.tointeger(tonumber(read_all(out):match("started (%d+)")))
    end)
    wait_for("the call to be on the wire and fenced", WAIT_SECONDS, function()
      local row = store:run(uid)
      return row and row.fence ~= "" and #executions(peer) == 1
    end)
    assert(os.execute("kill -KILL " .. child.pid))
    wait_for("the worker to be gone", WAIT_SECONDS, function() return not peers.alive(child.pid) end)
    child.pipe:close()
    child = nil
    -- the lease runs out (the store judges it in whole seconds of os.time); the next process
    -- that opens the store marks the run failed
    local lease_expires = assert(store:run(uid)).lease_expires
    wait_for("the worker's lease to run out", WAIT_SECONDS, function() return os.time() > lease_expires end)
    local reopened <close> = assert(store_module.open(location))
    local row = assert(reopened:run(uid))
    assert.equal("failed", row.status)
    assert.equal("recovered", assert(reopened:events(uid))[1].kind)
    -- one execution at the server, no step in the audit: the fence names exactly that call
    assert.equal(1, #executions(peer))
    assert.equal(0, #tool_steps(reopened, uid))
    assert.same({ fence.entry("mcp_peer_slow", { seconds = 5 }, 1) }, fence.entries(row.fence))
    -- and the operator command says so
    local listing = assert(io.popen("cd " .. quote(peers.root) .. " && " .. env .. " lua5.4 bin/mcpclient --db "
      .. quote(location) .. " --json runs --open"))
    local listed = json.decode(listing:read("a"))
    listing:close()
    assert.equal(uid, listed[1].id)
    assert.equal("failed", listed[1].status)
    assert.same({ tool = "mcp_peer_slow", arguments_sha256 = fence.digest { seconds = 5 }, sequence = 1,
      recorded = false }, listed[1].fence[1])
  end)

  it("a database full when the step is written: the run fails closed; every execution accounted for #sqlite", function()
    if backends.postgres then
      pending("a full disk is SQLite's case here #sqlite")
      return
    end
    local location = tmp()
    local store <close> = imported(location, peer, { "mcp_peer_echo" })
    local r = assert(run.start(store, { user = ADMIN, configuration = CONFIG, providers = PROVIDERS,
      provider = catalogue.provider(store, { log = function() end }), log = function() end }))
    for i = 1, 3 do assert.is_false(r:invoke("mcp_peer_echo", { message = "m" .. i }).is_error) end
    -- the disk fills up: not one more page, and no room left in the pages there are (an update in
    -- place, such as the fence, still fits)
    assert(store.adapter:exec("PRAGMA max_page_count = 1"))
    for _, size in ipairs { 4000, 1000, 200, 20, 1 } do
      for _ = 1, 10000 do
        if not store:append_event(999999, { kind = "filler", payload = string.rep("y", size) }) then break end
      end
    end
    local results = {}
    for i = 4, 6 do results[#results + 1] = r:invoke("mcp_peer_echo", { message = "m" .. i }) end
    assert.equal("failed", r.status)
    assert.equal("audit_persistence_failed", r.error.kind)
    assert.truthy(r.error.store_error.message:find("full", 1, true), r.error.store_error.message)
    assert.is_true(results[2].stopped and results[3].stopped)
    assert.equal("failed", r:finish())
    -- server side: 4 executions (the 5th and 6th were never sent); the audit: 3 steps and the fence the 4th
    assert.equal(4, #executions(peer))
    local steps = tool_steps(store, r.uid)
    assert.equal(3, #steps)
    for i, step in ipairs(steps) do assert.same({ message = "m" .. i }, step.toolArguments) end
    assert.same({ fence.entry("mcp_peer_echo", { message = "m4" }, 4) },
      fence.entries(assert(store:run(r.uid)).fence))
    local views = assert(operator.runs(store, { open = true }))
    assert.equal(r.uid, views[1].uid)
    assert.is_false(views[1].fence[1].recorded)
  end)
end)
