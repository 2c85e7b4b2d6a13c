-- Storage faults over real SQLite files: a locked
-- database, a read-only file, a full database, a corrupt file and a missing
-- column. Each fault strikes while a tool call is on the wire (the scripted
-- server of spec/support/fake_server.lua injects it before it answers), so the
-- health write that follows the answer meets it. The call still returns its
-- answer, a warning is logged, the contact is simply not stored, and the
-- operator readout degrades with a clear error rather than raising. The audit
-- of an executed remote call is different: a step that cannot be recorded
-- fails the run, closed.
--
-- Tests run as root here, where chmod 0444 does not stop a write: the
-- read-only file is made with `chattr +i` (which binds root too; pending where
-- the filesystem or the container refuses it) and, as chmod 0444, in a child
-- process that runs as nobody (setpriv). The full disk is a file-size limit set
-- on a child process (prlimit --fsize) after its store is open.
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local drivers = require "mcpclient.db"
local mcp = require "mcpclient"
local operator = require "mcpclient.agent.operator"
local run = require "mcpclient.agent.run"
local store = require "mcpclient.agent.store"
local Fake = require "support.fake_server"
local fence = require "support.fence"

local json = core.json
local WARNING = 'An MCP liveness observation for "docs" could not be stored'

local support_shell = require "support.shell"
local quote, shell, new_dir = support_shell.quote, support_shell.run, support_shell.tmpdir
local ROOT = require("support.peers").root

local function is_root()
  return support_shell.read_all("/proc/self/status"):match("\nUid:%s*(%d+)") == "0"
end

-- A fresh directory per case (new_dir); removed (immutable flags cleared first) after it.

local function remove_dir(dir)
  shell("chattr -R -i " .. quote(dir))
  shell("rm -rf " .. quote(dir))
end

-- Overwrite `count` bytes of the file at `offset` with garbage.
local function scribble(path, offset, count)
  local f = assert(io.open(path, "r+b"))
  f:seek("set", offset)
  f:write(string.rep("\xde\xad\xbe\xef", count // 4))
  f:close()
end

local function file_size(path)
  local f = assert(io.open(path, "rb"))
  local size = f:seek("end")
  f:close()
  return size
end

--[[
Fill the store's database to its brim: max_page_count lowered to the pages
it has (on the store's own connection: the limit belongs to one connection),
then rows of shrinking size into the append-only tables until even the
smallest finds no room.
]]
local function fill_to_the_brim(target)
  assert(target.adapter:exec("PRAGMA max_page_count = 1"))
  local refused
  for _, size in ipairs { 4000, 1000, 200, 20, 1 } do
    for _ = 1, 10000 do
      local ok, message = target:insert_governance_event { detail = string.rep("x", size) }
      if ok then ok, message = target:append_event(999999, { kind = "filler", payload = string.rep("y", size) }) end
      if not ok then
        refused = message
        break
      end
    end
  end
  assert.truthy(tostring(refused):find("database or disk is full", 1, true), refused)
end

-- A store at `path` holding the server "docs"; returns it and the server's uid.
local function seeded(path, options)
  local s = assert(store.open(path, options))
  if options and options.migrate_to then
    -- written as that version wrote it (this one's columns are named as migration 10 names them)
    return s, assert(s.adapter:insert("INSERT INTO mcp_server (identifier, name, url) VALUES (?, ?, ?)",
      { "docs", "Docs", "https://mcp.example.com/rpc" }))
  end
  local uid = assert(s:add_server { identifier = "docs", name = "Docs", url = "https://mcp.example.com/rpc" })
  return s, uid
end

-- The contact as a fresh connection to the file reads it.
local function stored_contact(path, uid)
  local db = assert(drivers.sqlite_open(path, { readonly = true }))
  local rows = db:query("SELECT last_contact, last_latency_ms FROM mcp_server WHERE uid = ?", { uid })
  db:close()
  return rows and rows[1] and rows[1].last_contact, rows and rows[1] and rows[1].last_latency_ms
end

-- A tools/call answer, produced after `fault` ran: the fault strikes while the call is on the wire.
local function answer_after(fault, text)
  return function(_, record)
    fault()
    return {
      status = 200, headers = { ["content-type"] = "application/json" }, duration_ms = 7,
      body = json.encode { jsonrpc = "2.0", id = record.id,
        result = { content = json.array { { type = "text", text = text or "still answered" } } } },
      streamed = false, stopped = false, truncated = false,
    }
  end
end

--[[
Call a tool on "docs" over the fake server with the store's health recorder,
the fault injected during the call. Returns { outcome, message, client
warnings, store warnings (level, text), elapsed seconds }.
]]
local function call_during(s, uid, fault)
  local client_warnings, store_warnings = {}, {}
  local fake = Fake.new():will_handshake():will(answer_after(fault or function() end))
  local conn <close> = mcp.connect {
    url = "https://mcp.example.com/rpc", identifier = "docs", transport = fake, clock = fake.clock,
    health = s:health_recorder(uid, function(level, text) store_warnings[#store_warnings + 1] = { level, text } end),
    log = function(level, text) client_warnings[#client_warnings + 1] = { level, text } end,
  }
  local t0 = core.now()
  local outcome, message = conn:call_tool("read_page", { uid = 3 })
  return { outcome = outcome, message = message, warnings = client_warnings, store_warnings = store_warnings,
    elapsed = core.now() - t0 }
end

-- The call answered and one warning names the server and the store's reason.
local function assert_degraded(r, reason)
  assert.is_table(r.outcome, "the call did not return its answer: " .. tostring(r.message))
  assert.equal("still answered", r.outcome.text)
  assert.is_false(r.outcome.is_error)
  assert.equal(1, #r.warnings, "expected one client warning")
  assert.equal("warning", r.warnings[1][1])
  assert.truthy(r.warnings[1][2]:find(WARNING, 1, true), r.warnings[1][2])
  assert.truthy(r.warnings[1][2]:find(reason, 1, true), "expected '" .. reason .. "' in: " .. r.warnings[1][2])
  assert.equal(1, #r.store_warnings)
  assert.equal("warning", r.store_warnings[1][1])
end

-- The readout never raises: cards, or nil + a "store" failure that says what it could not do.
local function readout_of(s)
  local ok, cards, message, err = pcall(operator.readout, s)
  assert.is_true(ok, "the readout raised: " .. tostring(cards))
  if cards then return cards end
  assert.is_string(message)
  assert.truthy(message:find("^The store could not "), message)
  assert.equal("store", err.kind)
  return nil, message
end

describe("store faults during a tool call (health)", function()
  local dir, path, s, uid

  before_each(function()
    dir = new_dir()
    path = dir .. "/agent.db"
  end)

  after_each(function()
    if s then s:close() end
    s = nil
    remove_dir(dir)
  end)

  describe("a locked database", function()
    it("another connection holds BEGIN IMMEDIATE: answer, warning, nothing stored; the readout still reads", function()
      s, uid = seeded(path, { busy_timeout_ms = 50 })
      local holder = assert(drivers.sqlite_open(path))
      local r = call_during(s, uid, function() assert(holder:exec("BEGIN IMMEDIATE")) end)
      assert_degraded(r, "database is locked")
      assert.truthy(r.elapsed < 1, string.format("the call took %.2f s", r.elapsed))
      -- WAL: readers are not blocked by a writer
      local cards = assert(readout_of(s))
      assert.equal(operator.NEVER_REACHED, cards[1].contact)
      assert(holder:exec("ROLLBACK"))
      holder:close()
      assert.equal(0, stored_contact(path, uid))
    end)

    it("a contact waits at most 200 ms for the lock, even under the store's default 5 s busy timeout", function()
      s, uid = seeded(path)
      local holder = assert(drivers.sqlite_open(path))
      local r = call_during(s, uid, function() assert(holder:exec("BEGIN IMMEDIATE")) end)
      assert_degraded(r, "database is locked")
      -- bounds are loose on purpose (a busy machine); what matters is 0.2 s, not 5 s
      assert.truthy(r.elapsed >= 0.19 and r.elapsed < 2, string.format("the call took %.2f s", r.elapsed))
      holder:exec("ROLLBACK")
      holder:close()
    end)

    it("an exclusive lock on a rollback-journal store: the readout fails clearly too", function()
      s, uid = seeded(path, { busy_timeout_ms = 50, journal_mode = "delete" })
      local holder = assert(drivers.sqlite_open(path))
      holder:busy_timeout(1000)
      local r = call_during(s, uid, function() assert(holder:exec("BEGIN EXCLUSIVE")) end)
      assert_degraded(r, "database is locked")
      local cards, message = readout_of(s)
      assert.is_nil(cards)
      assert.truthy(message:find("database is locked", 1, true), message)
      assert(holder:exec("ROLLBACK"))
      holder:close()
      assert.equal(0, stored_contact(path, uid))
      assert(readout_of(s))
    end)
  end)

  describe("a read-only database", function()
    it("opened with { readonly = true }: answer, warning, nothing stored; the readout reads", function()
      local writer
      writer, uid = seeded(path)
      writer:close()
      s = assert(store.open(path, { readonly = true }))
      local r = call_during(s, uid)
      assert_degraded(r, "attempt to write a readonly database")
      local cards = assert(readout_of(s))
      assert.equal(operator.NEVER_REACHED, cards[1].contact)
      assert.equal(0, stored_contact(path, uid))
    end)

    it("made immutable (chattr +i, which binds root too) while the store is open", function()
      s, uid = seeded(path)
      assert(s.adapter:exec("PRAGMA wal_checkpoint(TRUNCATE)"))
      local files = quote(path) .. " " .. quote(path .. "-wal") .. " " .. quote(path .. "-shm")
      if not shell("chattr +i " .. files) then
        pending("chattr +i is refused here (filesystem or missing CAP_LINUX_IMMUTABLE)")
        return
      end
      local r = call_during(s, uid)
      assert_degraded(r, "disk I/O error")
      assert(readout_of(s))
      s:close()
      s = nil
      -- Opened again while immutable: SQLite falls back to reading, and says so on a write.
      local again = assert(store.open(path))
      r = call_during(again, uid)
      assert_degraded(r, "attempt to write a readonly database")
      assert(readout_of(again))
      again:close()
      assert(shell("chattr -i " .. files))
      assert.equal(0, stored_contact(path, uid))
    end)
  end)

  describe("a full database", function()
    -- max_page_count belongs to one connection: a limit set on a raw
    -- connection binds that connection only, so the limit is set on the
    -- store's own connection (fill_to_the_brim).
    it("a limit on another connection does not bind the store's", function()
      s, uid = seeded(path)
      local raw = assert(drivers.sqlite_open(path))
      assert(raw:exec("PRAGMA max_page_count = 1"))
      -- more than the free pages a migration that rebuilt a table left behind could hold
      local _, message = raw:execute("INSERT INTO governance_event (detail) VALUES (?)", { string.rep("x", 200000) })
      assert.truthy(tostring(message):find("full", 1, true), message)
      raw:close()
      assert(s:insert_governance_event { detail = string.rep("x", 5000) })
    end)

    it("at max_page_count: the answer returns, and the contact (an update in place) is still stored", function()
      s, uid = seeded(path)
      local r = call_during(s, uid, function() fill_to_the_brim(s) end)
      assert.is_table(r.outcome, r.message)
      assert.equal("still answered", r.outcome.text)
      -- An UPDATE of two integers in a row that fits its page needs no new page.
      assert.same({}, r.warnings)
      assert.truthy(stored_contact(path, uid) > 0)
      assert(readout_of(s))
      -- while anything that needs a page is refused
      local ok, message = s:insert_governance_event { detail = string.rep("y", 5000) }
      assert.is_nil(ok)
      assert.truthy(message:find("database or disk is full", 1, true), message)
    end)
  end)

  describe("a corrupt file", function()
    -- The live connection's page cache would hide the damage: it is evicted
    -- (as memory pressure would) after the garbage lands.
    local function corrupt(target, offset, count)
      return function()
        scribble(path, offset, count or (file_size(path) - offset))
        assert(target.adapter:exec("PRAGMA shrink_memory"))
      end
    end

    it("garbage over every page but the first (WAL): answer, warning; the readout fails clearly", function()
      s, uid = seeded(path)
      assert(s.adapter:exec("PRAGMA wal_checkpoint(TRUNCATE)"))
      local r = call_during(s, uid, corrupt(s, 4096))
      assert_degraded(r, "database disk image is malformed")
      local cards, message = readout_of(s)
      assert.is_nil(cards)
      assert.truthy(message:find("malformed", 1, true), message)
    end)

    it("garbage over the header (rollback journal): answer, warning; the readout fails clearly", function()
      s, uid = seeded(path, { journal_mode = "delete" })
      local r = call_during(s, uid, corrupt(s, 0, 100))
      assert_degraded(r, "file is not a database")
      local cards, message = readout_of(s)
      assert.is_nil(cards)
      assert.truthy(message:find("file is not a database", 1, true), message)
    end)

    it("already corrupt when opened: open fails with nil, message, err (no raise)", function()
      local writer = seeded(path)
      writer:close()
      scribble(path, 0, 100)
      local ok, opened, message, err = pcall(store.open, path)
      assert.is_true(ok, tostring(opened))
      assert.is_nil(opened)
      assert.truthy(message:find("file is not a database", 1, true), message)
      assert.equal("store", err.kind)
    end)
  end)

  describe("a missing column", function()
    it("a store from before the liveness migration: answer, warning, nothing stored; the readout reads", function()
      s, uid = seeded(path, { migrate_to = 1 })
      local r = call_during(s, uid)
      assert_degraded(r, "no such column: last_contact")
      local cards = assert(readout_of(s))
      assert.equal(operator.NEVER_REACHED, cards[1].contact)
      assert.is_true(cards[1].never_reached)
    end)
  end)
end)

---------------------------------------------------------------------------
-- Faults a child process meets (an unprivileged user; a file-size limit)
---------------------------------------------------------------------------

-- Runs in a child lua5.4: open the store, optionally lower the file-size limit
-- of its own process, call over the fake server with the store's recorder,
-- read the readout; print what happened as one line of JSON.
local CHILD = [[
local root, path, fault = arg[1], arg[2], arg[3]
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/spec/?.lua;" .. package.path
package.cpath = root .. "/build/?.so;" .. package.cpath
local core = require "mcpclient.core"
local mcp = require "mcpclient"
local store = require "mcpclient.agent.store"
local operator = require "mcpclient.agent.operator"
local Fake = require "support.fake_server"
local out = { warnings = core.json.array {} }
local s, message = store.open(path, { busy_timeout_ms = 50 })
if not s then
  out.open = message
else
  if fault == "fsize" then
    local pid = io.open("/proc/self/stat"):read("l"):match("^(%d+)")
    out.limited = os.execute("prlimit --pid " .. pid .. " --fsize=2048") == true
  end
  local uid = s:servers()[1].uid
  local fake = Fake.new():will_handshake():will_return { content = { { type = "text", text = "still answered" } } }
  local conn = mcp.connect { url = "https://mcp.example.com/rpc", identifier = "docs", transport = fake,
    clock = fake.clock, health = s:health_recorder(uid),
    log = function(_, text) out.warnings[#out.warnings + 1] = text end }
  local answer, why = conn:call_tool("read_page", {})
  out.answer = answer and answer.text or why
  conn:close()
  local ok, cards, m = pcall(operator.readout, s)
  out.readout_raised = not ok
  out.readout = cards and cards[1].contact or tostring(m)
  s:close()
end
io.write(core.json.encode(out), "\n")
]]

describe("store faults in a child process (health)", function()
  local dir, path, child

  before_each(function()
    dir = new_dir()
    path = dir .. "/agent.db"
    child = dir .. "/child.lua"
    local f = assert(io.open(child, "w"))
    f:write(CHILD)
    f:close()
    local writer = seeded(path)
    writer:close()
  end)

  after_each(function() remove_dir(dir) end)

  local function run_child(prefix, fault, root)
    local pipe = assert(io.popen(string.format("%s lua5.4 %s %s %s %s 2>&1", prefix, quote(child),
      quote(root or ROOT), quote(path), fault or "")))
    local text = pipe:read("a")
    pipe:close()
    local ok, result = pcall(json.decode, text)
    assert(ok and type(result) == "table", "the child printed: " .. text)
    return result
  end

  -- What the child saw of the fault: the answer, one warning naming it, a readout that degrades
  -- rather than raises, and no contact stored.
  local function assert_child_degraded(result, fault_message)
    assert.equal("still answered", result.answer)
    assert.equal(1, #result.warnings)
    assert.truthy(result.warnings[1]:find(WARNING, 1, true), result.warnings[1])
    assert.truthy(result.warnings[1]:find(fault_message, 1, true), result.warnings[1])
    assert.is_false(result.readout_raised)
    assert.equal(operator.NEVER_REACHED, result.readout)
    assert.equal(0, stored_contact(path, 1))
  end

  it("a database file chmod 0444, written by an unprivileged user: answer, warning, nothing stored", function()
    assert(shell("chmod 0444 " .. quote(path)))
    local prefix, root = "", nil
    if is_root() then
      -- root ignores the mode: run the agent as nobody, in a directory it may create the WAL in,
      -- with its own copy of the library (the checkout may sit where nobody cannot read)
      root = dir .. "/tree"
      local from, to = quote(ROOT), quote(root)
      for _, command in ipairs {
        "mkdir -p " .. to .. "/build/mcpclient " .. to .. "/spec",
        "cp -r " .. from .. "/lua " .. to .. "/",
        "cp -r " .. from .. "/spec/support " .. to .. "/spec/",
        "cp " .. from .. "/build/mcpclient/core.so " .. from .. "/build/mcpclient/net.so "
          .. from .. "/build/mcpclient/db.so " .. to .. "/build/mcpclient/",
        "chmod -R a+rX " .. to,
      } do assert(shell(command), command) end
      assert(shell("chmod 1777 " .. quote(dir)) and shell("chmod 0644 " .. quote(child)))
      prefix = "setpriv --reuid=65534 --regid=65534 --clear-groups"
    end
    local result = run_child(prefix, nil, root)
    assert.is_nil(result.open)
    assert_child_degraded(result, "attempt to write a readonly database")
  end)

  it("a file-size limit (the disk is full for this process): answer, warning, nothing stored", function()
    -- SIGXFSZ ignored, so a write past the limit fails (EFBIG) instead of killing the child.
    local result = run_child("trap '' XFSZ;", "fsize")
    assert.is_nil(result.open)
    assert.is_true(result.limited)
    assert_child_degraded(result, "disk I/O error")
  end)
end)

---------------------------------------------------------------------------
-- The audit: a step that cannot be stored fails the run closed
---------------------------------------------------------------------------

describe("store faults during a run's remote call (the fail-closed audit)", function()
  local ADMIN = { name = "ops", uid = 7, admin = true }
  local CONFIG = { identifier = "cfg-local", provider = "p-local", model = "m-1" }
  local PROVIDERS = { ["p-local"] = { zone = "local" } }
  local dir, path, s

  before_each(function()
    dir = new_dir()
    path = dir .. "/agent.db"
    s = assert(store.open(path, { busy_timeout_ms = 50 }))
    local uid = assert(s:add_server { identifier = "audit", name = "Audit", url = "https://mcp.example.com/rpc",
      data_class = "publicContent", requires_approval = "0", enabled = true })
    local fake = Fake.new():will_handshake():will_return { tools = json.array {
      { name = "write_page", description = "Writes.", inputSchema = { type = "object" } },
    } }
    local report = catalogue.import(s, assert(s:server(uid)), { transport = fake, clock = fake.clock, now = 1 })
    assert.is_false(report.refused)
    assert(s:set_tool_enabled("mcp_audit_write_page", true))
  end)

  after_each(function()
    if s then s:close() end
    s = nil
    remove_dir(dir)
  end)

  -- A run whose remote call meets `fault` while it is on the wire.
  local function invoke_during(fault)
    local logged = {}
    local fake = Fake.new():will_handshake():will(answer_after(fault, "written"))
    local r = assert(run.start(s, {
      user = ADMIN, configuration = CONFIG, providers = PROVIDERS,
      provider = catalogue.provider(s, { transport = fake, clock = fake.clock, log = function() end }),
      log = function(level, text) logged[#logged + 1] = { level, text } end,
    }))
    assert.is_true(r.persisted)
    local result = r:invoke("mcp_audit_write_page", { title = "x" })
    local calls = 0
    for _, m in ipairs(fake:methods()) do if m == "tools/call" then calls = calls + 1 end end
    return r, result, calls, logged
  end

  local function assert_failed_closed(r, result, calls, logged)
    assert.equal(1, calls, "the remote call went out exactly once")
    assert.is_true(result.is_error)
    assert.is_true(result.stopped)
    assert.truthy(result.text:find("could not be recorded", 1, true), result.text)
    assert.equal("failed", r.status)
    assert.equal("audit_persistence_failed", r.error.kind)
    assert.equal(1785000001, r.error.run_code)
    local warned = false
    for _, entry in ipairs(logged) do
      if entry[1] == "warning" and entry[2]:find("could not be recorded", 1, true) then warned = true end
    end
    assert.is_true(warned, "no warning about the lost step")
    -- the next call of the run is refused without reaching anything
    local again = r:invoke("mcp_audit_write_page", {})
    assert.is_true(again.stopped)
    assert.equal("failed", r:finish())
  end

  -- The row as a fresh connection reads it once the fault is gone: never completed,
  -- and the fence still says a write may have happened.
  local function assert_row_not_completed(r)
    local db = assert(drivers.sqlite_open(path, { readonly = true }))
    local rows = assert(db:query("SELECT status, fence FROM agent_run WHERE uid = ?", { r.uid }))
    local events = assert(db:query("SELECT COUNT(*) AS n FROM agent_run_event WHERE run = ? AND kind = 'tool'",
      { r.uid }))
    db:close()
    assert.are_not.equal("completed", rows[1].status)
    assert.same({ fence.entry("mcp_audit_write_page", { title = "x" }, 1) }, fence.entries(rows[1].fence))
    assert.equal(0, events[1].n)
  end

  it("a locked database when the step is written: the run fails closed", function()
    local holder = assert(drivers.sqlite_open(path))
    local r, result, calls, logged = invoke_during(function() assert(holder:exec("BEGIN IMMEDIATE")) end)
    assert_failed_closed(r, result, calls, logged)
    assert(holder:exec("ROLLBACK"))
    holder:close()
    assert_row_not_completed(r)
  end)

  it("a full database when the step is written: the run fails closed", function()
    local r, result, calls, logged = invoke_during(function() fill_to_the_brim(s) end)
    assert_failed_closed(r, result, calls, logged)
    assert_row_not_completed(r)
  end)

  it("a store that turned read-only when the step is written: the run fails closed", function()
    local r, result, calls, logged = invoke_during(function() assert(s.adapter:exec("PRAGMA query_only = 1")) end)
    assert_failed_closed(r, result, calls, logged)
    assert(s.adapter:exec("PRAGMA query_only = 0"))
    assert_row_not_completed(r)
  end)

  it("a corrupt file when the step is written: the run fails closed", function()
    local r, result, calls, logged = invoke_during(function()
      assert(s.adapter:exec("PRAGMA wal_checkpoint(TRUNCATE)"))
      scribble(path, 4096, file_size(path) - 4096)
      assert(s.adapter:exec("PRAGMA shrink_memory"))
    end)
    assert_failed_closed(r, result, calls, logged)
  end)
end)
