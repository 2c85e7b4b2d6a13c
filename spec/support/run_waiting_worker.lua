--- A worker process of spec/integration/run_waiting_spec.lua: one holder of a run that waits for
--- approval.
--
--   lua5.4 spec/support/run_waiting_worker.lua <store location> suspend <tool> <lease seconds> <control file>
--     starts a run and calls <tool> { message = "once" }, which waits for approval; prints
--     "suspended <run uid>", then waits for a word in <control file>:
--       approve  approve() and resume() here; prints "approve <ok> <kind>", "status <status>" and
--                "text <first result>" when it resumed
--       release  release(); prints "released <ok>"
--     and exits (without finishing the run).
--   lua5.4 spec/support/run_waiting_worker.lua <store location> suspend_two <tool> <lease seconds>
--     starts a run and plays one turn of two calls of <tool>, ids "first" ({ message = "one" }) and
--     "second" ({ message = "two" }), both waiting for approval; prints "suspended <run uid> true",
--     releases the run and prints "released <ok>".
--   lua5.4 spec/support/run_waiting_worker.lua <store location> take <run uid>
--     takes the run over (run.take_over); prints "took <status> <steps waiting> <decision>", resumes
--     it with the decision a person recorded, prints "text <first result>" and "result <id> <text>"
--     for each step that waited ("waits" for one that waits again), finishes it and prints
--     "finished <status>" ("refused <message>" when it cannot be taken over).
--
-- (support.worker.start gives it LUA_PATH reaching lua/ and spec/, LUA_CPATH build/.) The owner is
-- "worker:<mode>:<pid>".
local core = require "mcpclient.core"
local run = require "mcpclient.agent.run"
local store = require "mcpclient.agent.store"
local worker = require "support.worker"

local location, mode = arg[1], arg[2]
local say, pid, one_line, options = worker.say, worker.pid, worker.one_line, worker.options

-- The first word written to `path`, waited for (at most 60 s).
local function order(path)
  local deadline = core.now() + 60
  while core.now() < deadline do
    local f = io.open(path, "r")
    local word = f and f:read("l")
    if f then f:close() end
    if word and word ~= "" then return word end
    core.sleep(0.02)
  end
  return "timeout"
end

local s = assert(store.open(location))
if mode == "suspend" then
  local r = assert(run.start(s, options { owner = "worker:suspend:" .. pid(),
    lease_seconds = math.tointeger(tonumber(arg[4])) }))
  local result = r:invoke(arg[3], { message = "once" })
  say("suspended ", r.uid, " ", tostring(result.suspended))
  local word = order(arg[5])
  if word == "approve" then
    local ok, _, err = r:approve()
    say("approve ", tostring(ok), " ", err and err.kind or "-")
    say("status ", r.status)
    if r.status == run.WAITING then say("text ", one_line(r:resume()[1].text)) end
  elseif word == "release" then
    say("released ", tostring(r:release()))
  end
elseif mode == "suspend_two" then
  local r = assert(run.start(s, options { owner = "worker:suspend:" .. pid(),
    lease_seconds = math.tointeger(tonumber(arg[4])) }))
  local results = r:turn { { id = "first", name = arg[3], arguments = { message = "one" } },
    { id = "second", name = arg[3], arguments = { message = "two" } } }
  say("suspended ", r.uid, " ", tostring(results[1].suspended and results[2].suspended))
  say("released ", tostring(r:release()))
elseif mode == "take" then
  local r, message = run.take_over(s, math.tointeger(tonumber(arg[3])), options { owner = "worker:take:" .. pid() })
  if not r then
    say("refused ", one_line(message))
  else
    local decision = r.status == run.WAITING and run.waiting(assert(s:run(r.uid))).approval or nil
    say("took ", r.status, " ", #r:pending(), " ", tostring(decision))
    if r.status == run.WAITING then
      local ids = {}
      for i, p in ipairs(r:pending()) do ids[i] = p.id end
      local results = r:resume()
      say("text ", one_line(results[1].text))
      for i, result in ipairs(results) do
        say("result ", ids[i], " ", result.suspended and "waits" or one_line(result.text))
      end
    end
    say("finished ", r:finish())
  end
end
s:close()
