-- mcpclient.agent.store over real SQLite files: servers, tools, health, runs, events, governance.
local core = require "mcpclient.core"
local drivers = require "mcpclient.db"
local store = require "mcpclient.agent.store"
local sqlite_adapter = require "mcpclient.agent.store.sqlite"
local backends = require "support.backends"
local servers = require "support.servers"

-- A fresh database for one test: an SQLite file, or a schema of its own on
-- PostgreSQL when the run is against it.
local function tmpdb()
  if backends.postgres then return backends.new_schema(), function() end end
  local path = os.tmpname()
  return path, function()
    for _, suffix in ipairs({ "", "-journal", "-wal", "-shm" }) do os.remove(path .. suffix) end
  end
end

-- A raw second connection, as another process would hold one (the store's
-- own SQL, `?` placeholders, on either backend).
local function raw(path)
  if backends.postgres then
    local adapter = assert(require("mcpclient.agent.store.postgres").open(path))
    return { query = function(_, sql, params) return adapter:rows(sql, params or {}) end,
      exec = function(_, sql) return adapter:exec(sql) end,
      execute = function(_, sql, params) return adapter:exec(sql, params or {}) end,
      close = function() adapter:close() end }
  end
  local db = assert(drivers.sqlite_open(path))
  db:busy_timeout(2000)
  return db
end

-- A test of SQLite itself (its files, its lock, its result codes).
local function sqlite_it(name, fn)
  if backends.postgres then return pending(name .. " (SQLite only) #sqlite") end
  return it(name, fn)
end

local function tool(name, extra)
  local t = {
    tool_name = name, remote_name = name:gsub("^mcp_%w+_", ""), description = "about " .. name,
    input_schema = '{"type":"object"}', remote_annotations = "",
  }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local function names(rows)
  local out = {}
  for i, row in ipairs(rows) do out[i] = row.tool_name or row.identifier end
  return out
end

describe("mcpclient.agent.store", function()
  local path, cleanup, s

  before_each(function()
    path, cleanup = tmpdb()
  end)

  after_each(function()
    if s then s:close() end
    s = nil
    cleanup()
  end)

  describe("opening and migrations", function()
    it("applies every migration on open, once, and reopens idempotently", function()
      s = assert(store.open(path))
      assert.equal(store.SCHEMA_VERSION, s:schema_version())
      assert.equal(#require("mcpclient.agent.store.migrations"), store.SCHEMA_VERSION)
      local uid = assert(s:add_server { identifier = "docs", name = "Docs" })
      s:close()
      s = assert(store.open(path))
      assert.equal(store.SCHEMA_VERSION, s:schema_version())
      assert.equal("docs", s:server(uid).identifier)
      local db = raw(path)
      local versions = {}
      for v = 1, store.SCHEMA_VERSION do versions[v] = { version = v } end
      assert.same(versions, db:query("SELECT version FROM schema_version ORDER BY version"))
      local tables = {}
      local catalogue = backends.postgres
        and "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() "
          .. "ORDER BY table_name"
        or "SELECT name FROM sqlite_master WHERE type = 'table' AND name <> 'sqlite_sequence' ORDER BY name"
      for _, row in ipairs(db:query(catalogue)) do
        tables[#tables + 1] = row.name
      end
      assert.same({ "agent_run", "agent_run_event", "agent_task", "governance_event", "mcp_oauth_grant", "mcp_offer",
        "mcp_server", "mcp_tool", "schema_version", "tool_group_state", "tool_state" }, tables)
      db:close()
    end)

    it("opens a store from before a migration with migrate_to, and migrates it later", function()
      s = assert(store.open(path, { migrate_to = 1 }))
      assert.equal(1, s:schema_version())
      -- written as that version wrote it (this one's columns are named as migration 10 names them)
      local uid = assert(s.adapter:insert("INSERT INTO mcp_server (identifier, name) VALUES (?, ?)", { "old", "Old" }))
      -- reads degrade: the missing liveness columns hydrate as 0
      local row = s:server(uid)
      assert.equal(0, row.last_contact)
      assert.equal(0, row.last_latency_ms)
      s:close()
      s = assert(store.open(path))
      assert.equal(store.SCHEMA_VERSION, s:schema_version())
      assert.is_true(s:record_contact(uid, 1700000000, 12))
      assert.equal(12, s:server(uid).last_latency_ms)
    end)

    it("refuses a migrate_to out of range and unknown options", function()
      assert.has_error(function() store.open(path, { migrate_to = store.SCHEMA_VERSION + 1 }) end)
      assert.has_error(function() store.open(path, { busy_timeout = 5 }) end,
        'store.open: unknown option "busy_timeout" (did you mean "busy_timeout_ms"?)')
    end)

    it("refuses at once a path that is not a regular file, and says what it is", function()
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir " .. dir .. " && mkfifo " .. dir .. "/fifo.db"))
      for location, reason in pairs {
        [dir .. "/fifo.db"] = "the database path names a FIFO (named pipe), not a regular file",
        [dir] = "the database path names a directory, not a regular file",
        ["/dev/null"] = "the database path names a character device, not a regular file",
      } do
        local t0 = os.time()
        local none, message, err = store.open(location)
        assert.is_true(os.time() - t0 < 3)
        assert.is_nil(none)
        assert.equal("The store could not open the database: " .. reason .. " (SQLITE_CANTOPEN)", message)
        assert.equal("SQLITE_CANTOPEN", err.sql_code)
        local state, why = store.file_status(location)
        assert.is_nil(state)
        assert.equal(message, why)
      end
      assert.equal("missing", store.file_status(dir .. "/new.db"))
      assert.equal("database", store.file_status("postgresql://db.internal/mcp"))
      os.execute("rm -rf " .. dir)
    end)

    it("fails to open with nil, message, err", function()
      local none, message, err = store.open("/nonexistent-dir/x.db")
      assert.is_nil(none)
      assert.equal("The store could not open the database: the database file does not exist and cannot be created: "
        .. "its directory is missing (No such file or directory) (SQLITE_CANTOPEN)", message)
      assert.equal(message, err.message)
      assert.equal("open the database", err.operation)
      assert.equal("store", err.kind)
      assert.equal("SQLITE_CANTOPEN", err.sql_code)
      assert.is_nil(err.code) -- the SQL code has its own field
    end)

    it("describes a location without its password", function()
      assert.equal("postgresql://ops:***@db.internal:5432/mcp",
        store.describe("postgresql://ops:s3cret@db.internal:5432/mcp"))
      assert.equal("postgres://db/mcp?sslmode=require&password=***",
        store.describe("postgres://db/mcp?sslmode=require&password=s3cret"))
      assert.equal("host=db password=*** user=ops", store.describe("host=db password=s3cret user=ops"))
      assert.equal("host=db password = *** user=ops", store.describe("host=db password = 'two words' user=ops"))
      assert.equal("/var/lib/mcp/password=x.db", store.describe("/var/lib/mcp/password=x.db"))
    end)

    it("works on :memory:", function()
      s = assert(store.open(":memory:"))
      assert.equal(store.SCHEMA_VERSION, s:schema_version())
      assert(s:add_server { identifier = "m" })
      assert.equal(1, #s:servers())
    end)

    it("closes idempotently, also with <close>; a closed store raises", function()
      local handle
      do
        local scoped <close> = assert(store.open(path))
        handle = scoped
        assert.same({}, scoped:servers())
      end
      handle:close()
      assert.has_error(function() handle:servers() end, "attempt to use a closed store")
    end)
  end)

  describe("servers", function()
    before_each(function()
      s = assert(store.open(path))
    end)

    it("adds with the reference defaults", function()
      local before = os.time()
      local uid = assert(s:add_server { identifier = "docs", name = "Docs", url = "https://docs.example/mcp" })
      assert.equal("integer", math.type(uid))
      local row = s:server(uid)
      assert.is_true(row.created_at >= before and row.updated_at == row.created_at)
      row.created_at, row.updated_at = nil, nil
      assert.same({
        uid = uid, pid = 0, identifier = "docs", name = "Docs", description = "", url = "https://docs.example/mcp",
        auth_credential = "", auth_placement = "bearer", auth_header_name = "", data_class = "",
        requires_approval = "1", enabled = false, import_status = "never_imported", import_error = "",
        last_imported = 0, tool_count = 0, last_contact = 0, last_latency_ms = 0, deleted = false,
        catalogue_stale = false, reimport = "manual", reimport_pending = 0,
        env = {}, cwd = "",
        proxy = "", ca_file = "", client_cert = "", client_key = "", headers = {}, roots = {},
      }, row)
    end)

    it("keeps requires_approval as its string form", function()
      local a = s:add_server { identifier = "a", requires_approval = "0" }
      local b = s:add_server { identifier = "b", requires_approval = false }
      local c = s:add_server { identifier = "c", requires_approval = "maybe" }
      local d = s:add_server { identifier = "d", requires_approval = 0 }
      assert.equal("0", s:server(a).requires_approval)
      assert.equal("0", s:server(b).requires_approval)
      assert.equal("maybe", s:server(c).requires_approval)
      assert.equal("0", s:server(d).requires_approval)
    end)

    it("updates editable fields only and stamps updated_at", function()
      local uid = s:add_server { identifier = "docs", name = "Docs" }
      local db = raw(path)
      db:execute("UPDATE mcp_server SET updated_at = 5 WHERE uid = ?", { uid })
      assert.is_true(s:update_server(uid, { name = "Renamed", enabled = true, auth_credential = "env:DOCS_TOKEN",
        auth_placement = "header", auth_header_name = "X-Key", data_class = "publicContent" }))
      local row = s:server(uid)
      assert.equal("Renamed", row.name)
      assert.is_true(row.enabled)
      assert.equal("env:DOCS_TOKEN", row.auth_credential)
      assert.equal("header", row.auth_placement)
      assert.equal("X-Key", row.auth_header_name)
      assert.equal("publicContent", row.data_class)
      assert.is_true(row.updated_at >= os.time() - 5)
      assert.has_error(function() s:update_server(uid, { import_status = "ok" }) end,
        'update_server: unknown or read-only field "import_status"')
      assert.has_error(function() s:update_server(uid, { name = 3 }) end, "name must be a string")
      assert.has_error(function() s:update_server("1", { name = "x" }) end)
      db:close()
    end)

    it("soft-deletes: the row stays, marked deleted, and disappears from every read", function()
      local uid = s:add_server { identifier = "gone", enabled = true }
      assert.is_true(s:remove_server(uid))
      assert.is_nil(s:server(uid))
      assert.same({}, s:servers())
      assert.same({}, s:enabled_servers())
      local db = raw(path)
      assert.same({ { deleted = 1, identifier = "gone" } },
        db:query("SELECT deleted, identifier FROM mcp_server WHERE uid = ?", { uid }))
      db:close()
      assert.is_nil(s:server(999))
    end)

    it("lists all live servers and the enabled ones, by identifier", function()
      s:add_server { identifier = "zeta", enabled = true }
      s:add_server { identifier = "alpha", enabled = false }
      s:add_server { identifier = "mid", enabled = true }
      local gone = s:add_server { identifier = "beta", enabled = true }
      s:remove_server(gone)
      assert.same({ "alpha", "mid", "zeta" }, names(s:servers()))
      assert.same({ "mid", "zeta" }, names(s:enabled_servers()))
    end)

    it("record_contact touches only last_contact and last_latency_ms", function()
      local uid = s:add_server { identifier = "docs" }
      assert(s:record_import(uid, { status = "error", error = "boom", tool_count = 4, at = 100 }))
      local before = s:server(uid)
      assert.is_true(s:record_contact(uid, 1700000123, 42))
      local after = s:server(uid)
      assert.equal(1700000123, after.last_contact)
      assert.equal(42, after.last_latency_ms)
      after.last_contact, after.last_latency_ms = 0, 0
      assert.same(before, after)
      -- latency arrives rounded once, as whole milliseconds; anything else is misuse
      assert.has_error(function() s:record_contact(uid, 1700000124, 42.4) end,
        "latency_ms must be a non-negative integer")
      assert.has_error(function() s:record_contact(uid, 1700000124, -3) end)
      assert.equal(42, s:server(uid).last_latency_ms)
    end)

    it("record_import stamps the outcome with one time", function()
      local uid = s:add_server { identifier = "docs" }
      assert.is_true(s:record_import(uid, { status = "partial", error = "a\nb", tool_count = 7, at = 1234 }))
      local row = s:server(uid)
      assert.equal("partial", row.import_status)
      assert.equal("a\nb", row.import_error)
      assert.equal(7, row.tool_count)
      assert.equal(1234, row.last_imported)
      assert.equal(1234, row.updated_at)
      assert.has_error(function() s:record_import(uid, { status = "importing" }) end)
    end)

    it("stores text with NUL bytes exactly", function()
      local text = "line\0hidden\0"
      local uid = s:add_server { identifier = "nul", description = text }
      assert.equal(text, s:server(uid).description)
    end)
  end)

  describe("tools and reconcile", function()
    local server, other

    before_each(function()
      s = assert(store.open(path))
      server = s:server(s:add_server { identifier = "docs" })
      other = s:server(s:add_server { identifier = "other" })
    end)

    it("accepts, updates in place, orphans, revives, and never touches other servers", function()
      assert.equal(0, s:reconcile(other, { tool("mcp_other_x") }, 100))
      assert.equal(0, s:reconcile(server, { tool("mcp_docs_a"), tool("mcp_docs_b"), tool("mcp_docs_c") }, 100))
      local first = {}
      for _, row in ipairs(s:tools_of(server.uid)) do first[row.tool_name] = row end
      assert.equal(100, first.mcp_docs_a.created_at)

      -- b is updated in place, c disappears, d is new
      local orphaned = s:reconcile(server, { tool("mcp_docs_a"), tool("mcp_docs_b", { description = "new" }),
        tool("mcp_docs_d") }, 200)
      assert.equal(1, orphaned)
      local rows = s:tools_of(server.uid)
      assert.same({ "mcp_docs_a", "mcp_docs_b", "mcp_docs_d", "mcp_docs_c" }, names(rows))
      local by = {}
      for _, row in ipairs(rows) do by[row.tool_name] = row end
      assert.equal(first.mcp_docs_b.uid, by.mcp_docs_b.uid)
      assert.equal("new", by.mcp_docs_b.description)
      assert.equal(100, by.mcp_docs_b.created_at)
      assert.equal(200, by.mcp_docs_b.updated_at)
      assert.is_true(by.mcp_docs_c.orphaned)
      assert.equal(200, by.mcp_docs_c.updated_at)
      assert.same({ "mcp_docs_a", "mcp_docs_b", "mcp_docs_d" }, names(s:live_tools_of(server.uid)))

      -- an old orphan is counted again but keeps the updated_at of its disappearance
      assert.equal(2, s:reconcile(server, { tool("mcp_docs_a"), tool("mcp_docs_b") }, 300))
      by = {}
      for _, row in ipairs(s:tools_of(server.uid)) do by[row.tool_name] = row end
      assert.equal(200, by.mcp_docs_c.updated_at)
      assert.equal(300, by.mcp_docs_d.updated_at)

      -- revived in place
      assert.equal(1, s:reconcile(server, { tool("mcp_docs_a"), tool("mcp_docs_b"), tool("mcp_docs_c") }, 400))
      local c = s:tools_of(server.uid)[3]
      assert.equal("mcp_docs_c", c.tool_name)
      assert.is_false(c.orphaned)
      assert.equal(first.mcp_docs_c.uid, c.uid)
      assert.equal(400, c.updated_at)

      -- an empty catalogue orphans everything and deletes nothing
      assert.equal(4, s:reconcile(server, {}, 500))
      assert.equal(4, #s:tools_of(server.uid))
      assert.same({}, s:live_tools_of(server.uid))

      -- the other server was never touched
      local x = s:tools_of(other.uid)
      assert.equal(1, #x)
      assert.is_false(x[1].orphaned)
      assert.equal(100, x[1].updated_at)
      assert.same({ "mcp_docs_a", "mcp_docs_b", "mcp_docs_c", "mcp_docs_d", "mcp_other_x" },
        names(servers.all_tools(s)))
    end)

    it("stores the accepted fields verbatim", function()
      local schema = '{"type":"object","properties":{"q":{"type":"string","description":"ü/\\u0000"}}}'
      local output = '{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}'
      s:reconcile(server, { tool("mcp_docs_q", { remote_name = "q", description = "d\0e", input_schema = schema,
        remote_annotations = '{"readOnlyHint":true}', output_schema = output }) }, 10)
      local row = s:tools_of(server.uid)[1]
      assert.same({ uid = row.uid, pid = 0, server = server.uid, tool_name = "mcp_docs_q", remote_name = "q",
        description = "d\0e", input_schema = schema, remote_annotations = '{"readOnlyHint":true}',
        output_schema = output, orphaned = false, updated_at = 10, created_at = 10 }, row)
      -- the next import writes what the server declares now: none is ""
      s:reconcile(server, { tool("mcp_docs_q", { remote_name = "q" }) }, 11)
      assert.equal("", s:tools_of(server.uid)[1].output_schema)
      s:reconcile(server, { tool("mcp_docs_q", { remote_name = "q", output_schema = "true" }) }, 12)
      assert.equal("true", s:tools_of(server.uid)[1].output_schema)
    end)

    it("answers who owns a local name", function()
      s:reconcile(server, { tool("mcp_docs_a") }, 1)
      s:reconcile(server, {}, 2)
      assert.equal(server.uid, s:tool_owner("mcp_docs_a"))
      assert.is_nil(s:tool_owner("mcp_docs_zzz"))
    end)

    it("rolls the whole reconcile back when a name belongs to another server", function()
      s:reconcile(other, { tool("mcp_docs_taken") }, 1)
      local count, message, err = s:reconcile(server, { tool("mcp_docs_a"), tool("mcp_docs_taken") }, 2)
      assert.is_nil(count)
      assert.matches(backends.postgres and 'duplicate key value violates unique constraint "mcp_tool_tool_name_key"'
        or "UNIQUE constraint failed: mcp_tool.tool_name", message, 1, true)
      assert.equal("store", err.kind)
      assert.same({}, s:tools_of(server.uid))
      assert.equal(other.uid, s:tool_owner("mcp_docs_taken"))
    end)

    it("writes a name listed twice once, with its last values", function()
      assert.equal(0, s:reconcile(server, { tool("mcp_docs_a", { description = "first" }), tool("mcp_docs_b"),
        tool("mcp_docs_a", { description = "second" }) }, 1))
      local rows = s:tools_of(server.uid)
      assert.same({ "mcp_docs_a", "mcp_docs_b" }, names(rows))
      assert.equal("second", rows[1].description)
    end)

    it("reconciles 10 000 tools in one transaction, quickly", function()
      local accepted = {}
      for i = 1, 10000 do accepted[i] = tool(string.format("mcp_docs_t%05d", i)) end
      local t0 = core.now()
      assert.equal(0, s:reconcile(server, accepted, 1000))
      local inserted = core.now() - t0
      for i = 1, 5000 do accepted[i] = accepted[i + 5000] end
      for i = 10000, 5001, -1 do accepted[i] = nil end
      t0 = core.now()
      assert.equal(5000, s:reconcile(server, accepted, 2000))
      local updated = core.now() - t0
      print(string.format("\n  reconcile: 10000 new rows in %.3f s; 5000 updated + 5000 orphaned in %.3f s",
        inserted, updated))
      assert.equal(10000, #s:tools_of(server.uid))
      assert.equal(5000, #s:live_tools_of(server.uid))
      assert.is_true(inserted < 5, "10000 inserts took " .. inserted .. " s")
    end)

    it("refuses malformed input as misuse", function()
      assert.has_error(function() s:reconcile(server, { { remote_name = "x" } }, 1) end)
      assert.has_error(function() s:reconcile({ uid = "1" }, {}, 1) end)
      assert.has_error(function() s:tools_of("1") end)
    end)
  end)

  describe("enablement", function()
    before_each(function()
      s = assert(store.open(path))
    end)

    it("answers nil without a row, then the stored switch", function()
      assert.is_nil(s:tool_enabled("mcp_docs_a"))
      assert.is_true(s:set_tool_enabled("mcp_docs_a", true))
      assert.is_true(s:tool_enabled("mcp_docs_a"))
      assert.is_true(s:set_tool_enabled("mcp_docs_a", false))
      assert.is_false(s:tool_enabled("mcp_docs_a"))
      assert.is_nil(s:group_enabled("mcp_docs"))
      assert.is_true(s:set_group_enabled("mcp_docs", false))
      assert.is_false(s:group_enabled("mcp_docs"))
      assert.is_true(s:set_group_enabled("mcp_docs", true))
      assert.is_true(s:group_enabled("mcp_docs"))
      assert.has_error(function() s:set_tool_enabled("x", 1) end, "enabled must be a boolean")
    end)
  end)

  describe("health", function()
    it("the recorder stamps the server's contact", function()
      s = assert(store.open(path))
      local uid = s:add_server { identifier = "docs" }
      local before = os.time()
      s:health_recorder(uid)("docs", 17)
      local row = s:server(uid)
      assert.equal(17, row.last_latency_ms)
      assert.is_true(row.last_contact >= before and row.last_contact <= os.time())
    end)

    it("skips a hand-built record (uid <= 0) entirely", function()
      s = assert(store.open(path))
      local uid = s:add_server { identifier = "docs" }
      local recorder = s:health_recorder(0)
      s:close()
      recorder("docs", 5) -- would raise on a closed store if it touched it
      s = assert(store.open(path))
      assert.equal(0, s:server(uid).last_contact)
    end)

    sqlite_it("a locked database: record_contact returns nil, message; the recorder raises", function()
      s = assert(store.open(path, { busy_timeout_ms = 50 }))
      local uid = s:add_server { identifier = "docs" }
      local holder = raw(path)
      assert(holder:exec("BEGIN IMMEDIATE"))
      local ok, message, err = s:record_contact(uid, 1700000000, 3)
      assert.is_nil(ok)
      assert.equal("The store could not record a contact with server " .. uid
        .. ": database is locked (SQLITE_BUSY)", message)
      assert.equal("store", err.kind)
      assert.equal("SQLITE_BUSY", err.sql_code)
      local logged = {}
      local recorder = s:health_recorder(uid, function(level, text) logged[#logged + 1] = { level, text } end)
      local raised, why = pcall(recorder, "docs", 3)
      assert.is_false(raised)
      assert.matches("database is locked", why)
      assert.equal("warning", logged[1][1])
      assert.matches('An MCP liveness observation for "docs" could not be stored', logged[1][2], 1, true)
      assert(holder:exec("ROLLBACK"))
      holder:close()
      assert.is_true(s:record_contact(uid, 1700000000, 3))
      assert.equal(1700000000, s:server(uid).last_contact)
    end)

    it("a missing column (a store from before migration 2): nil, message; the recorder raises", function()
      s = assert(store.open(path, { migrate_to = 1 }))
      local uid = s.adapter:insert("INSERT INTO mcp_server (identifier) VALUES (?)", { "docs" })
      local ok, message, err = s:record_contact(uid, 1700000000, 3)
      assert.is_nil(ok)
      assert.matches(backends.postgres and 'column "last_contact" of relation "mcp_server" does not exist'
        or "no such column: last_contact", message, 1, true)
      assert.equal("store", err.kind)
      assert.has_error(function() s:health_recorder(uid)("docs", 3) end)
    end)

    it("a failing recorder never fails a client operation", function()
      s = assert(store.open(path, { migrate_to = 1 }))
      local uid = s.adapter:insert("INSERT INTO mcp_server (identifier) VALUES (?)", { "docs" })
      local client = require "mcpclient.connection"
      local Fake = require "support.fake_server"
      local fake = Fake.new():will_handshake()
      local warnings = {}
      local conn = client.connect { url = "https://mcp.example.com/rpc", identifier = "docs",
        transport = fake, clock = fake.clock,
        health = s:health_recorder(uid), log = function(_, text) warnings[#warnings + 1] = text end }
      assert(conn:ping())  -- completed: its contact is recorded, and that fails
      assert.equal(1, #warnings)
      assert.matches(backends.postgres and 'column "last_contact"' or "no such column", warnings[1], 1, true)
      conn:close()
    end)
  end)

  describe("runs and events", function()
    before_each(function()
      s = assert(store.open(path))
    end)

    local function new_run(owner)
      return assert(s:insert_run { uuid = "0b8e-uuid", status = "running", claimed_by = owner,
        lease_expires = os.time() + 900, user_name = "admin", configuration = "default" })
    end

    it("inserts and reads a run", function()
      local uid = new_run("interactive:host:1")
      local row = s:run(uid)
      assert.same({ uid = uid, uuid = "0b8e-uuid", status = "running", claimed_by = "interactive:host:1",
        lease_expires = row.lease_expires, fence = "", cancel_requested = false, user_name = "admin",
        configuration = "default", created_at = row.created_at, updated_at = row.updated_at, pending_steps = "",
        approval = "" }, row)
      assert.is_nil(s:run(uid + 1))
      local far = assert(s:insert_run { uuid = "x", lease_expires = math.maxinteger })
      assert.equal(math.maxinteger, s:run(far).lease_expires)
      assert.equal("", s:run(far).claimed_by)
    end)

    it("guarded_update_run changes only a running run its owner holds", function()
      local uid = new_run("interactive:host:1")
      assert.equal(0, s:guarded_update_run(uid, "worker:other:2", { fence = "non_idempotent_write" }))
      assert.equal("", s:run(uid).fence)
      assert.equal(1, s:guarded_update_run(uid, "interactive:host:1", { fence = "non_idempotent_write",
        lease_expires = 42 }))
      assert.equal("non_idempotent_write", s:run(uid).fence)
      assert.equal(42, s:run(uid).lease_expires)
      assert.is_true(s:update_run(uid, { status = "completed", fence = "" }))
      assert.equal(0, s:guarded_update_run(uid, "interactive:host:1", { lease_expires = 1 }))
      assert.equal("completed", s:run(uid).status)
      assert.has_error(function() s:guarded_update_run(uid, nil, {}) end, "owner must be a string")
    end)

    it("a cancel request is visible to another store on the same file", function()
      local uid = new_run("interactive:host:1")
      local other <close> = assert(store.open(path))
      assert.is_false(other:run(uid).cancel_requested)
      assert.is_true(other:request_cancel(uid))
      assert.is_true(s:run(uid).cancel_requested)
    end)

    it("numbers events 1, 2, 3 per run", function()
      local a, b = new_run("o"), new_run("o")
      assert.equal(1, s:append_event(a, { kind = "tool", round = 1, duration_ms = 12.345,
        payload = '{"kind":"tool"}' }))
      assert.equal(2, s:append_event(a, { kind = "tool", round = 1 }))
      assert.equal(1, s:append_event(b, { kind = "status", payload = "{}" }))
      assert.equal(3, s:append_event(a, { kind = "final", round = 2, duration_ms = 0.5 }))
      local events = s:events(a)
      local seqs = {}
      for i, e in ipairs(events) do seqs[i] = e.sequence end
      assert.same({ 1, 2, 3 }, seqs)
      assert.equal(12.35, events[1].duration_ms)
      assert.equal('{"kind":"tool"}', events[1].payload)
      assert.equal("", events[2].payload)
      assert.equal("final", events[3].kind)
      assert.equal(2, events[3].round)
      assert.equal(1, #s:events(b))
      assert.has_error(function() s:append_event(a, { kind = "tool", payload = {} }) end)
    end)
  end)

  describe("governance events", function()
    it("appends and lists by uid, 64-bit values and NUL bytes intact", function()
      s = assert(store.open(path))
      local first = assert(s:insert_governance_event { decision = "tool_denied", reason = "trustZone",
        tool_name = "mcp_docs_a", detail = "zone=cloud;ceiling=publicContent;observedOnly=0", created_at = 77 })
      local second = assert(s:insert_governance_event { decision = "tool_denied", reason = "toolDisabled",
        user_uid = math.maxinteger, agentrun_uid = math.mininteger, correlation_id = "u\0u" })
      assert.is_true(second > first)
      local rows = s:governance_events()
      assert.equal(2, #rows)
      assert.equal(77, rows[1].created_at)
      assert.equal("trustZone", rows[1].reason)
      assert.equal("", rows[1].guardrail)
      assert.equal(math.maxinteger, rows[2].user_uid)
      assert.equal(math.mininteger, rows[2].agentrun_uid)
      assert.equal("u\0u", rows[2].correlation_id)
      assert.is_true(rows[2].created_at >= os.time() - 5)
      assert.has_error(function() s:insert_governance_event { arguments = "{}" } end)
    end)
  end)

  describe("transactions", function()
    before_each(function()
      s = assert(store.open(path))
    end)

    it("commits and returns fn's results", function()
      local a, b = s:transaction(function()
        return s:add_server { identifier = "one" }, "extra"
      end)
      assert.equal("integer", math.type(a))
      assert.equal("extra", b)
      assert.is_true(s:transaction(function() end))
      assert.equal(1, #s:servers())
    end)

    it("rolls back when fn raises, and raises again", function()
      assert.has_error(function()
        s:transaction(function()
          s:add_server { identifier = "lost" }
          error("stop here", 0)
        end)
      end, "stop here")
      assert.same({}, s:servers())
    end)

    it("rolls back when fn returns nil, message, err", function()
      local ok, message, err = s:transaction(function()
        s:add_server { identifier = "lost" }
        return nil, "refused", { kind = "x" }
      end)
      assert.is_nil(ok)
      assert.equal("refused", message)
      assert.same({ kind = "x" }, err)
      assert.same({}, s:servers())
    end)

    it("nests with savepoints", function()
      s:transaction(function()
        s:add_server { identifier = "kept" }
        s:transaction(function()
          s:add_server { identifier = "inner" }
          return nil, "undo the inner part"
        end)
        local server = assert(s:server(s:add_server { identifier = "kept2" }))
        -- reconcile opens its own (nested) transaction
        assert.equal(0, s:reconcile(server, { tool("mcp_kept2_a") }, 1))
      end)
      assert.same({ "kept", "kept2" }, names(s:servers()))
      assert.equal(1, #servers.all_tools(s))
    end)

    sqlite_it("fails cleanly when another connection holds the write lock", function()
      s:close()
      s = assert(store.open(path, { busy_timeout_ms = 20 }))
      local holder = raw(path)
      assert(holder:exec("BEGIN IMMEDIATE"))
      local ok, message, err = s:transaction(function() return true end)
      assert.is_nil(ok)
      assert.matches("database is locked", message)
      assert.equal("store", err.kind)
      assert(holder:exec("ROLLBACK"))
      holder:close()
    end)
  end)

  describe("a host adapter", function()
    sqlite_it("serves the same Store, and every value travels as a bound parameter", function()
      local inner = assert(sqlite_adapter.open(path))
      local seen = {}
      local adapter = {}
      for _, method in ipairs({ "exec", "rows", "insert" }) do
        adapter[method] = function(_, sql, params)
          seen[#seen + 1] = sql
          return inner[method](inner, sql, params)
        end
      end
      function adapter.changes() return inner:changes() end
      function adapter.close() inner:close() end
      s = assert(store.open_adapter(adapter))
      assert.equal(store.SCHEMA_VERSION, s:schema_version())
      local secret = "env:VERY_DISTINCT_REFERENCE"
      local uid = s:add_server { identifier = "zz_identifier", name = "Name'; DROP TABLE mcp_server; --",
        auth_credential = secret, enabled = true }
      s:update_server(uid, { description = "distinct_description" })
      s:record_contact(uid, 1700000000, 4)
      s:reconcile(s:server(uid), { tool("mcp_zz_distinct_tool") }, 5)
      s:set_tool_enabled("mcp_zz_distinct_tool", true)
      local run = s:insert_run { uuid = "distinct-uuid", status = "running", claimed_by = "distinct-owner" }
      s:guarded_update_run(run, "distinct-owner", { fence = "distinct_effect" })
      s:append_event(run, { kind = "distinct_kind", payload = '{"distinct":1}' })
      s:insert_governance_event { decision = "distinct_decision" }
      assert.equal("Name'; DROP TABLE mcp_server; --", s:server(uid).name)
      assert.is_true(#seen > 20)
      for _, sql in ipairs(seen) do
        assert.is_nil(sql:find("distinct", 1, true), sql)
        assert.is_nil(sql:find("zz_", 1, true), sql)
        assert.is_nil(sql:find("1700000000", 1, true), sql)
        assert.is_nil(sql:find(secret, 1, true), sql)
      end
    end)
  end)

  describe("OAuth grants", function()
    local grants = require "mcpclient.agent.grants"
    local function record(server, resource, issuer, token)
      return { server = server, resource = resource, issuer = issuer, token_endpoint = issuer .. "/token",
        access_token = token, refresh_token = "r-" .. token }
    end

    it("drops the grants kept before the table joined the migrations, knowingly, and keeps the new shape", function()
      s = assert(store.open(path, { migrate_to = 2 }))
      s:close()
      s = nil
      -- the table as it used to be made beside the migrations, with a grant in it
      local db = raw(path)
      assert(db:exec("CREATE TABLE mcp_oauth_grant (server TEXT NOT NULL, issuer TEXT NOT NULL, "
        .. "resource TEXT NOT NULL, record TEXT NOT NULL, updated INTEGER NOT NULL, "
        .. "PRIMARY KEY (server, issuer, resource))"))
      assert(db:exec("INSERT INTO mcp_oauth_grant VALUES ('docs', 'https://as', 'https://old/mcp', "
        .. "'{\"access_token\":\"old\"}', 1)"))
      db:close()
      s = assert(store.open(path))
      assert.equal(store.SCHEMA_VERSION, s:schema_version())
      assert.same({}, assert(s:grants("docs")))
      assert(grants.save(s, record("docs", "https://new/mcp", "https://as", "t1")))
      local rows = assert(s:grants("docs"))
      assert.equal(1, #rows)
      assert.equal("https://new/mcp", rows[1].resource)
    end)

    it("keys a grant by server, resource and issuer; a new issuer for a resource replaces the old one", function()
      s = assert(store.open(path))
      assert(grants.save(s, record("docs", "https://a/mcp", "https://as1", "t1")))
      assert(grants.save(s, record("docs", "https://b/mcp", "https://as1", "t2")))
      assert(grants.save(s, record("docs", "https://a/mcp", "https://as2", "t3")))
      local list = assert(grants.hook(s).load("docs"))
      local by_resource = {}
      for _, r in ipairs(list) do by_resource[r.resource] = r end
      assert.equal(2, #list)
      assert.equal("t3", by_resource["https://a/mcp"].access_token)
      assert.equal("https://as2", by_resource["https://a/mcp"].issuer)
      assert.equal("t2", by_resource["https://b/mcp"].access_token)
      assert.has_error(function() grants.save(s, { server = "docs", issuer = "x" }) end)
    end)

    it("a new URL forgets the server's grants, a new identifier carries them, removal forgets them", function()
      s = assert(store.open(path))
      local uid = assert(s:add_server { identifier = "docs", url = "https://a/mcp" })
      assert(grants.save(s, record("docs", "https://a/mcp", "https://as", "t1")))
      local ok, forgotten = s:update_server(uid, { name = "Docs" })
      assert.is_true(ok)
      assert.equal(0, forgotten)
      ok, forgotten = s:update_server(uid, { identifier = "docs2" })
      assert.is_true(ok)
      assert.equal(0, forgotten)
      assert.equal(0, #assert(s:grants("docs")))
      assert.equal(1, #assert(s:grants("docs2")))
      ok, forgotten = s:update_server(uid, { url = "https://a/mcp" })   -- the same URL: kept
      assert.is_true(ok)
      assert.equal(0, forgotten)
      ok, forgotten = s:update_server(uid, { url = "https://b/mcp" })
      assert.is_true(ok)
      assert.equal(1, forgotten)
      assert.equal(0, #assert(s:grants("docs2")))
      assert(grants.save(s, record("docs2", "https://b/mcp", "https://as", "t2")))
      ok, forgotten = s:remove_server(uid)
      assert.is_true(ok)
      assert.equal(1, forgotten)
      assert.equal(0, #assert(s:grants("docs2")))
    end)

    it("uses a grant only for a URL its resource covers", function()
      s = assert(store.open(path))
      assert(grants.save(s, record("docs", "https://a.example/mcp", "https://as", "t1")))
      local row = { identifier = "docs", url = "https://a.example/mcp?x=1", auth_credential = "" }
      assert.truthy(grants.status(s, row))
      assert.truthy(grants.oauth_option(s, row))
      for _, url in ipairs { "https://b.example/mcp", "https://a.example/other", "http://a.example/mcp",
        "https://a.example:8443/mcp", "https://a.example/mcpx" } do
        local moved = { identifier = "docs", url = url, auth_credential = "" }
        assert.is_nil(grants.status(s, moved), url)
        assert.is_nil(grants.oauth_option(s, moved), url)
      end
    end)

    it("a grant table that cannot be read is a store failure, never \"no grant\"", function()
      s = assert(store.open(path))
      local db = raw(path)
      assert(db:exec("DROP TABLE mcp_oauth_grant"))
      db:close()
      local row = { identifier = "docs", url = "https://a/mcp", auth_credential = "" }
      for _, call in ipairs {
        function() return grants.status(s, row) end,
        function() return grants.oauth_option(s, row) end,
        function() return grants.hook(s).load("docs") end,
        function() return grants.forget(s, "docs") end,
        function() return grants.save(s, record("docs", "https://a/mcp", "https://as", "t")) end,
      } do
        local value, message, err = call()
        assert.is_nil(value)
        assert.equal("store", err.kind, message)
        assert.truthy(message:find("mcp_oauth_grant", 1, true), message)
      end
      local catalogue = require "mcpclient.agent.catalogue"
      row.uid = 0
      local conn, message, err = catalogue.connect(row, { store = s })
      assert.is_nil(conn)
      assert.equal("store", err.kind, message)
    end)
  end)
end)
