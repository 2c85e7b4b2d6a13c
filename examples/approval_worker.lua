--- A headless worker's run waits for a person, who approves one call from another process; a
--- second worker takes the run over and finishes it.
--
--   lua5.4 examples/approval_worker.lua <server url> <store path>
--
-- (Run from the project root with LUA_PATH="./lua/?.lua;./lua/?/init.lua;;"
-- LUA_CPATH="./build/?.so;;". Works against server-everything.) It plays three parts, each a
-- process of its own, one after the other, on one store:
--
--   1. the first worker (this file, "worker1"): starts a run and plays a model turn of three calls
--      in the model's order: echo on "mem" (no approval: it runs), get-sum on "ev" (its operator
--      asks a person for every call: the turn stops there) and echo on "mem" again (it waits
--      behind get-sum). It prints what waits, hands the run over (run:release) and exits;
--   2. a person: `mcpclient runs --waiting`, then `mcpclient approve <run> <call id>` for the one
--      call that needs approval;
--   3. the second worker (this file, "worker2"): takes the run over (run.take_over, by the run's
--      uid as `mcpclient runs` prints it), resumes it (the approved call and the one behind it are
--      sent, once each) and finishes it.
--
-- A real worker would not release at once: it would wait for a person (run:renew) and release the
-- run, or let its lease run out, when it stops. The parts also run alone:
--   lua5.4 examples/approval_worker.lua <server url> <store path> worker1
--   bin/mcpclient --db <store path> approve <run> toolu_sum
--   lua5.4 examples/approval_worker.lua <server url> <store path> worker2 <run>
local catalogue = require "mcpclient.agent.catalogue"
local run = require "mcpclient.agent.run"
local store_module = require "mcpclient.agent.store"

local url = arg[1] or error("usage: lua5.4 examples/approval_worker.lua <server url> <store path> [part]")
local path = arg[2] or error("usage: lua5.4 examples/approval_worker.lua <server url> <store path> [part]")
local part = arg[3] or "all"

local function say(fmt, ...) print(string.format(fmt, ...)) end

-- Far-side text on a terminal: one line, control characters out, bounded.
local function shown(text, limit)
  text = tostring(text):gsub("%c+", " ")
  limit = limit or 70
  if #text > limit then text = text:sub(1, limit - 3) .. "..." end
  return text
end

-- What every worker of this host runs with: who it runs for, its model's zone.
local function options(owner)
  return {
    user = { name = "ops", uid = 1, admin = true },
    configuration = { identifier = "local-model", provider = "ollama", model = "scripted" },
    providers = { ollama = { zone = "local" } },
    owner = owner,
  }
end

-- The operator's setup: the same server twice, "mem" without approval and "ev" with it.
local function setup(store)
  for _, s in ipairs { { identifier = "mem", approval = "0" }, { identifier = "ev", approval = "1" } } do
    local uid = assert(store:add_server { identifier = s.identifier, name = "Example (" .. s.identifier .. ")",
      url = url, data_class = "publicContent", requires_approval = s.approval, enabled = true })
    local report = catalogue.import(store, assert(store:server(uid)))
    if report.refused then error("the import was refused: " .. report.skip_reasons[1]) end
  end
  assert(store:set_tool_enabled("mcp_mem_echo", true))
  assert(store:set_tool_enabled("mcp_ev_get-sum", true))
end

local function worker1(store)
  local r = assert(run.start(store, options("example:worker1")))
  -- the ids are the model's tool-call ids: the person decides by them
  local calls = {
    { id = "toolu_first", name = "mcp_mem_echo", arguments = { message = "before the sum" } },
    { id = "toolu_sum", name = "mcp_ev_get-sum", arguments = { a = 2, b = 40 } },
    { id = "toolu_after", name = "mcp_mem_echo", arguments = { message = "after the sum" } },
  }
  local results = r:turn(calls)
  for i, result in ipairs(results) do
    say("[worker1] %s -> %s", calls[i].id, result.suspended and "waits" or shown(result.text))
  end
  for _, p in ipairs(r:pending()) do
    say("[worker1] run %d waits on %s (%s): %s", r.uid, p.id, p.reason, p.tool)
  end
  assert(r:release())
  say("[worker1] released run %d and exits", r.uid)
  return r.uid
end

local function worker2(store, uid_text)
  local r = assert(run.take_over(store, uid_text, options("example:worker2")))
  say("[worker2] took run %d over (%s)", r.uid, r.status)
  -- the turn taken over is what waits: the call that ran in worker1 is in the audit, not here
  local waiting = r:pending()
  local results = r:resume()
  for i, result in ipairs(results) do
    say("[worker2] %s -> %s%s", waiting[i].id, result.is_error and "ERROR " or "", shown(result.text))
  end
  say("[worker2] run %d ended %s", r.uid, r:finish())
end

-- This interpreter and this file, to start the parts as processes of their own.
local function sh(word) return "'" .. tostring(word):gsub("'", "'\\''") .. "'" end
local lua, script = arg[-1] or "lua5.4", arg[0]
local mcpclient = script:gsub("examples/approval_worker%.lua$", "bin/mcpclient")

local store = assert(store_module.open(path))
if part == "worker1" then
  worker1(store)
elseif part == "worker2" then
  worker2(store, arg[4] or error("worker2 needs the run's id"))
else
  setup(store)
  store:close()
  local first = assert(io.popen(table.concat({ lua, sh(script), sh(url), sh(path), "worker1" }, " ")))
  local said = first:read("a")
  assert(first:close(), "the first worker failed")
  io.write(said)
  local uid = assert(said:match("released run (%d+)"), "the first worker did not hand a run over")
  say("[person] mcpclient runs --waiting; mcpclient approve %s toolu_sum", uid)
  assert(os.execute(table.concat({ lua, sh(mcpclient), "--db", sh(path), "runs", "--waiting" }, " ")))
  assert(os.execute(table.concat({ lua, sh(mcpclient), "--db", sh(path), "approve", uid, "toolu_sum" }, " ")))
  assert(os.execute(table.concat({ lua, sh(script), sh(url), sh(path), "worker2", uid }, " ")),
    "the second worker failed")
  return
end
store:close()
