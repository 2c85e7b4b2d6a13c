-- A run waiting for approval outlives the process that holds it. Against the official TypeScript
-- SDK's server (its message log counts the calls it received), with worker processes sharing one
-- store (SQLite, or PostgreSQL with MCPCLIENT_TEST_PG as two hosts would):
--   * a worker suspends on a call that needs approval and is killed (-9); `mcpclient runs` shows
--     what the run waits on, `mcpclient runs approve` (another process) records the decision, and
--     once the lease has expired a third process takes the run over, resumes it with that decision
--     and the call is sent once;
--   * a holder whose lease expired is still alive when another takes the run over: its approve()
--     is refused (run_lease_lost) and it sends nothing; the new holder sends the call once;
--   * a holder that releases the run hands it over at once, lease or not.
local backends = require "support.backends"
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local peers = require "support.peers"
local run = require "mcpclient.agent.run"
local shell = require "support.shell"
local store_module = require "mcpclient.agent.store"
local worker_process = require "support.worker"

local json = core.json
local quote, read_all = shell.quote, shell.read_all

local wait_for = require("support.wait").for_value

local ADMIN = { name = "ops", uid = 1, admin = true }
local LOCAL = { identifier = "cfg-local", provider = "p-local" }
local PROVIDERS = { ["p-local"] = { zone = "local" } }

describe("a run waiting for approval, taken over by another process (" .. backends.name .. ") #integration",
  function()
  local peer, children = nil, {}
  local scratch = worker_process.scratch()
  local tmp = scratch.path

  before_each(function()
    peers.require_available()
    peer = peers.start("sdk-stateless", { log = true })
  end)

  after_each(function()
    for _, child in ipairs(children) do worker_process.stop(child) end
    children = {}
    if peer then peer.stop() end
    scratch.remove()
  end)

  local function worker(location, words, out)
    local child = worker_process.start("run_waiting_worker.lua", location, words, out)
    children[#children + 1] = child
    return child
  end

  local function gone(child)
    wait_for("a worker to end", 10, function() return not peers.alive(child.pid) end)
  end

  local function calls()
    local n = 0
    for _, line in ipairs(peer.log_lines()) do
      if line:match("^POST tools/call ") then n = n + 1 end
    end
    return n
  end

  local function cli(location, words)
    local text = worker_process.mcpclient(location, "--json " .. words)
    return json.decode(text), text
  end

  -- A store with the SDK server on it (approval asked for every call), its echo tool switched on.
  local function prepared()
    local location = backends.fresh(tmp())
    local store = assert(store_module.open(location))
    local uid = assert(store:add_server { identifier = "lab", name = "Lab", url = peer.url,
      data_class = "publicContent", requires_approval = "1", enabled = true })
    assert.is_false(catalogue.import(store, assert(store:server(uid)), { log = function() end }).refused)
    assert(store:set_tool_enabled("mcp_lab_echo", true))
    return location, store
  end

  local function suspended(out)
    return math.tointeger(tonumber(wait_for("the run to suspend", 15, function()
      return read_all(out):match("suspended (%d+) true")
    end)))
  end

  it("killed while it waits: approved by `mcpclient runs approve`, resumed by another process, sent once", function()
    local location, store = prepared()
    local out, control = tmp(), tmp()
    local holder = worker(location, "suspend mcp_lab_echo 1 " .. quote(control), out)
    local run_uid = suspended(out)
    assert(os.execute("kill -KILL " .. holder.pid))
    gone(holder)
    assert.equal("waiting_approval", assert(store:run(run_uid)).status)

    -- the operator sees what it waits on, and decides from another process
    local listed = cli(location, "runs --open")
    assert.equal(run_uid, listed[1].id)
    assert.equal("call", listed[1].waiting.steps[1].kind)
    assert.equal("mcp_lab_echo", listed[1].waiting.steps[1].name)
    assert.equal("once", listed[1].waiting.steps[1].arguments.message)
    assert.equal(json.null, listed[1].waiting.approval)
    local decided, text = cli(location, "runs approve " .. run_uid)
    assert.equal("approved", decided.waiting.approval, text)
    local twice = cli(location, "runs deny " .. run_uid)
    assert.equal("invalid", twice.kind)
    assert.equal(0, calls())

    -- the lease runs out; another process takes the run over and resumes it with the decision
    wait_for("the lease to expire", 5, function() return assert(store:run(run_uid)).lease_expires < os.time() end)
    local out2 = tmp()
    local taker = worker(location, "take " .. run_uid, out2)
    gone(taker)
    local said = read_all(out2)
    assert.truthy(said:find("took waiting_approval 1 approved", 1, true), said .. read_all(out2 .. ".err"))
    assert.truthy(said:find("text Echo: once", 1, true), said)
    assert.truthy(said:find("finished completed", 1, true), said)
    assert.equal(1, calls())

    -- the trail: dense; the suspension, the operator's decision, the one step
    local kinds, approval = {}, nil
    for i, e in ipairs(assert(store:events(run_uid))) do
      assert.equal(i, e.sequence)
      kinds[#kinds + 1] = e.kind
      if e.kind == "approval" then approval = json.decode(e.payload) end
    end
    assert.same({ "approval_required", "approval", "tool" }, kinds)
    assert.truthy(approval.by:match("^cli:"))
    assert.is_true(approval.approved)
    local row = assert(store:run(run_uid))
    assert.equal("completed", row.status)
    assert.equal("", row.pending_steps)
    assert.equal("", row.fence)
    store:close()
  end)

  it("a holder whose lease expired cannot approve once another holds the run; the call is sent once", function()
    local location, store = prepared()
    local out, control = tmp(), tmp()
    local holder = worker(location, "suspend mcp_lab_echo 1 " .. quote(control), out)
    local run_uid = suspended(out)
    wait_for("the lease to expire", 5, function() return assert(store:run(run_uid)).lease_expires < os.time() end)
    -- this process, on a store handle of its own, takes it over while the old holder lives
    local mine = assert(store_module.open(location))
    local r = assert(run.take_over(mine, run_uid, { user = ADMIN, configuration = LOCAL, providers = PROVIDERS,
      log = function() end, owner = "spec:taker" }))
    assert.equal(run.WAITING, r.status)
    assert.same({ { id = "call-1-1", kind = "call", tool = "mcp_lab_echo", server = "lab", name = "mcp_lab_echo",
      arguments = { message = "once" }, needs_approval = true, reason = "approval" } }, r:pending())
    -- a second taker finds it held
    local again, _, err = run.take_over(store, run_uid, { user = ADMIN, configuration = LOCAL,
      providers = PROVIDERS, log = function() end, owner = "spec:second" })
    assert.is_nil(again)
    assert.equal("run_lease_lost", err.kind)
    -- the old holder approves: refused, nothing sent
    local f = assert(io.open(control, "w"))
    f:write("approve\n")
    f:close()
    gone(holder)
    local said = read_all(out)
    assert.truthy(said:find("approve nil run_lease_lost", 1, true), said .. read_all(out .. ".err"))
    assert.truthy(said:find("status failed", 1, true), said)
    assert.equal(0, calls())
    assert.equal("spec:taker", assert(store:run(run_uid)).claimed_by)
    -- the new holder decides and resumes: once
    assert.is_true(r:approve())
    assert.equal("Echo: once", r:resume()[1].text)
    assert.equal(1, calls())
    assert.equal("completed", r:finish())
    mine:close()
    store:close()
  end)

  it("a holder that releases the run hands it over at once, its lease notwithstanding", function()
    local location, store = prepared()
    local out, control = tmp(), tmp()
    local holder = worker(location, "suspend mcp_lab_echo 900 " .. quote(control), out)
    local run_uid = suspended(out)
    local early, _, err = run.take_over(store, run_uid, { user = ADMIN, configuration = LOCAL,
      providers = PROVIDERS, log = function() end, owner = "spec:early" })
    assert.is_nil(early)
    assert.equal("run_lease_lost", err.kind)
    local f = assert(io.open(control, "w"))
    f:write("release\n")
    f:close()
    gone(holder)
    assert.truthy(read_all(out):find("released true", 1, true), read_all(out) .. read_all(out .. ".err"))
    assert.is_true(run.decide(store, run_uid, false, { by = "alice" }))
    local out2 = tmp()
    gone(worker(location, "take " .. run_uid, out2))
    local said = read_all(out2)
    assert.truthy(said:find("took waiting_approval 1 denied", 1, true), said .. read_all(out2 .. ".err"))
    assert.truthy(said:find("was not approved", 1, true), said)
    assert.truthy(said:find("finished completed", 1, true), said)
    assert.equal(0, calls())
    store:close()
  end)

  it("decided step by step from the operator's command, an unknown id refused; another process finishes it",
    function()
    local location, store = prepared()
    local out = tmp()
    gone(worker(location, "suspend_two mcp_lab_echo 900", out))
    local said = read_all(out)
    local run_uid = math.tointeger(tonumber(said:match("suspended (%d+) true")))
    assert.truthy(run_uid, said .. read_all(out .. ".err"))
    assert.truthy(said:find("released true", 1, true), said)

    local listed = cli(location, "runs --waiting")
    assert.equal(1, #listed)
    local steps = listed[1].waiting.steps
    assert.same({ "first", true, "approval" }, { steps[1].id, steps[1].needs_approval, steps[1].reason })
    assert.same({ "second", true, "approval" }, { steps[2].id, steps[2].needs_approval, steps[2].reason })
    local refused = cli(location, "approve " .. run_uid .. " third")
    assert.equal("invalid", refused.kind)
    assert.equal("", assert(store:run(run_uid)).approval) -- nothing changed
    cli(location, "approve " .. run_uid .. " first")
    local decided, text = cli(location, "runs deny " .. run_uid .. " second --reason " .. quote("not twice"))
    assert.same({ "approved", "denied" }, { decided.waiting.steps[1].decision, decided.waiting.steps[2].decision },
      text)
    assert.equal(0, calls())

    local out2 = tmp()
    gone(worker(location, "take " .. run_uid, out2))
    said = read_all(out2)
    assert.truthy(said:find("result first Echo: one", 1, true), said .. read_all(out2 .. ".err"))
    assert.truthy(said:find('result second Error: the call to "mcp_lab_echo" was not approved: not twice.', 1, true),
      said)
    assert.truthy(said:find("finished completed", 1, true), said)
    assert.equal(1, calls()) -- the approved call once, the denied one never
    local rows = store:governance_events()
    assert.equal(1, #rows)
    assert.equal("approvalDenied", rows[1].reason)
    local decisions = {}
    for _, e in ipairs(assert(store:events(run_uid))) do
      if e.kind == "approval" then
        local payload = json.decode(e.payload)
        decisions[#decisions + 1] = payload.id .. "=" .. tostring(payload.approved)
      end
    end
    assert.same({ "first=true", "second=false" }, decisions)
    store:close()
  end)
end)
