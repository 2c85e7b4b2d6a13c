--- The engine: many exchanges at once, made explicit with coroutines.
--
--   local results = mcp.gather {
--     function() return conn:call_tool("slow", {}) end,
--     function() return other:list_tools() end,
--   }
--   -- results[1] = { n = 1, outcome } ; results[2] = { n = 3, nil, message, err }
--
-- The C core drives every transfer of the process with one curl-multi
-- handle. gather runs each function in a coroutine (a task); an exchange a
-- task starts waits by yielding, so the other tasks run while it is in
-- flight. Outside gather nothing yields: every call blocks as it always did.
-- A task polls its own cancel hook and keeps its own budget, so cancelling
-- one operation leaves the others running.
local core = require "mcpclient.core"

local engine = {}

local STEP_MS = 10        -- the longest wait between two looks at the cancel hooks
local WAIT = {}           -- what a task yields while its exchange is in flight

-- The coroutines gather runs. Weak: a task nobody drives any more is collected.
local tasks = setmetatable({}, { __mode = "k" })

local running = coroutine.running

--- Is the running code a task of gather (so it may yield to the engine)?
function engine.inside()
  return tasks[running()] ~= nil
end

-- Give the engine a turn: a task yields to its gather; anything else waits
-- on the engine for at most STEP_MS.
local function pause()
  if engine.inside() then
    coroutine.yield(WAIT)
  else
    core.engine_step(STEP_MS)
  end
end

--- Sleep for `seconds`, letting the other tasks run when called inside one.
-- Returns false when the cancel hook fired before the time was up.
function engine.sleep(seconds, cancel)
  if not engine.inside() then
    local slices = math.max(1, math.ceil(seconds / 0.02))
    for _ = 1, slices do
      if cancel and cancel() then return false end
      core.sleep(seconds / slices)
    end
    return true
  end
  local wake = core.monotonic_ns() + math.floor(seconds * 1e9)
  repeat
    if cancel and cancel() then return false end
    coroutine.yield(WAIT)
  until core.monotonic_ns() >= wake
  return true
end

--[[
One exchange of a task: start it in the engine, then hand stream bytes to
on_stream, poll the cancel hook and yield until it ends. It returns what
leg:send would: the response table, or nil, kind, detail. The guard takes the
transfer out of the engine whatever ends the task: a raise, or a gather that
closes its coroutine.
]]
local function send_in_task(leg, req, on_open)
  local cancel, on_stream = req.cancel, req.on_stream
  if cancel and cancel() then return nil, "cancelled", "the call was cancelled" end
  local started, kind, detail = leg:start(req)
  if not started then return nil, kind, detail end
  local _ <close> = setmetatable({}, { __close = function() leg:abort() end })
  while true do
    local state, chunk = leg:pump()
    if state == "chunk" then
      if on_stream(chunk) then return leg:finish("stopped") end
    elseif state == "done" then
      return leg:finish("done")
    elseif state == "sent" then
      return leg:finish("stopped")
    elseif cancel and cancel() then
      return leg:finish("cancelled")
    else
      local status = on_open and leg:status() or 0
      if status > 0 then
        on_open(status)
        on_open = nil
      end
      coroutine.yield(WAIT)
    end
  end
end

--- Send one exchange on `leg`: inside a task it waits by yielding; outside,
-- and for a leg that cannot be started (a fake a spec injects), it blocks.
-- `on_open(status)`, if given, is called once when the response's head has
-- arrived (inside a task only).
function engine.send(leg, req, on_open)
  if leg.start and engine.inside() then return send_in_task(leg, req, on_open) end
  return leg:send(req)
end

--- Wait until `ready()` is true: the other tasks run meanwhile. Outside a
-- task nothing else can make it true, so it returns at once.
function engine.wait_until(ready)
  while engine.inside() and not ready() do coroutine.yield(WAIT) end
end

-- What one finished task gives: its results packed, or its error.
local function settle(resumed)
  if resumed[1] then return table.pack(table.unpack(resumed, 2, resumed.n)) end
  return { n = 0, error = resumed[2] }
end

-- Resume every task still running; returns how many are left.
local function round(cos, results)
  local left = 0
  for i, co in pairs(cos) do
    local resumed = table.pack(coroutine.resume(co))
    if coroutine.status(co) == "dead" then
      results[i] = settle(resumed)
      cos[i], tasks[co] = nil, nil
    else
      left = left + 1
    end
  end
  return left
end

--- Run the functions at once; returns, in order, one packed table of each
-- function's results ({ n = …, … } as table.pack gives). A function that
-- raised gives { n = 0, error = <the value it raised> }: what pcall would
-- have shown its caller. gather may be nested: an inner gather's tasks wait
-- on the same engine.
function engine.gather(fns)
  if type(fns) ~= "table" then error("gather expects a table of functions", 2) end
  local n = fns.n or #fns
  local cos, results = {}, {}
  for i = 1, n do
    if type(fns[i]) ~= "function" then error(string.format("gather: entry %d is not a function", i), 2) end
  end
  -- Tasks that are still suspended when gather ends early (its own task was
  -- closed) are closed too, which takes their transfers out of the engine.
  local _ <close> = setmetatable({}, { __close = function()
    for _, co in pairs(cos) do tasks[co] = nil; coroutine.close(co) end
  end })
  for i = 1, n do
    cos[i] = coroutine.create(fns[i])
    tasks[cos[i]] = true
  end
  while round(cos, results) > 0 do pause() end
  return results
end

return engine
