-- The store's database drivers live in their own C module, mcpclient.db, so a
-- program that only speaks MCP never maps libsqlite3 or libpq: each mapping costs
-- resident memory in every such process. Checked in a fresh lua5.4, since the
-- busted process has long since loaded everything.
local quote = require("support.shell").quote

-- A child script (its steps, comma-separated, in $STEPS) prints one line per step: the step's name, then which of the
-- two libraries /proc/self/maps holds at that point.
local CHILD = [[
local function mapped()
  local f = assert(io.open("/proc/self/maps"))
  local maps = f:read("a")
  f:close()
  local found = {}
  if maps:find("/libsqlite3[^/\n]*\n") then found[#found + 1] = "libsqlite3" end
  if maps:find("/libpq[^/\n]*\n") then found[#found + 1] = "libpq" end
  return #found > 0 and table.concat(found, ",") or "none"
end
for step in os.getenv("STEPS"):gmatch("[^,]+") do
  if step == "client" then
    local mcp = require "mcpclient"
    assert(mcp.json.null ~= nil and mcp.connect ~= nil)
  elseif step == "store" then
    require "mcpclient.agent.store"
  elseif step == "db" then
    require "mcpclient.db"
  elseif step == "null" then
    -- json.null binds SQL NULL whichever module was opened first
    local db = require("mcpclient.db").sqlite_open(":memory:")
    local null = require("mcpclient.json").null
    assert(db:exec("CREATE TABLE t (a)"))
    assert(db:insert("INSERT INTO t (a) VALUES (?)", { null }))
    local rows = assert(db:query("SELECT a IS NULL AS n FROM t"))
    assert(rows[1].n == 1, "json.null did not bind NULL")
  end
  print(step, mapped())
end
]]

-- Run the steps (comma-separated) in a fresh lua5.4 with this suite's search paths
-- (so the ASan tree's modules under `make asan`); returns step -> mapped libraries.
local function run(steps)
  local command = string.format("STEPS=%s LUA_PATH=%s LUA_CPATH=%s lua5.4 -e %s 2>&1", quote(steps),
    quote("./lua/?.lua;./lua/?/init.lua;" .. package.path), quote(package.cpath), quote(CHILD))
  local pipe = assert(io.popen(command))
  local out = pipe:read("a")
  local ok = pipe:close()
  assert(ok, out)
  local seen = {}
  for step, libraries in out:gmatch("(%w+)\t([%w,]+)\n") do seen[step] = libraries end
  return seen, out
end

describe("the C modules", function()
  it("requiring mcpclient maps neither libsqlite3 nor libpq; requiring mcpclient.db maps both", function()
    local seen, out = run("client,db")
    assert.equal("none", seen.client, out)
    assert.equal("libsqlite3,libpq", seen.db, out)
  end)

  it("loading the agent host's store maps them only when it first opens a database", function()
    local seen, out = run("client,store")
    assert.equal("none", seen.store, out)
  end)

  it("binds json.null as SQL NULL when mcpclient.db is opened before mcpclient.core", function()
    local seen, out = run("db,client,null")
    assert.equal("libsqlite3,libpq", seen.null, out)
  end)
end)
