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
-- (LUA_PATH / LUA_CPATH must reach lua/ and build/.) The owner is "worker:<mode>:<pid>".
local run = require "mcpclient.agent.run"
local store = require "mcpclient.agent.store"

local location, mode = arg[1], arg[2]

local function say(...)
  io.stdout:write(...)
  io.stdout:write("\n")
  io.stdout:flush()
end

local function pid()
  local f = io.open("/proc/self/stat", "r")
  local text = f and f:read("l") or "0"
  if f then f:close() end
  return text:match("^(%d+)")
end

local common = {
  user = { name = "ops", uid = 1, admin = true },
  configuration = { identifier = "cfg-local", provider = "p-local" },
  providers = { ["p-local"] = { zone = "local" } },
  tasks = true,
  task_budget = 30,
  log = function(_, message) io.stderr:write(message, "\n") end,
}

local s = assert(store.open(location))
if mode == "start" then
  local options = { owner = "worker:start:" .. pid(), lease_seconds = math.tointeger(tonumber(arg[5])) }
  for k, v in pairs(common) do options[k] = v end
  local r = assert(run.start(s, options))
  say("started ", r.uid)
  local result = r:invoke(arg[3], { ms = math.tointeger(tonumber(arg[4])), text = "durable" })
  say("returned ", r.status, " ", tostring(result.is_error))
  say("text ", (result.text:gsub("[\r\n]", " ")))
  r:finish()
elseif mode == "take" then
  local options = { owner = "worker:take:" .. pid() }
  for k, v in pairs(common) do options[k] = v end
  local r, results = run.take_over(s, math.tointeger(tonumber(arg[3])), options)
  if not r then
    say("refused ", tostring(results))
  else
    say("took ", #results)
    say("text ", results[1] and (results[1].text:gsub("[\r\n]", " ")) or "-")
    say("finished ", r:finish())
  end
end
s:close()
