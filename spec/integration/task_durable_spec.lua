-- A durable call: a run's call that became a task outlives the worker that made it. The worker is
-- killed (-9) while the task runs; a second process takes the run over on the same store and
-- follows the same task. The server (the hostile server's tasks-modern mode, which records every
-- request) saw one tools/call; the run completes with the task's result; the audit is dense and
-- names the task, who started it and who finished it. On SQLite, and on PostgreSQL with
-- MCPCLIENT_TEST_PG (two processes sharing one cluster, as two hosts would).
local backends = require "support.backends"
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local hostile = require "support.hostile"
local peers = require "support.peers"
local shell = require "support.shell"
local store_module = require "mcpclient.agent.store"
local worker_process = require "support.worker"

local json = core.json
local read_all = shell.read_all

local wait_for = require("support.wait").for_value

describe("a durable task-backed call (" .. backends.name .. ")", function()
  local server, child = nil, nil
  local scratch = worker_process.scratch()
  local tmp = scratch.path

  setup(function() server = hostile.start() end)
  teardown(function() hostile.stop(server) end)

  after_each(function()
    if child then
      worker_process.stop(child)
      child = nil
    end
    scratch.remove()
  end)

  local function worker(location, words, out)
    return worker_process.start("run_task_worker.lua", location, words, out)
  end

  it("survives its worker: SIGKILL mid-task, another process follows the same task to its end", function()
    local path = "/tasks-modern/durable-" .. backends.name
    local location = backends.fresh(tmp())
    local store <close> = assert(store_module.open(location))
    local uid = assert(store:add_server { identifier = "lab", name = "Lab", url = hostile.url(server, path),
      data_class = "publicContent", requires_approval = "0", enabled = true })
    local report = catalogue.import(store, assert(store:server(uid)), { log = function() end })
    assert.is_false(report.refused, table.concat(report.skip_reasons or {}, "\n"))
    assert(store:set_tool_enabled("mcp_lab_slow", true))

    -- the first worker: a 1 s lease, a task of 3 s
    local out = tmp()
    child = worker(location, "start mcp_lab_slow 3000 1", out)
    local run_uid = wait_for("the run to start", 10, function()
      return math.tointeger(tonumber(read_all(out):match("started (%d+)")))
    end)
    local task_row = wait_for("the task's handle in the store", 10, function()
      local open = store:open_tasks(run_uid)
      return open and open[1]
    end)
    -- the fence names the task: the call was recorded as sent, as that task
    local fenced = json.decode(assert(store:run(run_uid)).fence)
    assert.equal(task_row.task_id, fenced[1].task_id)
    assert.equal(1, fenced[1].sequence)
    assert(os.execute("kill -KILL " .. child.pid))
    wait_for("the worker to be gone", 5, function() return not peers.alive(child.pid) end)
    child.pipe:close()
    child = nil
    assert.is_nil(read_all(out):match("returned"))

    -- the lease runs out; opening the store does not fail the run: its call is a task to follow
    wait_for("the lease to expire", 5, function() return assert(store:run(run_uid)).lease_expires < os.time() end)
    local reopened <close> = assert(store_module.open(location))
    assert.equal("running", assert(reopened:run(run_uid)).status)
    -- the operator sees the run waiting to be taken over, its fence naming the task
    local runs = json.decode(worker_process.mcpclient(location, "--json runs --open"))
    assert.equal(run_uid, runs[1].id)
    assert.equal(task_row.task_id, runs[1].fence[1].task_id)
    assert.is_false(runs[1].fence[1].recorded)
    assert.truthy(runs[1].next:find("run.take_over", 1, true))

    local out2 = tmp()
    child = worker(location, "take " .. run_uid, out2)
    local waited, finished = pcall(wait_for, "the second worker to finish", 30, function()
      return read_all(out2):match("finished (%S+)") or read_all(out2):match("refused")
    end)
    assert(waited, "the second worker did not finish: " .. read_all(out2) .. read_all(out2 .. ".err"))
    assert.equal("completed", finished, read_all(out2) .. read_all(out2 .. ".err"))
    assert.truthy(read_all(out2):find("text slow done: durable", 1, true))

    -- the server ran one call
    local calls = hostile.requests_of(server, path, "tools/call")
    assert.equal(1, #calls)
    assert.equal(task_row.task_id, hostile.requests_of(server, path, "tasks/get")[1].task_id)
    -- the audit: dense, one step, naming the task, who started it and who finished it
    local events = assert(reopened:events(run_uid))
    for i, e in ipairs(events) do assert.equal(i, e.sequence) end
    local steps = {}
    for _, e in ipairs(events) do
      if e.kind == "tool" then steps[#steps + 1] = json.decode(e.payload) end
    end
    assert.equal(1, #steps)
    assert.equal("mcp_lab_slow", steps[1].toolName)
    assert.equal("slow done: durable", steps[1].toolResult)
    assert.equal(task_row.task_id, steps[1].taskId)
    assert.equal("lab", steps[1].taskServer)
    assert.truthy(steps[1].startedBy:match("^worker:start:"))
    assert.truthy(steps[1].finishedBy:match("^worker:take:"))
    assert.same({ ms = 3000, text = "durable" }, steps[1].toolArguments)
    local row = assert(reopened:run(run_uid))
    assert.equal("completed", row.status)
    assert.equal("", row.fence)
    assert.same({}, assert(reopened:open_tasks(run_uid)))
  end)

  it("mcpclient tasks lists the open task of a live run; tasks cancel ends it, and the run records how", function()
    local path = "/tasks-modern/cli-" .. backends.name
    local location = backends.fresh(tmp())
    local store <close> = assert(store_module.open(location))
    local uid = assert(store:add_server { identifier = "lab", name = "Lab", url = hostile.url(server, path),
      data_class = "publicContent", requires_approval = "0", enabled = true })
    assert.is_false(catalogue.import(store, assert(store:server(uid)), { log = function() end }).refused)
    assert(store:set_tool_enabled("mcp_lab_slow", true))
    local out = tmp()
    child = worker(location, "start mcp_lab_slow 20000 900", out)
    local run_uid = wait_for("the run to start", 10, function()
      return math.tointeger(tonumber(read_all(out):match("started (%d+)")))
    end)
    local task_row = wait_for("the task's handle in the store", 10, function()
      local open = store:open_tasks(run_uid)
      return open and open[1]
    end)
    local function cli(words)
      return json.decode(worker_process.mcpclient(location, "--json " .. words))
    end
    local listed = cli("tasks lab")
    assert.equal(1, #listed)
    assert.equal(task_row.task_id, listed[1].id)
    assert.equal("working", listed[1].status)
    assert.equal(run_uid, listed[1].run)
    assert.equal("mcp_lab_slow", listed[1].tool)
    assert.is_true(listed[1].age_seconds >= 0)
    local cancelled = cli("tasks cancel " .. task_row.task_id)
    assert.equal("cancelled", cancelled.status)
    local unknown = cli("tasks cancel no-such-task")
    assert.equal("task", unknown.kind)
    -- the run sees the task cancelled and records the step; the task is closed
    local returned = wait_for("the worker to return", 15, function() return read_all(out):match("returned (.-)\n") end)
    assert.equal("running true", returned)
    wait_for("the worker to end", 5, function() return not peers.alive(child.pid) end)
    assert.same({}, cli("tasks"))
    local steps = {}
    for _, e in ipairs(assert(store:events(run_uid))) do
      if e.kind == "tool" then steps[#steps + 1] = json.decode(e.payload) end
    end
    assert.equal(1, #steps)
    assert.is_true(steps[1].toolIsError)
    assert.equal(task_row.task_id, steps[1].taskId)
    assert.equal(steps[1].startedBy, steps[1].finishedBy)
    assert.equal(1, #hostile.requests_of(server, path, "tools/call"))
  end)

  it("a run whose fenced call is no stored task is still failed closed, never taken over", function()
    local location = backends.fresh(tmp())
    local store <close> = assert(store_module.open(location))
    local run_uid = assert(store:insert_run { uuid = "u-1", status = "running", claimed_by = "gone",
      lease_expires = os.time() - 5, fence = '[{"tool":"mcp_lab_slow","arguments_sha256":"x","sequence":1}]' })
    local marked = assert(store:recover_runs())
    assert.same({ run_uid }, marked)
    assert.equal("failed", assert(store:run(run_uid)).status)
    -- a handle is stored only under the run's lease, with the fence that names it; closed once
    local live = assert(store:insert_run { uuid = "u-2", status = "running", claimed_by = "me",
      lease_expires = os.time() + 60 })
    local fence = '[{"tool":"t","arguments_sha256":"x","sequence":1,"task_id":"task-9"}]'
    assert.is_false(store:insert_task({ run = live, sequence = 1, server = "lab", task_id = "task-9", tool = "t" },
      "someone else", fence))
    assert.equal("", assert(store:run(live)).fence)
    local task_uid = assert(store:insert_task({ run = live, sequence = 1, server = "lab", task_id = "task-9",
      tool = "t", status = "working", started_by = "me" }, "me", fence))
    assert.equal(fence, assert(store:run(live)).fence)
    assert.equal(1, #assert(store:open_tasks(live)))
    assert.equal(1, assert(store:close_task(task_uid, "me", "completed")))
    assert.equal(0, assert(store:close_task(task_uid, "other", "completed")))
    assert.equal("me", assert(store:tasks_by_id("task-9", "lab"))[1].finished_by)
    assert.same({}, assert(store:open_tasks(live)))
    assert.is_false(store_module.followable('[{"tool":"t","sequence":1,"task_id":""}]'))
    assert.is_true(store_module.followable('[{"tool":"t","sequence":1,"task_id":"task-1"}]'))
  end)
end)
