--- The engine: many exchanges at once, made explicit with coroutines.
--
--   local results = mcp.gather {
--     function() return conn:call_tool("slow", {}) end,
--     function() return other:list_tools() end,
--   }
--   -- results[1] = { n = 1, outcome } ; results[2] = { n = 3, nil, message, err }
--
-- The C core's engine is one epoll descriptor: every HTTP transfer's socket,
-- every descriptor an operation waits on (a stdio child's pipes) and
-- libcurl's timer wake the same wait. gather runs each function in a
-- coroutine (a task); an exchange a task starts waits by yielding, so the
-- other tasks run while it is in flight. A task polls its own cancel hook and
-- keeps its own budget, so cancelling one operation leaves the others running.
--
-- Three ways to wait, chosen where the operation runs:
--   * in a task of gather: yield to gather, which waits on the engine for all;
--   * in another coroutine, when the host installed a wait hook (mcp.loop):
--     call the hook, which yields to the host's own event loop until the
--     engine's descriptor is readable or its timeout has passed;
--   * anywhere else: block on the engine, as a plain call always did.
local core = require "mcpclient.core"

local engine = {}

local STEP_MS = 10        -- the longest wait between two looks at the cancel hooks
local STEP = STEP_MS / 1000
local WAIT = {}           -- what a task yields while its exchange is in flight

-- The coroutines gather runs. Weak: a task nobody drives any more is collected.
local tasks = setmetatable({}, { __mode = "k" })

-- What mcp.engine.step runs after its turn: owner -> fn(owner). Weak by
-- owner, so a connection nobody holds is not kept alive by it.
local after_step = setmetatable({}, { __mode = "k" })

--- After each mcp.engine.step, call fn(owner) (fn nil: no more).
function engine.after_step(owner, fn)
  after_step[owner] = fn
end

-- The host's wait hook (mcp.loop), and how many operations are in it now.
local host_wait = nil
local hosted_waits = 0

local running, yield, isyieldable = coroutine.running, coroutine.yield, coroutine.isyieldable

--- Is the running code a task of gather (so it may yield to the engine)?
function engine.inside()
  return tasks[running()] ~= nil
end

-- Does the running code wait through the host's hook? Only in a coroutine
-- that may yield (not the main one, not under a C call that cannot yield).
local function hosted()
  if not host_wait then return false end
  local _, main = running()
  return not main and isyieldable()
end

-- Coroutines a raising hook ended. Lua does not close the to-be-closed
-- variables of a coroutine an error ended (the guards that take a transfer
-- out of the engine, a progress listener off its session): the engine closes
-- such a coroutine itself at its next entry (a wait, or the host's poll of
-- mcp.engine), once the raise has left it. Held strongly until then, so one
-- the host dropped at once is closed all the same.
local faulted = {}

-- Close the coroutines a raising hook ended, now that they are dead (one
-- that caught the raise with pcall had its variables closed by pcall, and is
-- dropped once it ends whichever way).
local function close_faulted()
  for co in pairs(faulted) do
    if coroutine.status(co) == "dead" then
      faulted[co] = nil
      coroutine.close(co)
    end
  end
end

-- The host's hook, with the count of operations in it kept. The count is
-- given back on both ends a raise can take without a <close> in this
-- coroutine: the hook raised (pcall sees it), or the host closed the
-- coroutine while the hook waited (the <close> here runs then, as
-- coroutine.close closes a suspended coroutine's variables).
local function in_hook()
  local counted = true
  local function leave()
    if counted then counted, hosted_waits = false, hosted_waits - 1 end
  end
  hosted_waits = hosted_waits + 1
  local _ <close> = setmetatable({}, { __close = leave })
  local ok, answer = pcall(host_wait, engine.host)
  leave()
  if not ok then
    faulted[running()] = true
    error(answer, 0)
  end
  return answer
end

-- One wait through the host's hook, then a turn of the engine for what woke
-- it. A hook that answers false cannot yield from this coroutine (one the
-- host's loop does not resume): the wait blocks on the engine instead. A
-- hook that raises ends the operation with that raise; the engine closes
-- what the operation held once the coroutine is dead (close_faulted).
local function wait_on_host(ms)
  close_faulted()
  local answer = in_hook()
  core.engine_step(answer == false and ms or 0)
end

-- Give the engine a turn: a task yields to its gather; a hosted coroutine
-- waits through the host's hook; anything else waits on the engine for at
-- most `ms` (STEP_MS when not given).
local function pause(ms)
  if tasks[running()] then
    yield(WAIT)
  elseif host_wait and hosted() then  -- without a host hook nothing is asked (the warm path)
    wait_on_host(ms or STEP_MS)
  else
    core.engine_step(ms or STEP_MS)
  end
end

--- One turn of the engine for a waiter that reads its own readiness after
-- it (a stdio child's pipes, which every turn reads): inside a task it
-- yields to gather, in a hosted coroutine it waits through the host's hook,
-- elsewhere it blocks on the engine. It waits at most until `until_s`
-- (seconds on the core.now() clock, or nil) and at most 10 ms, so the
-- caller polls its cancel hook and budget as often as a transfer's are.
function engine.turn(until_s)
  local ms = STEP_MS
  if until_s then
    local left = until_s - core.now()
    if left < STEP then ms = left <= 0 and 0 or math.ceil(left * 1000) end
  end
  pause(ms)
end

-- May the running code wait without blocking the process?
local function can_yield()
  return tasks[running()] ~= nil or hosted()
end

--- Sleep for `seconds`, letting the other tasks (or the host's loop) run
-- meanwhile. Returns false when the cancel hook fired before the time was up.
function engine.sleep(seconds, cancel)
  if not can_yield() then
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
    pause()
  until core.monotonic_ns() >= wake
  return true
end

--[[
One exchange that waits without blocking: start it in the engine, then hand
stream bytes to on_stream, poll the cancel hook and pause until it ends. It
returns what leg:send would: the response table, or nil, kind, detail. The
guard takes the transfer out of the engine whatever ends the wait: a raise,
or a gather (or host) that closes its coroutine.
]]
local function send_waiting(leg, req, on_open)
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
      pause()
    end
  end
end

--- Send one exchange on `leg`: inside a task or a hosted coroutine it waits
-- without blocking; elsewhere, and for a leg that cannot be started (a fake a
-- spec injects), it blocks. `on_open(status)`, if given, is called once when
-- the response's head has arrived (when waiting without blocking only).
function engine.send(leg, req, on_open)
  if leg.start and can_yield() then return send_waiting(leg, req, on_open) end
  return leg:send(req)
end

--- Wait until `ready()` is true: the other tasks (or host coroutines) run
-- meanwhile. Where nothing else can run, nothing else can make it true, so
-- it returns at once.
function engine.wait_until(ready)
  while can_yield() and not ready() do pause() end
end

-- Stops watching a descriptor when its waiter is done, however that ends.
local function unwatch(fd)
  return setmetatable({}, { __close = function() core.engine_watch(fd, nil) end })
end

--- Wait until descriptor `fd` is ready for `events` ("r", "w" or "rw").
-- Inside a task it yields to gather; in a hosted coroutine it waits through
-- the host's hook; elsewhere it blocks on the engine, which wakes as soon as
-- the descriptor is ready (HTTP transfers in flight keep moving meanwhile).
-- `deadline` (seconds on the core.now() clock, or nil) and `cancel` (a hook,
-- or nil) are polled as a transfer's are, at least every 10 ms.
-- Returns the events the descriptor is ready for (a hang-up or error counts
-- as ready: the read sees end of file, the write the error), or nil, "timeout",
-- detail once the deadline passed, or nil, "cancelled", detail once the hook
-- said so. Readiness wins over both when they coincide. One waiter per
-- descriptor at a time; a descriptor that is not open raises.
function engine.await(fd, events, deadline, cancel)
  local ready = core.fd_ready(fd, events)
  if ready then return ready end
  core.engine_watch(fd, events)
  local _ <close> = unwatch(fd)
  while true do
    if cancel and cancel() then return nil, "cancelled", "the call was cancelled" end
    local ms = STEP_MS
    if deadline then
      local left = deadline - core.now()
      if left <= 0 then return nil, "timeout", "the time budget ran out while waiting for the server" end
      if left < STEP then ms = math.max(1, math.ceil(left * 1000)) end
    end
    pause(ms)
    ready = core.fd_ready(fd, events)
    if ready then return ready end
  end
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
-- raised gives { n = 0, error = &lt;the value it raised&gt; }: what pcall would
-- have shown its caller. gather may be nested: an inner gather's tasks wait
-- on the same engine. In a hosted coroutine gather waits through the host's
-- hook instead of blocking.
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

--- The engine as a pollable (mcp.engine), the protocol cqueues speaks and any
-- event loop can follow: poll `pollfd()` for `events()`, at most `timeout()`
-- seconds, then call `step()`. Each function ignores its arguments, so both
-- `mcp.engine.step()` and `e:step()` work.
engine.host = {
  --- The engine's descriptor: readable when a transfer, a watched descriptor
  -- or a timer needs a turn.
  pollfd = function()
    close_faulted()
    return core.engine_pollfd()
  end,
  --- What to poll pollfd for: always "r".
  events = function() return "r" end,
  --- Seconds until the engine needs a turn whatever the descriptor does, or
  -- nil: libcurl's next timer, and at most 10 ms while an operation waits
  -- through the host's hook (its cancel hook and budget are polled so often).
  timeout = function()
    close_faulted()
    local t = core.engine_timeout()
    if hosted_waits > 0 and (t == nil or t > STEP) then t = STEP end
    return t
  end,
  --- Run what is ready, waiting at most `timeout` seconds for something to
  -- be (0 when not given: never blocks), and hand out what arrived between
  -- operations: each connection's after_step, first with the time the wait
  -- ends (a connection that hears its server only on a stream it holds holds
  -- it until then or until something came), then once more after the
  -- engine's wait, for what the wait read. Called as step(t) or e:step(t).
  step = function(a, b)
    local timeout = type(a) == "table" and b or a
    if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout < 0) then
      error("step: timeout must be a number of seconds, 0 or more", 2)
    end
    close_faulted()
    local until_s = core.now() + math.min(timeout or 0, 86400)
    if timeout and timeout > 0 then
      for owner, fn in pairs(after_step) do fn(owner, until_s) end
    end
    local left = until_s - core.now()
    core.engine_step(left > 0 and math.ceil(left * 1000) or 0)
    for owner, fn in pairs(after_step) do fn(owner) end
  end,
}

-- The bridge mcp.loop{ luv = uv } installs, while it is installed.
local luv_bridge = nil

-- The luv (libuv) bridge: libuv knows nothing of coroutines, so the wait
-- hook parks the calling coroutine, watches the engine's descriptor with one
-- poll handle and its timeout with one timer, and resumes every parked
-- coroutine when either fires. Only the coroutines started with
-- bridge.wrap are parked (the loop resumes those); a wait in any other
-- coroutine returns false and blocks on the engine, as without a hook.
local function new_luv_bridge(uv)
  if type(uv) ~= "table" or type(uv.new_poll) ~= "function" or type(uv.new_timer) ~= "function" then
    error("loop: 'luv' must be the luv module (require \"luv\")", 3)
  end
  local poll, due = uv.new_poll(engine.host.pollfd()), uv.new_timer()
  local parked, managed = {}, setmetatable({}, { __mode = "k" })
  local bridge = {}

  -- A resumed coroutine that raised: its error goes on up, out of the loop's callback.
  local function resume(co, ...)
    local ok, err = coroutine.resume(co, ...)
    if not ok then error(err, 0) end
  end

  local function wake()
    poll:stop()
    due:stop()
    local ready = parked
    parked = {}
    for _, co in ipairs(ready) do resume(co) end
  end

  function bridge.wait(e)
    local co = running()
    if not managed[co] then return false end
    parked[#parked + 1] = co
    poll:start("r", wake)
    local seconds = e.timeout()
    if seconds then due:start(math.max(0, math.ceil(seconds * 1000)), 0, wake) end
    yield()
  end

  --- Run fn(...) as a coroutine the bridge resumes: its operations wait
  --- through the loop. Started at once; returns the coroutine.
  function bridge.wrap(fn, ...)
    if type(fn) ~= "function" then error("wrap expects a function", 2) end
    local co = coroutine.create(fn)
    managed[co] = true
    resume(co, ...)
    return co
  end

  --- Close the poll handle and the timer (the loop lets them go on its next run).
  function bridge.close()
    for _, handle in ipairs { poll, due } do
      if not handle:is_closing() then handle:close() end
    end
  end
  return bridge
end

--- Install the host's wait hook (mcp.loop): `options.wait(engine)` is called
-- instead of blocking whenever an operation waits inside a coroutine that is
-- not one of gather's; it returns once the engine's descriptor is readable or
-- its timeout has passed (with cqueues: `function(e) cqueues.poll(e) end`).
-- It returns false when the running coroutine is not one the host's loop
-- resumes (a plain generator inside a host coroutine): that wait then blocks
-- on the engine, as without a hook. `mcp.loop{}` removes the hook: every wait
-- outside gather blocks again.
--
-- `mcp.loop{ luv = uv }` (uv = require "luv") installs the library's own luv
-- bridge instead of a hook of the host's and returns it: `bridge.wrap(fn,
-- ...)` runs fn as a coroutine whose operations wait through libuv,
-- `bridge.close()` lets its two handles go (mcp.loop{} closes them too).
-- @return the luv bridge, for `luv`; else nothing
function engine.loop(options)
  if type(options) ~= "table" then error("loop expects a table { wait = function(engine) ... end }", 2) end
  if options.wait ~= nil and type(options.wait) ~= "function" then error("loop: 'wait' must be a function", 2) end
  if options.wait ~= nil and options.luv ~= nil then error("loop: give either wait or luv, not both", 2) end
  for key in pairs(options) do
    if key ~= "wait" and key ~= "luv" then error(string.format("loop: unknown option %q", tostring(key)), 2) end
  end
  if luv_bridge then
    luv_bridge.close()
    luv_bridge = nil
  end
  host_wait = options.wait
  if options.luv ~= nil then
    luv_bridge = new_luv_bridge(options.luv)
    host_wait = luv_bridge.wait
  end
  close_faulted()
  return luv_bridge
end

return engine
