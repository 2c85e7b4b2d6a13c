-- One writer per pipe: over one stdio connection every message (a request, a notification, a
-- cancel notice, the answer to a server request) goes to the child's stdin whole, before any
-- byte of another, in order; an operation waiting for the pipe keeps its budget and its cancel
-- hook, and one that gives up there was never written. The scripted server in its counting mode
-- (spec/support/stdio_server.lua) keeps every request id, the tag of every digest and the lines it
-- could not read, and answers digest {tag, data} with "<tag> <bytes> ok" when data arrived intact.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local engine = require "mcpclient.engine"
local catalogue = require "mcpclient.agent.catalogue"
local run = require "mcpclient.agent.run"
local servers = require "support.servers"
local stdio = require "support.stdio"

local json = core.json
local KIB = 1024

local function connect(mode, extra)
  return mcp.connect(stdio.options(mode, extra))
end

local function quiet() end

-- The data of digest for `tag`, `size` bytes long (the server makes the same to compare).
local function pattern(tag, size)
  local unit = tag .. ";"
  return unit:rep(size // #unit + 1):sub(1, size)
end

local function digest(conn, tag, size, opts)
  return conn:call_tool("digest", { tag = tag, data = pattern(tag, size) }, opts)
end

-- What the counting server kept: { ids, tags, unreadable }.
local function received(conn)
  return json.decode(assert(conn:call_tool("received")).content[1].text)
end

-- How often each value occurs in a list.
local function counts(list)
  local seen = {}
  for _, v in ipairs(list) do seen[v] = (seen[v] or 0) + 1 end
  return seen
end

-- Every id once: no request was written twice, none was lost in another's bytes.
local function each_once(ids)
  for id, n in pairs(counts(ids)) do
    assert.equal(1, n, "request id " .. tostring(id) .. " arrived " .. n .. " times")
  end
end

describe("one writer per stdio pipe", function()
  after_each(function()
    collectgarbage()
    collectgarbage()
    assert.equal(0, stdio.children().zombies)
  end)

  -- How the lines of several writers could mix: the child reads nothing for a moment (a slow call),
  -- so the first 600 KB line fills the pipe and waits half written; a small message begun meanwhile
  -- by a task that gather resumes first (it comes first in its list) finds room the moment the child
  -- reads again, before the half-written line goes on.

  it("writes three 600 KB calls of one gather each whole, and a message begun later after them", function()
    local conn <close> = connect("counting", { budget = 10, log = quiet })
    assert(conn:ping())
    local tags = { "first", "second", "third" }
    local fns = {
      function()
        engine.sleep(0.05)
        return digest(conn, "late", 10)
      end,
      function() return conn:call_tool("slow", { seconds = 0.2 }) end,
    }
    for i, tag in ipairs(tags) do fns[i + 2] = function() return digest(conn, tag, 600 * KIB) end end
    local results = mcp.gather(fns)
    assert.equal("late 10 ok", assert(results[1][1], tostring(results[1][2])).text)
    assert.equal("slept", assert(results[2][1], tostring(results[2][2])).text)
    for i, tag in ipairs(tags) do
      assert.equal(tag .. " " .. 600 * KIB .. " ok", assert(results[i + 2][1], tostring(results[i + 2][2])).text)
    end
    local report = received(conn)
    assert.equal(0, report.unreadable)
    -- in the order they came: the three lines begun first, the late one after them
    assert.same({ "first", "second", "third", "late" }, report.tags)
    each_once(report.ids)
  end)

  it("writes the calls of one run:turn to one stdio server each whole", function()
    local store = servers.open_store()
    local provider
    finally(function()
      if provider then provider.close() end
      store:close()
    end)
    local uid = servers.add(store, { identifier = "local", name = "Local", url = "",
      command = stdio.command("counting"), env = stdio.env(), data_class = "publicContent", requires_approval = "0",
      enabled = true })
    local report = catalogue.import(store, assert(store:server(uid)), { now = 1, log = quiet })
    assert.is_false(report.refused, report.skip_reasons[1])
    assert(store:set_tool_enabled("mcp_local_digest", true))
    assert(store:set_tool_enabled("mcp_local_slow", true))
    provider = catalogue.provider(store, { log = quiet })
    local function start()
      return assert(run.start(store, { user = { name = "ops", uid = 7, admin = true }, provider = provider,
        providers = { ["p-local"] = { zone = "local" } }, log = quiet,
        configuration = { identifier = "cfg", provider = "p-local", model = "m" } }))
    end
    -- two runs over the provider's one connection to the server: the turn's three 600 KB calls, and
    -- a small call of the other run begun while the first of them waits half written
    local r, other = start(), start()
    assert.equal("warm 1 ok", other:invoke("mcp_local_digest", { tag = "warm", data = "w" }).text)
    local calls = { { name = "mcp_local_slow", arguments = { seconds = 0.2 } } }
    for i, tag in ipairs { "one", "two", "three" } do
      calls[i + 1] = { name = "mcp_local_digest", arguments = { tag = tag, data = pattern(tag, 600 * KIB) } }
    end
    local outcome = mcp.gather {
      function()
        engine.sleep(0.05)
        return other:invoke("mcp_local_digest", { tag = "late", data = pattern("late", 10) })
      end,
      function() return r:turn(calls) end,
    }
    assert.equal("late 10 ok", outcome[1][1].text)
    local results = outcome[2][1]
    assert.equal("slept", results[1].text)
    for i, tag in ipairs { "one", "two", "three" } do
      assert.is_nil(results[i + 1].err, results[i + 1].text)
      assert.equal(tag .. " " .. 600 * KIB .. " ok", results[i + 1].text)
    end
    assert.equal("completed", r:finish())
    assert.equal("completed", other:finish())
  end)

  it("queues a cancel notice behind a line half written: neither cuts into the other", function()
    local conn <close> = connect("counting", { budget = 10, log = quiet })
    assert(conn:ping())
    local t0 = core.now()
    local results = mcp.gather {
      -- the child sleeps on this call and reads nothing meanwhile; cancelled after 0.1 s (the sleep is
      -- ten times that, so a slow machine still cancels it before it could answer)
      function()
        return conn:call_tool("slow", { seconds = 1 }, { cancel = function() return core.now() - t0 > 0.1 end })
      end,
      -- 1 MiB: a pipe takes 64 KiB, so this line is half written when the notice is sent
      function() return digest(conn, "big", 1024 * KIB) end,
    }
    assert.equal("cancelled", results[1][3].kind)
    assert.equal("big " .. 1024 * KIB .. " ok", assert(results[2][1], tostring(results[2][2])).text)
    local report = received(conn)
    assert.equal(0, report.unreadable)
    each_once(report.ids)
  end)

  it("fails a call whose budget runs out or that is cancelled while it waits for the pipe, unwritten", function()
    local conn <close> = connect("counting", { budget = 10, log = quiet })
    assert(conn:ping())
    local t0 = core.now()
    local results = mcp.gather {
      function() return conn:call_tool("slow", { seconds = 0.6 }) end,        -- the child reads nothing for 0.6 s
      function() return digest(conn, "holder", 1024 * KIB) end,                -- holds the pipe, half written
      function() return digest(conn, "spent", 10, { budget = 0.2 }) end,       -- waits: its budget runs out
      function()                                                                -- waits: cancelled
        return digest(conn, "dropped", 10, { cancel = function() return core.now() - t0 > 0.1 end })
      end,
      function()                                                                -- waits its turn: written later
        engine.sleep(0.05)
        return digest(conn, "later", 10)
      end,
    }
    assert.equal("slept", assert(results[1][1]).text)
    assert.equal("holder " .. 1024 * KIB .. " ok", assert(results[2][1], tostring(results[2][2])).text)
    assert.equal("deadline", results[3][3].kind)
    assert.equal("cancelled", results[4][3].kind)
    assert.is_false(results[4][3].in_flight)
    assert.equal("later 10 ok", assert(results[5][1], tostring(results[5][2])).text)
    -- waited out or cancelled in line: never written, not even once the pipe was free
    engine.sleep(0.2)
    local report = received(conn)
    assert.same({ holder = 1, later = 1 }, counts(report.tags))
    assert.equal(0, report.unreadable)
    each_once(report.ids)
  end)

  it("puts out of line a writer whose coroutine is never resumed again, once its budget is long spent", function()
    local conn <close> = connect("counting", { budget = 10, log = quiet })
    assert(conn:ping())
    -- host coroutines that wait by yielding to this spec, which then drops them
    mcp.loop { wait = function() coroutine.yield() end }
    finally(function() mcp.loop {} end)
    local busy = coroutine.wrap(function() return conn:call_tool("slow", { seconds = 1 }) end)
    busy()  -- written: the child sleeps and reads nothing
    local ghost = coroutine.wrap(function() return digest(conn, "ghost", 1024 * KIB, { budget = 0.3 }) end)
    ghost()  -- holds the pipe, its line half written; never resumed again
    -- a plain call waits in line behind it; once the ghost's budget is a second gone it is put out of
    -- line, its cut-off line stops the child, and this call goes to a new one
    local t0 = core.now()
    assert.equal("mine 10 ok", assert(digest(conn, "mine", 10, { budget = 5 })).text)
    assert.is_true(core.now() - t0 < 3, "waited " .. (core.now() - t0) .. " s")
    local report = received(conn)
    assert.same({ mine = 1 }, counts(report.tags))
    assert.equal(0, report.unreadable)
  end)
end)
