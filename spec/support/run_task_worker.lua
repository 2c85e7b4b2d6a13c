--- A worker process of spec/integration/task_durable_spec.lua: one host of a run whose call
--- became a task.
--
--   lua5.4 spec/support/run_task_worker.lua <store location> start <tool> <ms> <lease seconds>
--     starts a run (tasks on) and calls <tool> { ms = <ms>, text = "durable" }; prints
--     "started <run uid>", then "returned <status> <is_error>" and "text <result>"
--   lua5.4 spec/support/run_task_worker.lua <store location> take <run uid>
--     takes the run over (run.take_over), prints "took <n results>", "text <first result>",
--     then finishes the run and prints "finished <status>"
--
-- (support.worker.start gives it LUA_PATH reaching lua/ and spec/, LUA_CPATH build/.) The owner is
-- "worker:<mode>:<pid>".
local run = require "mcpclient.agent.run"
local store = require "mcpclient.agent.store"
local worker = require "support.worker"

local location, mode = arg[1], arg[2]
local say, pid = worker.say, worker.pid

local function options(extra)
  extra.tasks, extra.task_budget = true, 30
  return worker.options(extra)
end

local s = assert(store.open(location))
if mode == "start" then
  local r = assert(run.start(s, options { owner = "worker:start:" .. pid(),
    lease_seconds = math.tointeger(tonumber(arg[5])) }))
  say("started ", r.uid)
  local result = r:invoke(arg[3], { ms = math.tointeger(tonumber(arg[4])), text = "durable" })
  say("returned ", r.status, " ", tostring(result.is_error))
  say("text ", worker.one_line(result.text))
  r:finish()
elseif mode == "take" then
  local r, results = run.take_over(s, math.tointeger(tonumber(arg[3])), options { owner = "worker:take:" .. pid() })
  if not r then
    say("refused ", tostring(results))
  else
    say("took ", #results)
    say("text ", results[1] and worker.one_line(results[1].text) or "-")
    say("finished ", r:finish())
  end
end
s:close()
