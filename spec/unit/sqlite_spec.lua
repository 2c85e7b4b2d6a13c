-- mcpclient.db's sqlite_open: the C SQLite binding under the store. Debian's Lua
-- bindings lose 64-bit integers and cut text at NUL; this one must not.
local core = require "mcpclient.core"
local drivers = require "mcpclient.db"

local function tmpdb()
  local path = os.tmpname()
  return path, function()
    for _, suffix in ipairs({ "", "-journal", "-wal", "-shm" }) do os.remove(path .. suffix) end
  end
end

describe("db.sqlite_open", function()
  local db

  before_each(function()
    db = assert(drivers.sqlite_open(":memory:"))
    assert(db:exec("CREATE TABLE t (a, b, c); CREATE TABLE u (x UNIQUE NOT NULL)"))
  end)

  after_each(function()
    db:close()
  end)

  describe("values survive exactly", function()
    local function roundtrip(value)
      assert(db:execute("DELETE FROM t", {}))
      assert(db:insert("INSERT INTO t (a) VALUES (?)", { value }))
      local rows = assert(db:query("SELECT a, typeof(a) AS type FROM t", {}))
      return rows[1].a, rows[1].type
    end

    it("64-bit integers, bound and read as Lua integers", function()
      for _, n in ipairs({ math.maxinteger, math.mininteger, 0, -1, (1 << 53) + 1, 1234567890123456789 }) do
        local back, ty = roundtrip(n)
        assert.equal("integer", ty)
        assert.equal("integer", math.type(back))
        assert.equal(n, back)
      end
    end)

    it("floats as doubles, an integral float staying a float", function()
      for _, x in ipairs({ 0.1, 1e300, -2.5, 1.0, 2 ^ 63 }) do
        local back, ty = roundtrip(x)
        assert.equal("real", ty)
        assert.equal("float", math.type(back))
        assert.equal(x, back)
      end
    end)

    it("text with NUL bytes and the empty string, at exact length", function()
      for _, s in ipairs({ "a\0b", "\0", "", "tail\0", string.rep("x\0", 5000), "ünïcødé" }) do
        local back, ty = roundtrip(s)
        assert.equal("text", ty)
        assert.equal(#s, #back)
        assert.equal(s, back)
      end
    end)

    it("blobs from {blob = ...}, read back as strings", function()
      local bytes = {}
      for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
      for _, s in ipairs({ table.concat(bytes), "", "\0\0" }) do
        local back, ty = roundtrip({ blob = s })
        assert.equal("blob", ty)
        assert.equal(s, back)
      end
    end)

    it("booleans as 1 and 0", function()
      assert.equal(1, (roundtrip(true)))
      assert.equal(0, (roundtrip(false)))
    end)

    it("nil and json.null as NULL, absent from the row", function()
      assert(db:insert("INSERT INTO t (a, b, c) VALUES (?, ?, ?)", { n = 3, 1, nil, nil }))
      assert(db:insert("INSERT INTO t (a, b, c) VALUES (?, ?, ?)", { 2, core.json.null, "x" }))
      local rows = assert(db:query("SELECT a, b, c, typeof(b) AS tb FROM t ORDER BY a", {}))
      assert.same({ { a = 1, tb = "null" }, { a = 2, c = "x", tb = "null" } }, rows)
    end)
  end)

  describe("statements", function()
    it("insert returns the row id, execute the changes, query the rows in order", function()
      assert.equal(1, db:insert("INSERT INTO t (a) VALUES (?)", { 10 }))
      assert.equal(2, db:insert("INSERT INTO t (a) VALUES (?)", { 20 }))
      assert.equal(2, db:execute("UPDATE t SET b = ?", { "y" }))
      assert.equal(2, db:changes())
      assert.equal(0, db:execute("UPDATE t SET b = ? WHERE a = ?", { "z", 99 }))
      assert.same({ { a = 20, b = "y" }, { a = 10, b = "y" } }, db:query("SELECT a, b FROM t ORDER BY a DESC"))
      assert.same({}, db:query("SELECT a FROM t WHERE a > ?", { 100 }))
    end)

    it("runs one SQL text again and again with fresh parameters (the cached statement is reset)", function()
      assert(db:insert("INSERT INTO t (a) VALUES (?)", { 5 }))
      assert(db:insert("INSERT INTO t (a) VALUES (?)", { 6 }))
      assert.same({ { a = 5 } }, db:query("SELECT a FROM t WHERE a = ?", { 5 }))
      assert.same({ { a = 6 } }, db:query("SELECT a FROM t WHERE a = ?", { 6 }))
      assert.same({}, db:query("SELECT a FROM t WHERE a = ?", { 7 }))
    end)

    it("clears the bindings after every run, so a shorter parameter list binds NULL", function()
      assert(db:insert("INSERT INTO t (a, b) VALUES (?, ?)", { 1, "first" }))
      assert(db:insert("INSERT INTO t (a, b) VALUES (?, ?)", { 2 }))
      assert.has_error(function() db:insert("INSERT INTO t (a, b) VALUES (?, ?)", { 3, print }) end)
      assert(db:insert("INSERT INTO t (a, b) VALUES (?, ?)", { 4 }))
      assert.same({ { a = 1, b = "first" }, { a = 2 }, { a = 4 } }, db:query("SELECT a, b FROM t ORDER BY a"))
    end)

    it("keeps working past the statement cache's size (uncached statements)", function()
      for i = 1, 300 do
        assert.equal(i, db:insert("INSERT INTO t (a, b) VALUES (?, " .. i .. ")", { i }))
      end
      local rows = db:query("SELECT count(*) AS n, sum(b) AS s FROM t")
      assert.same({ { n = 300, s = 300 * 301 // 2 } }, rows)
      assert.same({ { a = 299 } }, db:query("SELECT a FROM t WHERE a = 299"))
      assert.same({ { a = 299 } }, db:query("SELECT a FROM t WHERE a = 299"))
    end)

    it("runs a script with exec, and one statement at a time elsewhere", function()
      assert.is_true(db:exec("INSERT INTO t (a) VALUES (1); INSERT INTO t (a) VALUES (2);"))
      assert.same({ { n = 2 } }, db:query("SELECT count(*) AS n FROM t"))
      assert.has_error(function() db:query("SELECT 1; SELECT 2") end, "one statement at a time (use exec for a script)")
      assert.same({ { one = 1 } }, db:query("SELECT 1 AS one; -- trailing comment\n"))
      assert.has_error(function() db:query("   ") end, "no SQL statement in the text")
    end)

  end)

  describe("database failures return nil, message, code", function()
    it("a constraint", function()
      assert(db:execute("INSERT INTO u (x) VALUES (?)", { 1 }))
      local ok, message, code = db:execute("INSERT INTO u (x) VALUES (?)", { 1 })
      assert.is_nil(ok)
      assert.equal("UNIQUE constraint failed: u.x (SQLITE_CONSTRAINT_UNIQUE)", message)
      assert.equal("SQLITE_CONSTRAINT_UNIQUE", code)
      ok, message, code = db:insert("INSERT INTO u (x) VALUES (?)", { n = 1 })
      assert.is_nil(ok)
      assert.matches("NOT NULL constraint failed", message)
      assert.equal("SQLITE_CONSTRAINT_NOTNULL", code)
    end)

    it("a missing column or table, and bad SQL", function()
      local rows, message, code = db:query("SELECT nope FROM t", {})
      assert.is_nil(rows)
      assert.equal("no such column: nope (SQLITE_ERROR)", message)
      assert.equal("SQLITE_ERROR", code)
      assert.is_nil((db:query("SELECT * FROM missing")))
      local ok
      ok, message = db:exec("CREATE TABLE t (a)")
      assert.is_nil(ok)
      assert.matches("already exists", message)
      assert.is_nil((db:execute("UPDATE t SET nope = ?", { 1 })))
    end)

    it("a runtime error part-way through the rows, leaving the statement reusable", function()
      assert(db:exec("INSERT INTO t (a) VALUES (1); INSERT INTO t (a) VALUES (-9223372036854775808)"))
      local sql = "SELECT a, abs(a) AS m FROM t ORDER BY a DESC"
      local rows, message, code = db:query(sql)
      assert.is_nil(rows)
      assert.equal("integer overflow (SQLITE_ERROR)", message)
      assert.equal("SQLITE_ERROR", code)
      assert(db:execute("DELETE FROM t WHERE a < 0", {}))
      assert.same({ { a = 1, m = 1 } }, db:query(sql))
    end)
  end)

  describe("misuse raises", function()
    it("unbindable values, too many parameters, a bad params.n", function()
      assert.has_error(function() db:execute("INSERT INTO t (a) VALUES (?)", { {} }) end,
        "parameter 1: a table cannot be bound (use an integer, number, string, boolean, json.null or {blob = string})")
      assert.has_error(function() db:execute("INSERT INTO t (a) VALUES (?)", { print }) end)
      assert.has_error(function() db:execute("INSERT INTO t (a) VALUES (?)", { 1, 2 }) end,
        "2 parameters given, the statement takes 1")
      assert.has_error(function() db:execute("INSERT INTO t (a) VALUES (?)", { n = "x" }) end,
        "params.n must be a non-negative integer")
      assert.has_error(function() db:execute("INSERT INTO t (a) VALUES (?)", "x") end)
      assert.has_error(function() db:query({}) end)
    end)

    it("a closed database; close is idempotent", function()
      db:close()
      db:close()
      assert.has_error(function() db:query("SELECT 1") end, "attempt to use a closed database")
      assert.has_error(function() db:exec("SELECT 1") end, "attempt to use a closed database")
      assert.matches("closed", tostring(db))
    end)

    it("unknown open flags", function()
      assert.has_error(function() drivers.sqlite_open(":memory:", { writable = true }) end,
        'sqlite_open: unknown flag "writable"')
      assert.has_error(function() drivers.sqlite_open(":memory:", { readonly = 1 }) end)
    end)
  end)

  it("closes with <close>", function()
    local handle
    do
      local scoped <close> = assert(drivers.sqlite_open(":memory:"))
      handle = scoped
      assert.same({ { x = 1 } }, scoped:query("SELECT 1 AS x"))
    end
    assert.has_error(function() handle:query("SELECT 1") end, "attempt to use a closed database")
  end)

  it("leaves finalization to the collector safely", function()
    for _ = 1, 20 do
      local d = assert(drivers.sqlite_open(":memory:"))
      assert(d:query("SELECT 1"))
      d:exec("CREATE TABLE x (a)")
      d:insert("INSERT INTO x VALUES (?)", { 1 })
    end
    collectgarbage()
    collectgarbage()
  end)

  describe("files", function()
    local path, cleanup

    before_each(function()
      path, cleanup = tmpdb()
    end)

    after_each(function()
      cleanup()
    end)

    it("refuses a path that is not a regular file at once, and tells what it names without opening it", function()
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir " .. dir .. " && mkfifo " .. dir .. "/fifo.db && : > " .. dir .. "/plain.db && mkfifo "
        .. dir .. "/plain.db-shm"))
      local d, message, code = drivers.sqlite_open(dir .. "/fifo.db")
      assert.is_nil(d)
      assert.equal("the database path names a FIFO (named pipe), not a regular file (SQLITE_CANTOPEN)", message)
      assert.equal("SQLITE_CANTOPEN", code)
      d, message = drivers.sqlite_open(dir .. "/plain.db", { readonly = true })
      assert.is_nil(d)
      assert.equal("the database's shm file beside it is a FIFO (named pipe), not a regular file (SQLITE_CANTOPEN)",
        message)
      assert.equal("missing", drivers.sqlite_path_state(dir .. "/none.db"))
      assert(os.execute(": > " .. dir .. "/other.db"))
      assert.equal("file", drivers.sqlite_path_state(dir .. "/other.db"))
      assert.is_nil((drivers.sqlite_path_state(dir .. "/fifo.db")))
      os.execute("rm -rf " .. dir)
    end)

    it("fails to open an impossible path with nil, message, code", function()
      local d, message, code = drivers.sqlite_open("/nonexistent-dir/x.db")
      assert.is_nil(d)
      assert.equal("the database file does not exist and cannot be created: its directory is missing "
        .. "(No such file or directory) (SQLITE_CANTOPEN)", message)
      assert.equal("SQLITE_CANTOPEN", code)
      d, message = drivers.sqlite_open(path .. ".absent", { create = false })
      assert.is_nil(d)
      assert.matches("SQLITE_CANTOPEN", message)
    end)

    it("opens read-only: writes fail with SQLITE_READONLY", function()
      local w = assert(drivers.sqlite_open(path))
      assert(w:exec("CREATE TABLE t (a); INSERT INTO t VALUES (7)"))
      w:close()
      local r = assert(drivers.sqlite_open(path, { readonly = true }))
      assert.same({ { a = 7 } }, r:query("SELECT a FROM t"))
      local ok, message, code = r:execute("INSERT INTO t VALUES (?)", { 8 })
      assert.is_nil(ok)
      assert.matches("readonly", message)
      assert.equal("SQLITE_READONLY", code)
      r:close()
    end)

    it("a locked database answers SQLITE_BUSY after the busy timeout, and recovers", function()
      local a = assert(drivers.sqlite_open(path))
      local b = assert(drivers.sqlite_open(path))
      assert(a:exec("CREATE TABLE t (a)"))
      assert(b:exec("BEGIN IMMEDIATE"))
      a:busy_timeout(50)
      local t0 = core.now()
      local ok, message, code = a:execute("INSERT INTO t VALUES (?)", { 1 })
      local waited = core.now() - t0
      assert.is_nil(ok)
      assert.equal("database is locked (SQLITE_BUSY)", message)
      assert.equal("SQLITE_BUSY", code)
      assert.is_true(waited >= 0.04 and waited < 2, "waited " .. waited)
      assert(b:exec("COMMIT"))
      assert.equal(1, a:execute("INSERT INTO t VALUES (?)", { 1 }))
      a:close()
      b:close()
    end)

    it("resets a statement after reading, so no read lock outlives the call", function()
      local a = assert(drivers.sqlite_open(path))
      local b = assert(drivers.sqlite_open(path))
      assert(a:exec("PRAGMA journal_mode = DELETE; CREATE TABLE t (a); INSERT INTO t VALUES (1); "
        .. "INSERT INTO t VALUES (2); INSERT INTO t VALUES (-9223372036854775808)"))
      b:busy_timeout(0)
      assert.equal(3, #a:query("SELECT a FROM t"))
      assert.equal(1, b:execute("INSERT INTO t VALUES (?)", { 3 }))
      -- and after a failure part-way through the rows
      assert.is_nil((a:query("SELECT abs(a) FROM t ORDER BY a DESC")))
      assert.equal(1, b:execute("INSERT INTO t VALUES (?)", { 4 }))
      a:close()
      b:close()
    end)
  end)
end)
