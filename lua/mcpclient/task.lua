--- Long calls as tasks: a tools/call the server runs on its own, which the
--- client follows by its id.
--
-- Two eras speak tasks differently. In the 2025-11-25 revision the client
-- asks for a task (`params.task`) when the server offers it for tools/call;
-- the answer is `{ task = Task }`, the client polls `tasks/get` and reads the
-- outcome with `tasks/result` (which blocks until the task ends, and is where
-- a task's elicitation requests arrive). A task belongs to the session that
-- made it, so a handle keeps the session id. In the 2026-07-28 era the client
-- declares the extension `io.modelcontextprotocol/tasks` and the server alone
-- decides: the answer is `resultType: "task"`; `tasks/get` carries the
-- outcome (`result` or `error`) and the input the task waits for
-- (`inputRequests`, answered with `tasks/update`).
--
-- A handle is plain data, safe to store and to give to another process's
-- connection: { id, status, message, poll_ms, expires_at, server, era,
-- session, version }. Polling is never faster than the server's interval
-- (a missing or zero one is floored), and always within the operation's
-- budget: a task still working when the budget ends is a timeout whose
-- handle stays valid. Everything a server says about a task is checked: the
-- id it names, a status that goes back from an end, a result of the wrong
-- shape, an unknown or expired id — each a clear failure.
local core = require "mcpclient.core"
local engine = require "mcpclient.engine"
local errors = require "mcpclient.errors"
local era = require "mcpclient.era"

local json = core.json
local fail = errors.fail

local task = {}

--- Seconds between polls when the server names no interval, and the least
--- ever waited (a zero or negative interval is taken as this).
task.DEFAULT_POLL = 1
task.POLL_FLOOR = 0.05

task.STATUSES = { working = true, input_required = true, completed = true, failed = true, cancelled = true }
local TERMINAL = { completed = true, failed = true, cancelled = true }
local INVALID_PARAMS = -32602

--- Is `status` one a task ends in?
function task.terminal(status) return TERMINAL[status] == true end

-- Seconds since the epoch of an RFC 3339 time (UTC or with an offset), or nil.
local function epoch_of(text)
  if type(text) ~= "string" then return nil end
  local y, mo, d, h, mi, s, rest = text:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)[Tt ](%d%d):(%d%d):(%d%d)(.*)$")
  if not y then return nil end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  -- days from the civil date (proleptic Gregorian), without the local zone
  local a = mo <= 2 and 1 or 0
  local yy, mm = y - a, mo + 12 * a - 3
  local days = 365 * yy + yy // 4 - yy // 100 + yy // 400 + (153 * mm + 2) // 5 + d - 719469
  local t = days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)
  rest = rest:gsub("^%.%d+", "")
  local sign, oh, om = rest:match("^([+-])(%d%d):?(%d%d)$")
  if sign then
    local offset = tonumber(oh) * 3600 + tonumber(om) * 60
    t = sign == "+" and t - offset or t + offset
  elseif rest ~= "Z" and rest ~= "z" then
    return nil
  end
  return t
end

local function non_negative(value)
  return type(value) == "number" and value == value and value >= 0 and value ~= math.huge
end

-- A task as the server describes it, read into `handle` (a new one when nil),
-- in the era's keys. → handle | nil, detail (what is wrong with it)
local function read_task(t, e, handle, now, creating)
  if type(t) ~= "table" or json.is_array(t) then return nil, "the task is not an object" end
  if type(t.taskId) ~= "string" or t.taskId == "" or #t.taskId > 1024 then
    return nil, "the task carries no usable taskId"
  end
  if not task.STATUSES[t.status] then
    return nil, string.format('the task\'s status "%s" is none of working, input_required, completed, failed, '
      .. "cancelled", core.clip(tostring(t.status), 40))
  end
  local interval, ttl = e.task_times(t)
  if interval ~= nil and not non_negative(interval) then
    return nil, "the task's poll interval is not a number of ms"
  end
  if ttl ~= nil and ttl ~= json.null and not non_negative(ttl) then
    return nil, "the task's ttl is neither null nor a number of ms"
  end
  handle = handle or {}
  if handle.id ~= nil and handle.id ~= t.taskId then
    return nil, "the answer is about another task than the one asked for"
  end
  handle.id = t.taskId
  handle.status = t.status
  handle.message = type(t.statusMessage) == "string" and core.clip(t.statusMessage, 500) or nil
  if interval ~= nil then handle.poll_ms = math.floor(interval) end
  if type(ttl) == "number" and handle.expires_at == nil then
    -- counted on this machine's clock from when the task was created: at a
    -- task's creation that is now (a server's clock may be off); for a task
    -- known only by its id, the creation time the server names
    local created = creating and now or epoch_of(t.createdAt) or now
    handle.created_at = created
    handle.expires_at = created + math.ceil(ttl / 1000)
  end
  return handle
end

-- The seconds to wait before the next poll: the server's interval, floored.
local function interval_of(handle)
  local ms = handle.poll_ms
  if ms == nil then return task.DEFAULT_POLL end
  return math.max(ms / 1000, task.POLL_FLOOR)
end

-- A CallToolResult, checked for the shape an outcome is read from.
local function tool_result(server, result, where)
  if type(result) ~= "table" or json.is_array(result) then
    return fail("malformed", { server = server, detail = where .. " carries no tool result object" })
  end
  if result.content ~= nil and (type(result.content) ~= "table" or not json.is_array(result.content)) then
    return fail("malformed", { server = server, detail = where .. ": the tool result's content is not an array" })
  end
  if result.content == nil and result.structuredContent == nil then
    return fail("malformed", { server = server, detail = where .. ": the tool result has neither content nor "
      .. "structuredContent" })
  end
  return result
end

---------------------------------------------------------------------------
-- Following a task
---------------------------------------------------------------------------

local Task = {}
Task.__index = Task

--- A task of `conn` (its identifier, clock and session are read through
--- `host`: { identifier, session, wall (unix seconds), outcome_of,
--- contact }); `handle` a handle or the task id alone.
function task.new(host, handle)
  return setmetatable({ host = host, handle = handle, seen = {}, reported = handle.status }, Task)
end

-- The state a request about this task goes under: the session that made
-- the task (2025), or the connection's own.
local function how_of(self, extra)
  local h = self.handle
  local how = { capabilities = { extensions = { [era.TASKS] = {} } } }
  if h.session then how.state = { id = h.session, version = h.version } end
  for k, v in pairs(extra or {}) do how[k] = v end
  return how
end

-- The era object of the task: the one its handle names, else the
-- connection's (the era that has sessions before any is open).
local function era_of(self)
  local h = self.handle
  if h.era then return era.named(h.era) or era.of({}) end
  return era.of(self.host.session.state or {})
end

-- The era the handle names (one it does not name: the era that has sessions).
local function handle_era(h)
  return era.named(h.era) or era.of({})
end

-- A failure of the task itself.
local function task_failure(self, reason, detail, rpc_code)
  local h = self.handle
  return fail("task", { server = self.host.identifier, task_id = h.id, status = h.status, reason = reason,
    detail = detail, rpc_code = rpc_code })
end

local function expired(self)
  local at = self.handle.expires_at
  return at ~= nil and self.host.wall() > at
end

-- A request about the task. An unknown id (-32602) is the task's failure:
-- "expired" when its time is past, "unknown" otherwise.
local function ask(self, op, method, params, extra)
  local h = self.handle
  if expired(self) then
    return task_failure(self, "expired", "the task's time to live ended; the server may have deleted it")
  end
  params.taskId = h.id
  local reply, message, err = self.host.session:request(op, method, params, how_of(self, extra))
  if not reply then
    if err.rpc_code == INVALID_PARAMS and (err.kind == "rpc_error" or err.kind == "http_status") then
      return task_failure(self, "unknown", "the server said: " .. tostring(err.detail),
        err.rpc_code)
    end
    if err.rpc_code == era.MISSING_CAPABILITY then
      return fail("rpc_error", { server = self.host.identifier, rpc_code = err.rpc_code,
        detail = "the server does not offer the tasks extension" })
    end
    return nil, message, err
  end
  return reply
end

-- A failure once the task exists names it: err.task_id, and the id (through
-- the text rule) in the message, so a caller can still follow, inspect or
-- cancel what the server runs. → nil, message, err
local function named(id, message, err)
  if type(err) ~= "table" or id == nil then return nil, message, err end
  if err.task_id == nil then err.task_id = id end
  local shown = core.clip(id)
  local text = tostring(err.message or message)
  if not text:find(shown, 1, true) then
    local stop = text:sub(-1) == "." and "." or ""
    text = string.format("%s (task %s)%s", stop == "." and text:sub(1, -2) or text, shown, stop)
  end
  err.message = text
  return nil, text, err
end

-- Give up on a task the client will not follow (the server answered about
-- it in a way no follower can trust): ask the server to cancel it, once,
-- best effort and only within what is left of the budget, so the server does
-- not run on with a call nobody can name. Nothing it meets (a refusal, a
-- raise, no time left) changes or delays the failure, which names the task.
-- A task known to have ended is not asked about. → nil, message, err
local function abandon(self, op, message, err)
  local h = self.handle
  if type(err) == "table" and err.kind == "malformed" and not TERMINAL[h.status]
    and op and op.deadline and op.deadline:remaining() > 0 then
    pcall(ask, self, op, "tasks/cancel", {})
  end
  return named(h.id, message, err)
end

-- Take the server's description of the task; a status never goes back
-- from an end. → true | nil, message, err
local function take(self, described, op)
  local h = self.handle
  local before = h.status
  local _, detail = read_task(described, era_of(self), h, self.host.wall())
  if detail then return fail("malformed", { server = self.host.identifier, detail = detail }) end
  h.era = h.era or era_of(self).name
  if before and TERMINAL[before] and h.status ~= before then
    local now_status = h.status
    h.status = before
    return fail("malformed", { server = self.host.identifier, detail = string.format(
      "the task's status went back from %s to %s", before, now_status) })
  end
  if op and op.on_task and h.status ~= self.reported then
    self.reported = h.status
    op.on_task(task.copy(h))
  end
  return true
end

--- A copy of a handle (a caller may keep or store it).
function task.copy(h)
  return { id = h.id, status = h.status, message = h.message, poll_ms = h.poll_ms, expires_at = h.expires_at,
    created_at = h.created_at, server = h.server, era = h.era, session = h.session, version = h.version }
end

-- tasks/get, read into the handle. → detail (the result object) | nil, message, err
local function get(self, op)
  local reply, message, err = ask(self, op, "tasks/get", {})
  if not reply then return nil, message, err end
  local ok
  ok, message, err = take(self, reply.result, op)
  if not ok then return nil, message, err end
  return reply.result
end

-- The 2026-07-28 input a task waits for: each request not answered yet
-- goes to what the host gave for it (the elicitation or sampling handler,
-- the roots: session:input_answer), and the answers go back with
-- tasks/update. → true | nil, message, err
local function answer_inputs(self, op, detail)
  local requests = detail.inputRequests
  if type(requests) ~= "table" or json.is_array(requests) then
    return fail("malformed", { server = self.host.identifier, detail = "the task waits for input but names none" })
  end
  local responses, count = {}, 0
  for key, request in pairs(requests) do
    if not self.seen[key] then
      local method = type(request) == "table" and request.method or nil
      local answer, refusal = self.host.session:input_answer(request)
      if answer == nil then
        return fail("input_required", { server = self.host.identifier, method = "the task " .. self.handle.id,
          asked = core.label(tostring(method)), refused = refusal and refusal.message })
      end
      responses[key] = answer
      count = count + 1
    end
  end
  if count == 0 then return true end
  local reply, message, err = ask(self, op, "tasks/update", { inputResponses = responses })
  if not reply then return nil, message, err end
  for key in pairs(responses) do self.seen[key] = true end
  return true
end

-- The outcome of an ended task, from tasks/get's detail (2026-07-28) or
-- tasks/result (2025). → outcome | nil, message, err
local function ended(self, op, detail)
  local h, server = self.handle, self.host.identifier
  if handle_era(h).task_outcome == "tasks/get" then
    if h.status == "completed" then
      local result, message, err = tool_result(server, detail.result, "the completed task")
      if not result then return nil, message, err end
      return self.host.outcome_of(result, 0)
    elseif h.status == "failed" then
      local e = type(detail.error) == "table" and detail.error or {}
      return task_failure(self, "failed", type(e.message) == "string" and e.message or "no detail given",
        math.type(e.code) == "integer" and e.code or nil)
    end
    return task_failure(self, "cancelled", "the task was cancelled")
  end
  if h.status == "cancelled" then return task_failure(self, "cancelled", "the task was cancelled") end
  local reply, message, err = ask(self, op, "tasks/result", {})
  if not reply then
    if err.kind == "rpc_error" and h.status == "failed" then
      return task_failure(self, "failed", tostring(err.detail), err.rpc_code)
    end
    return nil, message, err
  end
  local result
  result, message, err = tool_result(server, reply.result, "tasks/result")
  if not result then return nil, message, err end
  if not TERMINAL[h.status] then h.status = result.isError == true and "failed" or "completed" end
  self.host.contact(reply.duration_ms)
  return self.host.outcome_of(result, reply.duration_ms)
end

-- Wait the server's interval (never past the budget) and ask again.
-- → detail | nil, message, err (a timeout once the budget is spent: the
-- handle stays valid)
local function poll(self, op)
  local h = self.handle
  local wait = interval_of(h)
  local left = op.deadline:remaining()
  if not engine.sleep(math.max(0, math.min(wait, left)), op.cancel) then
    return fail("cancelled", { server = self.host.identifier, task_id = h.id, in_flight = true })
  end
  -- the budget ends the wait, also when a loaded machine woke this process only past it
  if left <= wait or op.deadline:remaining() <= 0 then
    return fail("timeout", { server = self.host.identifier, budget = errors.seconds(op.deadline.total),
      task_id = h.id, detail = string.format("the task %s is still %s; its handle stays valid", h.id, h.status) })
  end
  return get(self, op)
end

-- Follow the task to its end within `op`'s budget, from what the server
-- said last (`detail`, a tasks/get answer, or {}). → outcome | nil, message, err
local function follow(self, op, detail)
  local h = self.handle
  -- a pushed status is heard (on_task), never trusted over the polls: it may
  -- arrive out of order, so only tasks/get moves the handle
  op.on_task_notice = function(params)
    if params.taskId ~= h.id or not task.STATUSES[params.status] or params.status == self.reported then return end
    if op.on_task then
      self.reported = params.status
      local heard = task.copy(h)
      heard.status = params.status
      op.on_task(heard)
    end
  end
  detail = detail or {}
  while true do
    local status = h.status
    local message, err
    local e = handle_era(h)
    if TERMINAL[status] or (status == "input_required" and e.task_input == "tasks/result") then
      local known = e.task_outcome ~= "tasks/get" or status == "cancelled" or detail.result ~= nil
        or detail.error ~= nil
      if not known then
        -- a modern end learned without its outcome (a notice): ask for it
        detail, message, err = get(self, op)
        if not detail then return nil, message, err end
      end
      return ended(self, op, detail)
    end
    if status == "input_required" and detail.taskId ~= nil then  -- a tasks/get answer names the input
      local ok
      ok, message, err = answer_inputs(self, op, detail)
      if not ok then return nil, message, err end
    end
    detail, message, err = poll(self, op)
    if not detail then return nil, message, err end
  end
end

--- Follow the task to its end (see follow). Every failure names the task;
--- one the client gives up on (an answer it cannot follow) is asked to be
--- cancelled first, so the server does not run on with it unnamed.
function task.follow(self, op, detail)
  local outcome, message, err = follow(self, op, detail)
  if outcome then return outcome end
  return abandon(self, op, message, err)
end

---------------------------------------------------------------------------
-- The handle's methods (conn:task(id))
---------------------------------------------------------------------------

--- The task as the server has it now (tasks/get).
-- @return handle { id, status, message, poll_ms, expires_at, ... } | nil, message, err
function Task:status(opts)
  local op = self.host.open(opts)
  local detail, message, err = get(self, op)
  if not detail then return named(self.handle.id, message, err) end
  return task.copy(self.handle)
end

--- Wait for the task's outcome within the budget (opts.budget, or the
--- connection's; opts.on_task hears each status): the outcome call_tool
--- gives, or the failure.
function Task:result(opts)
  local op = self.host.open(opts)
  local detail, message, err = get(self, op)
  if not detail then return abandon(self, op, message, err) end
  return task.follow(self, op, detail)
end

--- Ask the server to cancel the task (cooperative: it may still end
--- otherwise). → true | nil, message, err
function Task:cancel(opts)
  local op = self.host.open(opts)
  local reply, message, err = ask(self, op, "tasks/cancel", {})
  if not reply then return named(self.handle.id, message, err) end
  if era_of(self).cancel_reads_task and type(reply.result) == "table" and reply.result.taskId ~= nil then
    local ok
    ok, message, err = take(self, reply.result, nil)
    if not ok then return named(self.handle.id, message, err) end
  end
  return true
end

--- Answer input the task waits for (2026-07-28 era): `input_responses`
--- maps each inputRequests key to its answer. → true | nil, message, err
function Task:update(input_responses, opts)
  if type(input_responses) ~= "table" or json.is_array(input_responses) then
    error("update: input_responses must be a table keyed by the task's input request keys", 2)
  end
  local op = self.host.open(opts)
  if not self.handle.era and not self.handle.session then
    -- the era decides what update means: found first when this connection has not opened yet
    local ok, message, err = self.host.session:open(op)
    if not ok then return named(self.handle.id, message, err) end
  end
  if era_of(self).task_input ~= "tasks/update" then
    error("update: tasks/update is of the 2026-07-28 era; a 2025 task takes its input through tasks/result", 2)
  end
  local reply, message, err = ask(self, op, "tasks/update", { inputResponses = input_responses })
  if not reply then return named(self.handle.id, message, err) end
  return true
end

--- Read the answer to a tools/call: the task it started, or nil when the
--- server answered at once. → handle | nil | nil, detail (what is wrong with
--- the task), handle (what of it can be named: its id, when it has a usable
--- one; no status unless one of the known ones)
function task.created(result, e, host_info)
  local described = e.task_of(result)
  if described == nil then return nil end
  local handle, detail = read_task(described, e, nil, host_info.now, true)
  local named_only
  if not handle then
    local id = type(described) == "table" and described.taskId or nil
    if type(id) ~= "string" or id == "" or #id > 1024 then return nil, detail end
    handle = { id = id, status = task.STATUSES[described.status] and described.status or nil }
    named_only = detail
  end
  handle.era = e.name
  handle.server = host_info.server
  handle.session = host_info.session
  handle.version = host_info.version
  if named_only then return nil, named_only, handle end
  return handle
end

--- The server started a task the client refuses to follow (its answer
--- broke the rules, `message`/`err` say how): when it named the task
--- (`handle`, from task.created), the failure names it too, and the server is
--- asked to cancel it (best effort, within the budget).
--- → nil, message, err
function task.refused(host, op, handle, message, err)
  if not handle then return nil, message, err end
  return abandon(task.new(host, handle), op, message, err)
end

task.Task = Task
return task
