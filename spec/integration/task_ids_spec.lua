-- A task id is its server's, unique only per server (and per session): `mcpclient tasks cancel`
-- never reaches another server's task of the same id. An open task is taken over a closed one of
-- the same id, an id two open tasks share is refused with the choices (--server / --run pick one),
-- and the stored rows are read by server and run on SQLite and PostgreSQL alike. The command runs
-- in this process over an injected scripted server; each stored handle is of a 2025-11-25 task
-- bound to a session of its own, so the session a request went under says whose task it was.
local backends = require "support.backends"
local cli = require "support.cli"
local core = require "mcpclient.core"
local Fake = require "support.fake_server"
local servers = require "support.servers"

local json = core.json

local function legacy(id, status)
  local stamp = os.date("!%Y-%m-%dT%H:%M:%SZ")
  return { taskId = id, status = status, createdAt = stamp, lastUpdatedAt = stamp, ttl = 600000, pollInterval = 0 }
end

describe("task ids are the server's (" .. backends.name .. ")", function()
  local store
  local runs = 0

  before_each(function()
    store = servers.open_store()
    servers.add(store, { identifier = "alpha", url = "https://alpha.example.com/rpc" })
    servers.add(store, { identifier = "beta", url = "https://beta.example.com/rpc" })
  end)
  after_each(function() store:close() end)

  -- A run of its own with one stored task `id` of `server`, its handle bound to session
  -- "sess-<server>-<run>"; closed when `closed`. → run uid, task uid
  local function stored(server, id, closed)
    runs = runs + 1
    local run = assert(store:insert_run { uuid = "run-" .. runs, status = "running", claimed_by = "me",
      lease_expires = os.time() + 600 })
    local session = string.format("sess-%s-%d", server, run)
    local handle = json.encode { id = id, status = "working", server = server, era = "legacy", session = session,
      version = "2025-11-25" }
    local fence = json.encode(json.array { { tool = "mcp_" .. server .. "_long", arguments_sha256 = "x", sequence = 1,
      task_id = id } })
    local uid = assert(store:insert_task({ run = run, sequence = 1, server = server, task_id = id,
      tool = "mcp_" .. server .. "_long", arguments = "{}", arguments_sha256 = "x", round = 1, handle = handle,
      status = "working", started_by = "me" }, "me", fence))
    if closed then assert.equal(1, assert(store:close_task(uid, "me", "completed"))) end
    return run, uid
  end

  local function run(argv, fake)
    return cli.main(argv, { store = store, options = { transport = fake, clock = fake.clock } })
  end

  -- a fake that answers one cancel and the status read after it
  local function cancelling(id)
    return Fake.new():will_return(legacy(id, "cancelled")):will_return(legacy(id, "cancelled"))
  end

  it("an ended task on one server and an open one of the same id on another: cancel reaches the open one",
    function()
      stored("alpha", "dup-1", true)
      local beta_run = stored("beta", "dup-1")
      local listed_fake = Fake.new()
      local code, out = run({ "--json", "tasks" }, listed_fake)
      assert.equal(0, code)
      local listed = json.decode(out)
      assert.equal(1, #listed)
      assert.equal("beta", listed[1].server)
      local fake = cancelling("dup-1")
      local err
      code, out, err = run({ "--json", "tasks", "cancel", "dup-1" }, fake)
      assert.equal(0, code, err)
      local answer = json.decode(out)
      assert.equal("beta", answer.server)
      assert.equal(beta_run, answer.run)
      assert.equal("cancelled", answer.status)
      assert.same({ "tasks/cancel", "tasks/get" }, fake:methods())
      for _, r in ipairs(fake.requests) do
        assert.equal("sess-beta-" .. beta_run, r.session)
        assert.equal("dup-1", r.body.params.taskId)
      end
    end)

  it("a second cancel of a task the server already cancelled says so, once, and exits 0", function()
    local alpha_run = stored("alpha", "once-1")
    local fake = Fake.new():will_return_rpc_error(-32602, "Cannot cancel task in terminal status: cancelled")
      :will_return(legacy("once-1", "cancelled"))
    local code, out, err = run({ "tasks", "cancel", "once-1" }, fake)
    assert.equal(0, code, err)
    assert.equal('Task once-1 of alpha (run ' .. alpha_run .. ') is already cancelled: there is nothing to cancel.\n',
      out)
    assert.equal("", err)
    assert.same({ "tasks/cancel", "tasks/get" }, fake:methods())
    -- a task the server does not know at all stays a refusal, its words said once
    fake = Fake.new():will_return_rpc_error(-32602, "Unknown task"):will_return_rpc_error(-32602, "Unknown task")
    code, out, err = run({ "tasks", "cancel", "once-1" }, fake)
    assert.equal(1, code, out)
    assert.truthy(err:find("is not known to the server: the server said: Unknown task", 1, true), err)
  end)

  it("an id two open tasks share is refused with the choices, nothing sent; --server picks one", function()
    local alpha_run = stored("alpha", "dup-1")
    local beta_run = stored("beta", "dup-1")
    local fake = Fake.new()
    local code, out, err = run({ "tasks", "cancel", "dup-1" }, fake)
    assert.equal(1, code)
    assert.equal("", out)
    assert.truthy(err:find('server "alpha" (run ' .. alpha_run, 1, true), err)
    assert.truthy(err:find('server "beta" (run ' .. beta_run, 1, true), err)
    assert.truthy(err:find("--server NAME", 1, true), err)
    assert.equal(0, #fake.requests)

    local code_json, out_json = run({ "--json", "tasks", "cancel", "dup-1" }, fake)
    assert.equal(1, code_json)
    local refused = json.decode(out_json)
    assert.equal("invalid", refused.kind)
    assert.equal(2, #refused.choices)
    assert.equal(0, #fake.requests)

    -- the listing takes the same filters
    local _, by_server = run({ "--json", "tasks", "--server", "alpha" }, fake)
    assert.same({ alpha_run }, { json.decode(by_server)[1].run, json.decode(by_server)[2] })
    local _, by_run = run({ "--json", "tasks", "--run", tostring(beta_run) }, fake)
    assert.same({ "beta" }, { json.decode(by_run)[1].server, json.decode(by_run)[2] })

    local picked = cancelling("dup-1")
    code, out, err = run({ "--json", "tasks", "cancel", "dup-1", "--server", "alpha" }, picked)
    assert.equal(0, code, err)
    assert.equal("alpha", json.decode(out).server)
    assert.equal("sess-alpha-" .. alpha_run, picked.requests[1].session)
  end)

  it("two open tasks of one id on one server (two sessions): --run picks one", function()
    stored("alpha", "dup-1")
    local second = stored("alpha", "dup-1")
    local fake = Fake.new()
    local code, _, err = run({ "tasks", "cancel", "dup-1", "--server", "alpha" }, fake)
    assert.equal(1, code)
    assert.truthy(err:find("--run ID", 1, true), err)
    assert.equal(0, #fake.requests)
    local picked = cancelling("dup-1")
    local out
    code, out, err = run({ "--json", "tasks", "cancel", "dup-1", "--run", tostring(second) }, picked)
    assert.equal(0, code, err)
    assert.equal(second, json.decode(out).run)
    assert.equal("sess-alpha-" .. second, picked.requests[1].session)
  end)

  it("the refusal shows what the store holds through the text rule", function()
    stored("alpha", "dup-1")
    stored("beta\27[31m\226\128\174", "dup-1")
    local code, _, err = run({ "tasks", "cancel", "dup-1" }, Fake.new())
    assert.equal(1, code)
    assert.falsy(err:find("\27", 1, true), err)
    assert.falsy(err:find("\226\128\174", 1, true), err)
  end)

  it("a store from before the run-keyed tasks keeps every row and uid, and then takes a reused id", function()
    local store_module = require "mcpclient.agent.store"
    local path = os.tmpname()
    local location = backends.fresh(path)
    local _ <close> = setmetatable({}, { __close = function() os.remove(path) end })
    local old = assert(store_module.open(location, { migrate_to = 8 })) -- before migration 9
    -- the rows as that version wrote them (this one's columns are named as migration 10 names them)
    local db = old.adapter
    local before = {}
    for i = 1, 3 do
      local r = assert(db:insert("INSERT INTO agent_run (uuid, status, claimed_by, lease_expires, pending_effect) "
        .. "VALUES (?, ?, ?, ?, ?)", { "old-" .. i, "running", "me", os.time() + 600, "[]" }))
      before[i] = assert(db:insert("INSERT INTO agent_task (run, sequence, server, task_id, tool, handle, status) "
        .. "VALUES (?, 1, ?, ?, ?, ?, ?)", { r, "alpha", "old-" .. i, "t", "{}", "working" }))
    end
    assert(db:exec("UPDATE agent_task SET closed = 1, finished_by = ?, status = ? WHERE uid = ? AND closed = 0",
      { "me", "completed", before[2] }))
    assert.equal(1, db:changes())
    old:close()
    local upgraded <close> = assert(store_module.open(location))
    assert.equal(store_module.SCHEMA_VERSION, upgraded:schema_version())
    for i = 1, 3 do
      local row = assert(upgraded:tasks_by_id("old-" .. i, "alpha"))[1]
      assert.equal(before[i], row.uid)
      assert.equal(i == 2, row.closed)
    end
    -- the counter goes on after the copied uids, and another run may store a task of an id reused
    local r = assert(upgraded:insert_run { uuid = "new", status = "running", claimed_by = "me",
      lease_expires = os.time() + 600 })
    local reused = assert(upgraded:insert_task({ run = r, sequence = 1, server = "alpha", task_id = "old-2",
      tool = "t", handle = "{}", status = "working" }, "me", "[]"))
    assert.is_true(reused > before[3])
    assert.equal(reused, assert(upgraded:tasks_by_id("old-2", "alpha"))[1].uid)  -- the open one first
    -- one run's task of one server is stored once
    assert.is_nil(upgraded:insert_task({ run = r, sequence = 2, server = "alpha", task_id = "old-2", tool = "t",
      handle = "{}" }, "me", "[]"))
  end)

  it("a run taken over follows each task only through its own server's connection", function()
    local mcp = require "mcpclient"
    local run_module = require "mcpclient.agent.run"
    -- the run's fence names two calls, each a task "dup-1": one of server beta (seq 1), one of alpha (seq 2)
    local fence = json.encode(json.array {
      { tool = "mcp_alpha_long", arguments_sha256 = "x", sequence = 1, task_id = "dup-1" },
      { tool = "mcp_alpha_long", arguments_sha256 = "y", sequence = 2, task_id = "dup-1" } })
    local r = assert(store:insert_run { uuid = "left", status = "running", claimed_by = "gone",
      lease_expires = os.time() + 600 })
    -- beta's handle as a host may have stored it, without its server; the row says whose it is
    local beta_task = assert(store:insert_task({ run = r, sequence = 1, server = "beta", task_id = "dup-1",
      tool = "mcp_alpha_long", arguments = "{}", round = 1, status = "working", started_by = "gone",
      handle = json.encode { id = "dup-1", era = "legacy", session = "sess-beta", version = "2025-11-25" } },
      "gone", fence))
    assert(store:insert_task({ run = r, sequence = 2, server = "alpha", task_id = "dup-1", tool = "mcp_alpha_long",
      arguments = "{}", round = 1, status = "working", started_by = "gone", handle = json.encode { id = "dup-1",
      server = "alpha", era = "legacy", session = "sess-alpha", version = "2025-11-25" } }, "gone", fence))
    assert(store:update_run(r, { lease_expires = os.time() - 5 }))
    -- the run's tool is of alpha now: alpha's task is followed to its end, beta's never asked of alpha
    local fake = Fake.new():will_return(legacy("dup-1", "completed"))
      :will_return { content = json.array { { type = "text", text = "alpha's outcome" } } }
    local alpha <close> = mcp.connect { url = "https://alpha.example.com/rpc", identifier = "alpha",
      health = mcp.health.discard, transport = fake, clock = fake.clock }
    local tool = { name = "mcp_alpha_long", execute = function() error("never called again") end,
      connection = function() return alpha end }
    local taken, results = assert(run_module.take_over(store, r, { user = { name = "ops", uid = 1, admin = true },
      configuration = { identifier = "cfg-local", provider = "p-local" },
      providers = { ["p-local"] = { zone = "local" } }, tools = { tool }, log = function() end, owner = "taker",
      task_budget = 5 }))
    assert.equal(2, #results)
    assert.is_true(results[1].open)
    assert.truthy(results[1].text:find('server "beta"', 1, true), results[1].text)
    assert.is_falsy(results[2].open)
    assert.equal("alpha's outcome", results[2].text)
    assert.same({ "tasks/get", "tasks/result" }, fake:methods())
    for _, req in ipairs(fake.requests) do assert.equal("sess-alpha", req.session) end
    -- beta's task stays open and fenced; alpha's step is recorded, its fence entry gone
    local open = assert(store:open_tasks(r))
    assert.equal(1, #open)
    assert.equal(beta_task, open[1].uid)
    local kept = run_module.fence(assert(store:run(r)).fence)
    assert.equal(1, #kept)
    assert.equal(1, kept[1].sequence)
    taken:close()
  end)

  it("conn:task gives handles of its own server only", function()
    local mcp = require "mcpclient"
    local fake = Fake.new():will_return(legacy("t-1", "working"))
    local conn <close> = mcp.connect { url = "https://alpha.example.com/rpc", identifier = "alpha",
      health = mcp.health.discard, transport = fake, clock = fake.clock }
    -- a handle without its server is taken as this server's, and says so
    local handle = assert(conn:task({ id = "t-1", session = "sess-1", version = "2025-11-25", era = "legacy" })
      :status())
    assert.equal("alpha", handle.server)
    assert.has_error(function() conn:task { id = "t-1", server = "beta" } end)
    assert.equal(1, #fake.requests)
  end)

  it("the store reads a task id by server and run, open rows first", function()
    local _, closed_alpha = stored("alpha", "dup-1", true)
    local beta_run, open_beta = stored("beta", "dup-1")
    local rows = assert(store:tasks_by_id("dup-1"))
    assert.equal(2, #rows)
    assert.equal(open_beta, rows[1].uid)
    assert.equal(closed_alpha, rows[2].uid)
    assert.same({ closed_alpha }, { assert(store:tasks_by_id("dup-1", "alpha"))[1].uid })
    assert.equal(0, #assert(store:tasks_by_id("dup-1", "alpha", beta_run)))
    assert.equal(open_beta, assert(store:tasks_by_id("dup-1", "beta", beta_run))[1].uid)
    assert.equal(0, #assert(store:tasks_by_id("dup-2")))
  end)
end)
