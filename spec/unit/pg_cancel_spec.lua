-- A statement past its bound on PostgreSQL is cancelled (57014) and the connection stays usable,
-- also when the cancel does not end it at once, as on a loaded machine. Each race is made on
-- demand by the statement itself, in PL/pgSQL: a first part that the first cancel does not end
-- (as a backend not yet running the statement ignores it), so a result is read after the cancel
-- and the rest of the statement must stay in the same grace; and a backend slow to answer a
-- cancel that the server took at the grace's end. Runs when the suite runs on PostgreSQL
-- (MCPCLIENT_TEST_PG).
local backends = require "support.backends"
local core = require "mcpclient.core"
local drivers = require "mcpclient.db"

if not backends.postgres then
  describe("db.pg_connect's cancel #postgres", function()
    pending("runs with MCPCLIENT_TEST_PG set (scripts/test starts a throwaway cluster)")
  end)
  return
end

-- A part that takes the first cancel and goes on: it ends at once, successfully.
local SHRUGS = "DO $$ BEGIN PERFORM pg_sleep(5); EXCEPTION WHEN query_canceled THEN NULL; END $$"
-- A long part after it. Its notice makes the server send what it holds (the first part's result)
-- now, not with the last one: the client reads a result after the cancel, with more to come.
local THEN_LONG = "DO $$ BEGIN RAISE NOTICE 'next'; PERFORM pg_sleep(5); END $$"
-- A part that answers a cancel only after a moment: the cancel is taken, then 57014 50 ms later.
local SLOW_TO_ANSWER = "DO $$ BEGIN PERFORM pg_sleep(5); "
  .. "EXCEPTION WHEN query_canceled THEN PERFORM pg_sleep(0.05); RAISE; END $$"

-- Run sql as a script on a fresh connection bounded by timeout_ms and grace_ms.
-- → ok, message, code, seconds waited, what the same connection answers next (when cancelled)
local function run(sql, timeout_ms, grace_ms)
  local db <close> = assert(drivers.pg_connect(backends.conninfo()))
  db:timeout(timeout_ms, grace_ms)
  local t0 = core.now()
  local ok, message, code = db:exec(sql)
  local waited = core.now() - t0
  -- cancelled, not lost: the same connection answers the next statement
  local after = code == "57014" and db:query("SELECT 7 AS x", {})
  return ok, message, code, waited, after and after[1].x
end

describe("db.pg_connect's cancel", function()
  it("keeps a statement in one grace across its results: a repeated cancel ends its second part", function()
    local ok, message, code, waited, after = run(SHRUGS .. "; " .. THEN_LONG, 150, 1000)
    assert.is_nil(ok)
    assert.equal("57014", code, message)
    assert.equal("the statement did not finish within 150 ms and was cancelled (57014)", message)
    assert.equal(7, after)
    -- the bound, then a repeat of the cancel 100 ms later: well within the grace
    assert.is_true(waited < 1.15, string.format("waited %.3f s", waited))
  end)

  it("gives a cancel taken at the grace's end its moment to land", function()
    -- a grace of 1 ms ends while the backend is still answering the cancel
    local ok, message, code, waited, after = run(SLOW_TO_ANSWER, 150, 1)
    assert.is_nil(ok)
    assert.equal("57014", code, message)
    assert.equal(7, after)
    assert.is_true(waited < 1, string.format("waited %.3f s", waited))
  end)

  it("cancels a plain late statement every time", function()
    local db <close> = assert(drivers.pg_connect(backends.conninfo()))
    db:timeout(150)
    for i = 1, 10 do
      local ok, message, code = db:query("SELECT pg_sleep(5)", {})
      assert.is_nil(ok)
      assert.equal("57014", code, string.format("run %d: %s", i, message))
    end
    assert.equal(7, db:query("SELECT 7 AS x", {})[1].x)
  end)

  it("still gives up a connection whose backend never answers within the grace", function()
    -- the statement takes every cancel and goes on, until it ends by itself 2 s after it began
    local never = "DO $$ BEGIN WHILE clock_timestamp() < statement_timestamp() + interval '2 s' LOOP "
      .. "BEGIN PERFORM pg_sleep(0.1); EXCEPTION WHEN query_canceled THEN NULL; END; END LOOP; END $$"
    local ok, message, code, waited = run(never, 150, 200)
    assert.is_nil(ok)
    assert.equal("08006", code, message)
    assert.matches("did not answer the cancel", message, 1, true)
    assert.is_true(waited < 1, string.format("waited %.3f s", waited))
  end)
end)
