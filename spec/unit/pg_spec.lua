-- mcpclient.db's pg_connect: the C libpq binding under the PostgreSQL store. Debian's
-- Lua bindings lose 64-bit integers or have no bound parameters and bound no
-- wait; these are the properties this one exists for. Needs a server: runs
-- when the suite runs on PostgreSQL (MCPCLIENT_TEST_PG).
local backends = require "support.backends"
local core = require "mcpclient.core"
local drivers = require "mcpclient.db"

if not backends.postgres then
  describe("db.pg_connect #postgres", function()
    pending("runs with MCPCLIENT_TEST_PG set (scripts/test starts a throwaway cluster)")
  end)
  return
end

describe("db.pg_connect", function()
  local db

  before_each(function()
    db = assert(drivers.pg_connect((backends.new_schema())))
    assert(db:exec("CREATE TABLE t (i BIGINT, f DOUBLE PRECISION, s TEXT, b BYTEA, flag BOOLEAN)"))
  end)

  after_each(function()
    if db then db:close() end
  end)

  it("binds and reads 64-bit integers exactly", function()
    for _, v in ipairs { math.maxinteger, math.mininteger, 2 ^ 53 + 1 | 0, -1, 0 } do
      assert.equal(1, db:execute("INSERT INTO t (i) VALUES ($1)", { v }))
      local row = db:query("SELECT i FROM t WHERE i = $1", { v })[1]
      assert.equal("integer", math.type(row.i))
      assert.equal(v, row.i)
    end
  end)

  it("keeps bytes with NUL exactly as bytea, and refuses NUL in text instead of cutting it", function()
    local bytes = "a\0b\255\0"
    assert(db:execute("INSERT INTO t (b, s) VALUES ($1, $2)", { { blob = bytes }, "plain" }))
    local row = db:query("SELECT b, s FROM t", {})[1]
    assert.equal(bytes, row.b)
    assert.equal("plain", row.s)
    local ok, message, code = db:execute("INSERT INTO t (s) VALUES ($1)", { "cut\0here" })
    assert.is_nil(ok)
    assert.equal("22021", code)
    assert.matches("parameter 1 is text holding a NUL byte", message, 1, true)
    assert.equal(1, #db:query("SELECT * FROM t", {})) -- nothing was written
  end)

  it("reads numbers, booleans as 1/0, and NULL as an absent column", function()
    assert(db:execute("INSERT INTO t (f, flag) VALUES ($1, $2)", { 1.25, true }))
    local row = db:query("SELECT * FROM t", {})[1]
    assert.equal(1.25, row.f)
    assert.equal(1, row.flag)
    assert.is_nil(row.i)
    assert.is_nil(row.s)
  end)

  it("returns the SQLSTATE and the primary message only (never a row's values)", function()
    assert(db:exec("CREATE UNIQUE INDEX t_s ON t (s)"))
    assert(db:execute("INSERT INTO t (s) VALUES ($1)", { "secret-value-1" }))
    local ok, message, code = db:execute("INSERT INTO t (s) VALUES ($1)", { "secret-value-1" })
    assert.is_nil(ok)
    assert.equal("23505", code)
    assert.equal('duplicate key value violates unique constraint "t_s" (23505)', message)
  end)

  it("bounds every statement: a late one is cancelled and the connection stays usable", function()
    db:timeout(150)
    local t0 = core.now()
    local ok, message, code = db:query("SELECT pg_sleep(5)", {})
    local waited = core.now() - t0
    assert.is_nil(ok)
    assert.equal("57014", code)
    assert.equal("the statement did not finish within 150 ms and was cancelled (57014)", message)
    assert.is_true(waited < 0.5, string.format("waited %.3f s", waited))
    assert.equal(7, db:query("SELECT 7 AS x", {})[1].x)
  end)

  it("tells an open transaction, and a lost connection as 08006", function()
    assert(db:exec("BEGIN"))
    assert.is_true(db:in_transaction())
    assert(db:exec("ROLLBACK"))
    assert.is_false(db:in_transaction())
    local admin = assert(drivers.pg_connect(backends.conninfo()))
    local pid = db:query("SELECT pg_backend_pid() AS pid", {})[1].pid
    assert(admin:query("SELECT pg_terminate_backend(CAST($1 AS integer))", { pid }))
    admin:close()
    local ok, _, code = db:query("SELECT 1", {})
    assert.is_nil(ok)
    assert.equal("08006", code)
    assert.is_false(db:alive())
  end)

  it("raises on misuse: unbindable values, a closed handle, unknown options", function()
    assert.has_error(function() db:query("SELECT $1", { {} }) end)
    assert.has_error(function() drivers.pg_connect("", { timeout = 1 }) end, 'pg_connect: unknown option "timeout"')
    local other = assert(drivers.pg_connect(backends.conninfo()))
    other:close()
    other:close()
    assert.equal("postgresql db (closed)", tostring(other))
    assert.has_error(function() other:query("SELECT 1") end, "attempt to use a closed database")
  end)

  it("reports a connection string it cannot parse without quoting it", function()
    local none, message, code = drivers.pg_connect("host=x password='never-shown")
    assert.is_nil(none)
    assert.equal("08001", code)
    assert.equal("the connection string could not be parsed (08001)", message)
  end)

  it("bounds making the connection", function()
    -- a server on loopback that accepts and never answers: the connect waits until its bound
    local pipe = assert(io.popen("echo $$; exec node -e \"require('net').createServer(() => {})"
      .. ".listen(0, '127.0.0.1', function () { console.log(this.address().port) })\""))
    local pid, port = pipe:read("l"), pipe:read("l")
    local t0 = core.now()
    local none, message, code = drivers.pg_connect("host=127.0.0.1 port=" .. port .. " connect_timeout=30",
      { connect_timeout_ms = 200 })
    local waited = core.now() - t0
    os.execute("kill " .. pid)
    pipe:close()
    assert.is_nil(none)
    assert.equal("08001", code)
    assert.equal("the connection was not made in time (08001)", message)
    assert.is_true(waited >= 0.2 and waited < 1, string.format("waited %.3f s", waited))
  end)
end)
