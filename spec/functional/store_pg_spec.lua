-- The shared store on PostgreSQL across processes: several workers' audited
-- calls at once, a lease taken over after expiry, imports at the same time,
-- migrations at the same time; and its faults: the database restarted or
-- stopped mid-run, a backend terminated and the postmaster killed mid-call,
-- a statement waiting on a lock, a wrong password.
-- Runs only when the suite runs on PostgreSQL (MCPCLIENT_TEST_PG, see
-- spec/support/backends.lua and scripts/test).
local backends = require "support.backends"
local core = require "mcpclient.core"
local drivers = require "mcpclient.db"
local shell = require "support.shell"
local postgres = require "mcpclient.agent.store.postgres"
local store_module = require "mcpclient.agent.store"

if not backends.postgres then
  describe("the store on PostgreSQL #postgres", function()
    pending("runs with MCPCLIENT_TEST_PG set (scripts/test starts a throwaway cluster)")
  end)
  return
end

local catalogue = require "mcpclient.agent.catalogue"
local run = require "mcpclient.agent.run"
local Fake = require "support.fake_server"
local fence = require "support.fence"
local servers = require "support.servers"

local json = core.json
local quote = shell.quote

local ROOT = assert(io.popen("pwd")):read("l")
local ENV = string.format("LUA_PATH=%s LUA_CPATH=%s", quote(ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;"
  .. ROOT .. "/spec/?.lua;;"), quote(ROOT .. "/build/?.so;;"))

-- Start `count` workers with these arguments at once; wait for them all and
-- return their output lines.
local function workers(count, conninfo, ...)
  local start_at = core.now() + 0.5
  local args = {}
  for i, a in ipairs { ... } do args[i] = quote(a) end
  local pipes = {}
  for i = 1, count do
    pipes[i] = assert(io.popen(string.format("%s lua5.4 spec/support/pg_worker.lua %s %.3f %s 2>&1", ENV,
      quote(conninfo), start_at, table.concat(args, " "))))
  end
  local lines = {}
  for i, pipe in ipairs(pipes) do
    lines[i] = pipe:read("a")
    pipe:close()
  end
  return lines
end

-- The cluster the run started (pg_virtualenv names it "regress").
local function cluster(action)
  local version = os.getenv("PGVERSION") or "15"
  -- the cluster tools are not the program under test: no sanitizer preload for them
  return shell.run(string.format("env -u LD_PRELOAD pg_ctlcluster %s regress %s -m fast", version, action))
end

local function text_answer(text)
  return { content = { { type = "text", text = text } } }
end

-- Import mcp_audit_read_page (a write: no read-only annotation) and switch it on.
local function audit_server(store)
  local uid = servers.add(store, { identifier = "audit", name = "Audit", requires_approval = "0" })
  local fake = Fake.new():will_handshake():will_return { tools = json.array {
    { name = "read_page", description = "Reads.", inputSchema = { type = "object" } } } }
  assert.is_false(catalogue.import(store, assert(store:server(uid)), { transport = fake, clock = fake.clock,
    log = function() end }).refused)
  assert(store:set_tool_enabled("mcp_audit_read_page", true))
  return uid
end

local function start_run(store, fake, extra)
  local options = {
    user = { name = "ops", uid = 7, admin = true },
    configuration = { identifier = "cfg-local", provider = "p-local" },
    providers = { ["p-local"] = { zone = "local" } },
    provider = catalogue.provider(store, { transport = fake, clock = fake.clock, log = function() end }),
    log = function() end,
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  return assert(run.start(store, options))
end

local function sequences(store, run_uid)
  local out = {}
  for i, e in ipairs(assert(store:events(run_uid))) do out[i] = e.sequence end
  return out
end

local function dense(n)
  local out = {}
  for i = 1, n do out[i] = i end
  return out
end

describe("the store on PostgreSQL, several processes at once", function()
  local conninfo, s

  before_each(function()
    conninfo = backends.new_schema()
    s = assert(store_module.open(conninfo))
  end)

  after_each(function()
    if s then s:close() end
  end)

  it("migrates once when several processes open a fresh store together", function()
    local fresh = backends.new_schema()
    local latest = store_module.SCHEMA_VERSION
    for _, line in ipairs(workers(6, fresh, "open")) do assert.equal("ok " .. latest .. "\n", line) end
    local other <close> = assert(store_module.open(fresh))
    local versions = {}
    for v = 1, latest do versions[v] = { version = v } end
    assert.same(versions, other.adapter:rows("SELECT version FROM schema_version ORDER BY version", {}))
  end)

  it("loses no audited call of 8 workers, and numbers every run's events densely", function()
    audit_server(s)
    local shared = assert(s:insert_run { uuid = "shared", status = "running", claimed_by = "nobody" })
    local lines = workers(8, conninfo, "calls", "12", tostring(shared))
    local runs = {}
    for _, line in ipairs(lines) do
      local uid = line:match("^ok (%d+)\n$")
      assert.is_truthy(uid, line)
      runs[#runs + 1] = math.tointeger(tonumber(uid))
    end
    for _, uid in ipairs(runs) do
      local events = assert(s:events(uid))
      local tools = 0
      for _, e in ipairs(events) do
        if e.kind == "tool" then tools = tools + 1 end
      end
      assert.equal(12, tools)
      assert.same(dense(#events), sequences(s, uid))
      assert.equal("completed", s:run(uid).status)
    end
    -- the shared run: 8 writers at once, 12 events each, no number twice and none skipped
    assert.same(dense(96), sequences(s, shared))
  end)

  it("leaves one consistent catalogue after two imports of one server at once", function()
    local uid = servers.add(s, { identifier = "twin", name = "Twin" })
    local lines = workers(2, conninfo, "import", tostring(uid), "40")
    for _, line in ipairs(lines) do assert.matches("^ok ", line) end
    local tools = assert(s:tools_of(uid))
    assert.equal(40, #tools)
    local seen = {}
    for _, t in ipairs(tools) do
      assert.is_nil(seen[t.tool_name])
      seen[t.tool_name] = true
      assert.is_false(t.orphaned)
    end
    assert.equal("ok", s:server(uid).import_status)
  end)

  it("fences the old owner once another worker took the expired lease over", function()
    audit_server(s)
    local now = 1700000000
    local fake = Fake.new():will_handshake():will_return(text_answer("one")):will_return(text_answer("two"))
    local r = start_run(s, fake, { now = function() return now end, lease_seconds = 60, owner = "host-a:1" })
    assert.is_false(r:invoke("mcp_audit_read_page", { uid = 1 }).is_error)
    -- another host, on its own connection, sees the lease expired and claims the run
    local other <close> = assert(store_module.open(conninfo))
    assert.equal(0, other:claim_run(r.uid, "host-b:2", now + 200, now + 30)) -- not yet expired
    assert.equal(1, other:claim_run(r.uid, "host-b:2", now + 200, now + 61))
    -- the old owner's next write is refused: its fenced update matches no row
    local result = r:invoke("mcp_audit_read_page", { uid = 2 })
    assert.is_true(result.is_error)
    assert.equal("run_lease_lost", r.error.kind)
    assert.equal(3, #fake.requests) -- the handshake pair and the first call only: the second was not sent
    local row = assert(other:run(r.uid))
    assert.equal("host-b:2", row.claimed_by)
    assert.equal("running", row.status)
    assert.equal(now + 200, row.lease_expires)
  end)
end)

describe("the store on PostgreSQL, faults", function()
  local conninfo, s

  before_each(function()
    conninfo = backends.new_schema()
    s = assert(store_module.open(conninfo))
  end)

  after_each(function()
    if s then s:close() end
  end)

  it("goes on after a restart between statements (a read reconnects), with no gap in the audit", function()
    audit_server(s)
    local fake = Fake.new():will_handshake():will_return(text_answer("one")):will_return(text_answer("two"))
    local r = start_run(s, fake)
    assert.is_false(r:invoke("mcp_audit_read_page", { uid = 1 }).is_error)
    assert.is_true(cluster("restart"))
    assert.is_false(r:invoke("mcp_audit_read_page", { uid = 2 }).is_error)
    assert.equal("completed", r:finish())
    assert.same(dense(#assert(s:events(r.uid))), sequences(s, r.uid))
  end)

  it("fails the run closed when the database goes away during a write's call", function()
    audit_server(s)
    local fake = Fake.new():will_handshake():will_return(text_answer("one"))
    fake:will(function(_, record)
      assert(cluster("stop"))
      return { status = 200, headers = { ["content-type"] = "application/json" }, duration_ms = 1,
        body = json.encode { jsonrpc = "2.0", id = record.id, result = text_answer("two") },
        streamed = false, stopped = false, truncated = false }
    end)
    local r = start_run(s, fake)
    assert.is_false(r:invoke("mcp_audit_read_page", { uid = 1 }).is_error)
    local before = #assert(s:events(r.uid))
    local ok, result = pcall(r.invoke, r, "mcp_audit_read_page", { uid = 2 })
    assert.is_true(cluster("start"))
    assert.is_true(ok, tostring(result))
    assert.is_true(result.is_error)
    assert.is_true(result.stopped)
    assert.equal("audit_persistence_failed", r.error.kind)
    assert.equal("failed", r.status)
    assert.equal("store", r.error.store_error.kind)
    -- no gap: the stored trail is exactly what was recorded before, numbered densely
    local reopened <close> = assert(store_module.open(conninfo))
    assert.same(dense(before), sequences(reopened, r.uid))
    -- and the fence still marks the write whose outcome is unknown
    assert.same({ fence.entry("mcp_audit_read_page", { uid = 2 }, before + 1) },
      fence.entries(reopened:run(r.uid).fence))
  end)

  -- Wait until the backend `pid` is gone from the server (a terminated or orphaned backend ends on its own time).
  local function wait_gone(admin, pid)
    for _ = 1, 200 do
      local rows = admin:query("SELECT 1 AS one FROM pg_stat_activity WHERE pid = CAST($1 AS integer)", { pid })
      if rows and #rows == 0 then return end
      core.sleep(0.01)
    end
    error("backend " .. pid .. " did not end")
  end

  it("records the step over a new connection when the backend is terminated during a write's call", function()
    audit_server(s)
    local admin = assert(drivers.pg_connect(backends.conninfo()))
    local fake = Fake.new():will_handshake():will_return(text_answer("one"))
    fake:will(function(_, record)
      local pid = s.adapter:rows("SELECT pg_backend_pid() AS pid", {})[1].pid
      assert(admin:query("SELECT pg_terminate_backend(CAST($1 AS integer))", { pid }))
      wait_gone(admin, pid)
      return { status = 200, headers = { ["content-type"] = "application/json" }, duration_ms = 1,
        body = json.encode { jsonrpc = "2.0", id = record.id, result = text_answer("two") },
        streamed = false, stopped = false, truncated = false }
    end)
    local r = start_run(s, fake)
    assert.equal("one", r:invoke("mcp_audit_read_page", { uid = 1 }).text)
    -- the server sends 57P01 (admin shutdown) for the terminated session: a connection loss, handled as one
    local result = r:invoke("mcp_audit_read_page", { uid = 2 })
    assert.equal("two", result.text, tostring(r.error and r.error.message))
    assert.equal("running", r.status)
    assert.equal("completed", r:finish())
    admin:close()
    -- server-side executions against the audit: two and two, numbered densely, the fence clear
    local calls = 0
    for _, m in ipairs(fake:methods()) do if m == "tools/call" then calls = calls + 1 end end
    local steps = 0
    for _, e in ipairs(assert(s:events(r.uid))) do if e.kind == "tool" then steps = steps + 1 end end
    assert.equal(2, calls)
    assert.equal(2, steps)
    assert.same(dense(#assert(s:events(r.uid))), sequences(s, r.uid))
    assert.equal("", assert(s:run(r.uid)).fence)
  end)

  it("fails the run closed when the postmaster is killed (-9) during a write's call; the fence names the call",
    function()
      audit_server(s)
      -- the test cluster may run without durability (scripts/test turns synchronous_commit off): a crash
      -- would then lose commits PostgreSQL's default keeps, so this session commits durably, as by default
      assert(s.adapter:exec("SET synchronous_commit = on"))
      local data = s.adapter:rows("SELECT current_setting('data_directory') AS dir", {})[1].dir
      local postmaster = math.tointeger(tonumber(shell.read_all(data .. "/postmaster.pid"):match("^(%d+)")))
      assert.is_not_nil(postmaster)
      local backend = s.adapter:rows("SELECT pg_backend_pid() AS pid", {})[1].pid
      local fake = Fake.new():will_handshake():will_return(text_answer("one"))
      fake:will(function(_, record)
        assert(shell.run("kill -KILL " .. postmaster))
        -- the store's backend, orphaned, ends once it sees the postmaster gone (until then it would
        -- still serve the session); wait for that, so the step meets a database that is gone
        for _ = 1, 500 do
          if not shell.run("kill -0 " .. backend .. " 2>/dev/null") then break end
          core.sleep(0.01)
        end
        return { status = 200, headers = { ["content-type"] = "application/json" }, duration_ms = 1,
          body = json.encode { jsonrpc = "2.0", id = record.id, result = text_answer("two") },
          streamed = false, stopped = false, truncated = false }
      end)
      local r = start_run(s, fake)
      assert.equal("one", r:invoke("mcp_audit_read_page", { uid = 1 }).text)
      local ok, result = pcall(r.invoke, r, "mcp_audit_read_page", { uid = 2 })
      -- the orphaned backends end by themselves once they see the postmaster gone; then it starts again
      local started = false
      for _ = 1, 50 do
        if cluster("start") then started = true; break end
        core.sleep(0.2)
      end
      assert.is_true(started, "the cluster did not start again")
      assert.is_true(ok, tostring(result))
      assert.is_true(result.stopped)
      assert.equal("failed", r.status)
      assert.equal("audit_persistence_failed", r.error.kind)
      assert.equal("store", r.error.store_error.kind)
      -- two executions at the server; one step in the audit; the fence names the other, by sequence 2
      local calls = 0
      for _, m in ipairs(fake:methods()) do if m == "tools/call" then calls = calls + 1 end end
      assert.equal(2, calls)
      local reopened <close> = assert(store_module.open(conninfo))
      local steps = {}
      for _, e in ipairs(assert(reopened:events(r.uid))) do
        if e.kind == "tool" then steps[#steps + 1] = json.decode(e.payload) end
      end
      assert.equal(1, #steps)
      assert.same({ uid = 1 }, steps[1].toolArguments)
      local row = assert(reopened:run(r.uid))
      assert.equal("running", row.status) -- the row could not be told; the lease has not expired yet
      assert.same({ fence.entry("mcp_audit_read_page", { uid = 2 }, 2) }, fence.entries(row.fence))
      -- once it has, the run is marked failed and the operator sees the unrecorded call
      assert.same({ r.uid }, assert(reopened:recover_runs(row.lease_expires + 1)))
      local views = assert(require("mcpclient.agent.operator").runs(reopened, { open = true }))
      assert.equal("failed", views[1].status)
      assert.is_false(views[1].fence[1].recorded)
    end)

  it("reads again once over a new connection, and fails a write clearly without sending it again", function()
    local uid = servers.add(s, { identifier = "before" })
    local admin = assert(drivers.pg_connect(backends.conninfo()))
    local function cut()
      local pid = s.adapter:rows("SELECT pg_backend_pid() AS pid", {})[1].pid
      assert(admin:query("SELECT pg_terminate_backend(CAST($1 AS integer))", { pid }))
    end
    cut()
    assert.equal("before", assert(s:server(uid)).identifier) -- the read went through on a new connection
    cut()
    local ok, message, err = s:update_server(uid, { name = "after" })
    assert.is_nil(ok)
    assert.equal("store", err.kind)
    assert.equal("08006", err.sql_code)
    assert.matches("lost during a write, which may or may not have been applied and is not sent again", message,
      1, true)
    -- a liveness contact does not wait for a new connection either
    cut()
    assert.is_nil((s:update_server(uid, { name = "after" })))
    local contact, contact_message = s:record_contact(uid, 1700000000, 3)
    assert.is_nil(contact)
    assert.matches("a contact does not wait for a new one", contact_message, 1, true)
    assert.equal("Test server", assert(s:server(uid)).name) -- not applied, not repeated; the store works again
    admin:close()
  end)

  -- The adapter's connection answers its next `methods` with the SQLSTATE `code` (as a server that
  -- ended the session does), then is given up; the adapter's handling runs for real.
  local function ended_session(adapter, code, methods)
    local real_db, fired = adapter.db, { n = 0 }
    adapter.db = setmetatable({}, { __index = function(_, key)
      if methods[key] then
        return function()
          fired.n = fired.n + 1
          return nil, "terminating connection due to administrator command (" .. code .. ")", code
        end
      end
      return function(_, ...) return real_db[key](real_db, ...) end
    end })
    return fired
  end

  it("takes 57P01 and the other session-ending SQLSTATEs as a lost connection, like 08006", function()
    local uid = servers.add(s, { identifier = "kept" })
    for _, code in ipairs { "57P01", "57P02", "25P03", "08003" } do
      -- a read outside a transaction: made again once over a new connection
      local fired = ended_session(s.adapter, code, { query = true })
      assert.equal("kept", assert(s:server(uid)).identifier)
      assert.equal(1, fired.n)
      -- a write: not sent again, and said so, with the server's own code
      fired = ended_session(s.adapter, code, { execute = true })
      local ok, message, err = s:update_server(uid, { name = "after" })
      assert.is_nil(ok)
      assert.equal(1, fired.n)
      assert.equal(code, err.sql_code)
      assert.matches("lost during a write, which may or may not have been applied and is not sent again", message,
        1, true)
      assert.equal("Test server", assert(s:server(uid)).name) -- not applied
      -- a BEGIN (nothing done yet) is sent again over a new connection
      fired = ended_session(s.adapter, code, { exec = true })
      assert.is_true(s:transaction(function() return true end))
      assert.equal(1, fired.n)
    end
    -- a session the server really ends under a write: 57P01, or 08006 when the close is seen first
    local ok, message, code = s.adapter:exec("SELECT pg_terminate_backend(pg_backend_pid())", {})
    assert.is_nil(ok)
    assert.is_truthy(code == "57P01" or code == "08006", code)
    assert.matches("not sent again", message, 1, true)
    assert.equal("kept", assert(s:server(uid)).identifier)
    for _, lost in ipairs { "57P01", "57P02", "57P03", "57P05", "25P03", "08000", "08001", "08003", "08004",
      "08006", "08007", "08P01" } do
      assert.is_true(postgres.connection_lost(lost), lost)
    end
    for _, kept in ipairs { "57014", "23505", "40001", "25006", "XX000" } do
      assert.is_false(postgres.connection_lost(kept), kept)
    end
  end)

  it("bounds a statement that waits on a lock, a liveness contact to 200 ms", function()
    local uid = servers.add(s, { identifier = "locked" })
    local holder = assert(drivers.pg_connect(conninfo))
    assert(holder:exec("BEGIN; UPDATE mcp_server SET name = 'held' WHERE uid = " .. uid))
    local t0 = core.now()
    local ok, message, err = s:record_contact(uid, 1700000000, 3)
    local waited = core.now() - t0
    assert.is_nil(ok)
    assert.equal("store", err.kind)
    -- cancelled (57014), or, when even the cancel did not land in time, the connection given up (08006)
    assert.is_truthy(err.sql_code == "57014" or err.sql_code == "08006", err.sql_code)
    local contact_gave_up = err.sql_code == "08006"
    assert.matches("did not finish within", message)
    assert.is_true(waited < 0.2, string.format("a contact waited %.3f s", waited))
    -- any other statement is bounded by busy_timeout_ms
    local short <close> = assert(store_module.open(conninfo, { busy_timeout_ms = 300 }))
    t0 = core.now()
    ok, message, err = short:update_server(uid, { name = "mine" })
    waited = core.now() - t0
    assert.is_nil(ok)
    assert.equal("57014", err.sql_code)
    assert.matches("did not finish within 300 ms", message, 1, true)
    assert.is_true(waited >= 0.3 and waited < 0.6, string.format("a write waited %.3f s", waited))
    assert(holder:exec("ROLLBACK"))
    holder:close()
    -- the server holds the same bound (plus the grace), for when a cancel cannot reach it
    assert.same({ { statement_timeout = "1300ms", idle_in_transaction_session_timeout = "1min" } },
      short.adapter:rows("SELECT current_setting('statement_timeout') AS statement_timeout, "
        .. "current_setting('idle_in_transaction_session_timeout') AS idle_in_transaction_session_timeout", {}))
    -- the connections are still usable after the cancels; a connection the contact gave up is
    -- made again by the next statement that is not a contact (a contact never waits for one)
    if contact_gave_up then assert(s:server(uid)) end
    assert.is_true(s:record_contact(uid, 1700000000, 3))
    assert.is_true(short:update_server(uid, { name = "mine" }))
  end)

  it("takes the password from a credential reference, resolved at connect and never shown", function()
    local wrong = "Resolved-Wrong-5b1e"
    local none, message, err = store_module.open(conninfo, { password = "vault:pg",
      resolver = function(reference) return reference == "vault:pg" and wrong or nil end })
    assert.is_nil(none) -- the reference wins over PGPASSWORD in the environment
    assert.equal("08001", err.sql_code)
    assert.matches("password authentication failed", message, 1, true)
    assert.is_nil(message:find(wrong, 1, true))
    local right <close> = assert(store_module.open(conninfo, { password = "vault:pg",
      resolver = function() return os.getenv("PGPASSWORD") end }))
    assert.same({}, right:servers())
    none, message, err = store_module.open(conninfo, { password = "env:MCPCLIENT_NO_SUCH_VARIABLE" })
    assert.is_nil(none)
    assert.equal("store", err.kind)
    assert.matches("the password reference did not resolve", message, 1, true)
    assert.has_error(function() store_module.open(":memory:", { password = "env:X" }) end,
      "store.open: password is a PostgreSQL option")
  end)

  it("opens read-only: no migration, and every write refused", function()
    local ro <close> = assert(store_module.open(conninfo, { readonly = true }))
    assert.equal(1, #assert(ro:servers()) + 1)
    local ok, message, err = ro:add_server { identifier = "nope" }
    assert.is_nil(ok)
    assert.equal("25006", err.sql_code)
    assert.matches("read-only transaction", message, 1, true)
  end)

  it("says a password is wrong without ever showing it", function()
    local password = "Wrong-Password-7f3a9c"
    local host, port = os.getenv("PGHOST") or "localhost", os.getenv("PGPORT") or "5432"
    local uri = string.format("postgresql://%s:%s@%s:%s/%s", os.getenv("PGUSER") or "postgres", password, host, port,
      os.getenv("PGDATABASE") or "postgres")
    local none, message, err = store_module.open(uri)
    assert.is_nil(none)
    assert.equal("store", err.kind)
    assert.equal("08001", err.sql_code)
    assert.matches("password authentication failed", message, 1, true)
    assert.is_nil(message:find(password, 1, true))
    assert.equal("postgresql://" .. (os.getenv("PGUSER") or "postgres") .. ":***@" .. host .. ":" .. port .. "/"
      .. (os.getenv("PGDATABASE") or "postgres"), store_module.describe(uri))
    -- the operator command shows neither
    local errfile = os.tmpname()
    local pipe = assert(io.popen(string.format("%s lua5.4 bin/mcpclient --db %s servers 2>%s", ENV, quote(uri),
      quote(errfile))))
    pipe:read("a")
    local _, _, code = pipe:close()
    local stderr = shell.read_all(errfile)
    os.remove(errfile)
    assert.equal(1, code)
    assert.matches("password authentication failed", stderr, 1, true)
    assert.is_nil(stderr:find(password, 1, true))
    -- said once, with where the password goes
    assert.matches("Give the password in PGPASSWORD or ~/.pgpass", stderr, 1, true)
    assert.is_nil(stderr:find("could not open the database", 1, true), stderr)
    local _, said = stderr:gsub("password authentication failed", "")
    assert.equal(1, said, stderr)
  end)
end)
