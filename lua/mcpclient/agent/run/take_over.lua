--- Taking a run over (mcpclient.agent.run): a run whose worker is gone
-- (its lease expired) or whose holder released it, claimed by this process.
--
-- Rules: the claim is one compare-and-set, so of several processes exactly
-- one gets the run, and its old holder's next write changes nothing. Each
-- task-backed call the run left open is followed to its end through a
-- connection to the server that made it — the same task, never a second
-- call — and its step recorded (with who started and who finished it); the
-- fence keeps only the tasks still open. A run whose fence names a call that
-- did not become a stored task was marked failed by the store instead (it
-- may or may not have run). A waiting run is rebuilt from the steps its row
-- keeps, nothing of it having been sent.
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"
local check_options = require("mcpclient.agent.options").check
local default_log = require("mcpclient.log").default
local lease = require "mcpclient.agent.run.lease"
local trail = require "mcpclient.agent.run.trail"
local reads = require "mcpclient.agent.run.reads"
local setup = require "mcpclient.agent.run.setup"
local approval = require "mcpclient.agent.run.approval"
local turns = require "mcpclient.agent.run.turn"

local json = core.json
local error_result = require("mcpclient.agent.tool").error_result
local validate, tools_of, new_run, option_types = setup.validate, setup.tools_of, setup.new_run, setup.option_types
local under_lease, fail, store_failed, lease_trouble = lease.under_lease, lease.fail, lease.store_failed,
  lease.lease_trouble
local lease_until, fence_entry, cancel_requested = lease.lease_until, lease.fence_entry, lease.cancel_requested
local record_step, parse_steps = trail.record_step, approval.parse_steps
local offer_server, offer_entry, offer_fetch = reads.server, reads.entry, reads.fetch_with
local SUSPENDED = turns.SUSPENDED

local take_over = {}

-- Follow one stored task to its end through its tool's connection, and
-- record its step (which closes it). → the call's result
local function follow_stored(self, row)
  local tool = self.registry.get(row.tool)
  local handle_ok, handle = pcall(json.decode, row.handle)
  if not tool or not tool.connection or not handle_ok or type(handle) ~= "table" then
    return { text = string.format('Error: the task %s of "%s" cannot be followed here: %s', core.clip(row.task_id),
      row.tool, tool and "its stored handle is unreadable" or "the tool is not offered to this run"),
      is_error = true, open = true }
  end
  -- a task id is its server's: the task is followed only through a connection to the server that
  -- made it (the row's), under the handle stored for that server and id
  local wrong = handle.id ~= row.task_id and "its stored handle names another task"
    or handle.server ~= nil and handle.server ~= row.server and "its stored handle names another server"
  if wrong then
    return { text = string.format('Error: the task %s of "%s" cannot be followed here: %s', core.clip(row.task_id),
      row.tool, wrong), is_error = true, open = true }
  end
  local got, conn = pcall(tool.connection)
  if got and (type(conn) ~= "table" or (row.server ~= "" and conn.identifier ~= row.server)) then
    return { text = string.format('Error: the task %s of "%s" cannot be followed here: it is a task of server "%s", '
      .. "and the tool is not of that server in this run", core.clip(row.task_id), row.tool, core.clip(row.server, 64)),
      is_error = true, open = true }
  end
  local started = self.clock()
  local ok, outcome, message, err = pcall(function()
    if not got then error(conn, 0) end
    return conn:task(handle):result { budget = self.task_budget,
      cancel = function() return cancel_requested(self) end,
      on_task = function(h) pcall(self.store.update_task, self.store, row.uid, { status = h.status }) end }
  end)
  local duration_ms = (self.clock() - started) * 1000
  if not ok then
    return { text = string.format('Error: the task %s of "%s" cannot be followed: %s', core.clip(row.task_id),
      row.tool, tostring(outcome)), is_error = true, open = true }
  end
  if not outcome and err and (err.kind == "timeout" or err.kind == "cancelled" or err.kind == "transport") then
    -- not ended yet, or not reachable: the task stays open, the fence names it
    return { text = message, is_error = true, err = err, open = true }
  end
  local result = outcome and { text = core.bound(outcome.text), is_error = outcome.is_error }
    or error_result(message, err)
  local arguments_ok, arguments = pcall(json.decode, row.arguments)
  local recorded, store_error = record_step(self, { round = row.round, name = row.tool,
    arguments = arguments_ok and arguments or nil, text = result.text, is_error = result.is_error,
    duration_ms = duration_ms, task = { uid = row.uid, task_id = row.task_id, server = row.server,
      started_by = row.started_by, status = outcome and (outcome.is_error and "failed" or "completed")
        or (err and err.status) or "failed" } })
  if not recorded then
    local failure = fail(self, "audit_persistence_failed", string.format('The step of task %s (tool "%s") could '
      .. "not be recorded in run %s; the run stops because a write must not go unrecorded.",
      core.clip(row.task_id), row.tool, self.uuid), store_error)
    return error_result(failure.message, failure)
  end
  return result
end

-- The suspended turn again, from the steps its row keeps: each step a
-- record that waits, as suspend() left it in the process that made it.
local function rebuild_turn(self, parsed)
  local records = {}
  for i, step in ipairs(parsed.steps) do
    if step.kind == "call" then
      records[i] = { call = { name = step.name, arguments = step.arguments, id = step.id }, state = SUSPENDED }
    else
      local kind = step.kind == "read" and "resource" or "prompt"
      local target = kind == "resource" and step.uri or step.name
      -- the server as it is now (a server disabled meanwhile is refused on resume, by name)
      local row = offer_server(self, step.server) or { identifier = step.server }
      records[i] = { call = { name = string.format("mcp_%s:%s", step.server, kind) }, state = SUSPENDED,
        tool = offer_entry(row, kind), offer = { kind = kind, server = step.server, target = target,
          arguments = step.arguments, fetch = offer_fetch(kind, target, step.arguments), row = row } }
    end
    local rec = records[i]
    rec.id, rec.needs_approval = step.id or tostring(i), step.needs_approval ~= false
    rec.reason = type(step.reason) == "string" and step.reason or "approval"
  end
  return { round = parsed.round, records = records }
end

-- A taken waiting run: its suspended turn rebuilt from the steps its row
-- keeps, with the decision a person recorded meanwhile. → true | false when
-- the steps are unreadable: nobody can resume the run, and it is let go of as
-- it was (its lease ended, this object closed).
local function waiting_again(self, row)
  -- the claim took only a row whose steps parse (pending_steps non-empty; see parse_steps)
  local parsed = parse_steps(row.pending_steps)
  if parsed then
    self.status, self.waiting, self.pending_steps = lease.WAITING, rebuild_turn(self, parsed), row.pending_steps
    local ids = approval.ids_of_steps(parsed.steps)
    self.decisions, self.reasons = approval.decisions_of(row.approval, ids)
    self.approval_text = row.approval
    return true
  end
  self.status = lease.WAITING
  under_lease(self, { lease_expires = 0 })
  self:close()
  return false
end

-- Follow each open task to its end (follow_stored), while the run is held;
-- then the fence keeps only the tasks still open (`fence_text`: the row's
-- fence as it was claimed). → one result per task followed
local function follow_open(self, open, fence_text)
  local results, still_open = {}, {}
  local fence = lease.fence(fence_text)
  local function held() return self.status == lease.RUNNING or self.status == lease.WAITING end
  for _, task_row in ipairs(open) do
    local result = follow_stored(self, task_row)
    results[#results + 1] = result
    -- keyed by step and task id: two servers of one run may each name a task alike
    if result.open then still_open[task_row.sequence .. "\0" .. task_row.task_id] = true end
    if not held() then break end
  end
  if held() then
    for _, entry in ipairs(fence) do
      if entry.task_id and still_open[tostring(entry.sequence) .. "\0" .. entry.task_id] then
        self.fenced[#self.fenced + 1] = fence_entry({ call = { name = entry.tool, arguments = nil } }, entry.sequence)
        self.fenced[#self.fenced].arguments_sha256 = entry.arguments_sha256
        self.fenced[#self.fenced].task_id = entry.task_id
      end
    end
    local kept = #self.fenced > 0 and json.encode(json.array(self.fenced)) or ""
    local ok, lease_err = under_lease(self, { fence = kept, lease_expires = lease_until(self) })
    if not ok then lease_trouble(self, nil, lease_err) end
  end
  return results
end

-- run.take_over: claim the run, follow the tasks it left open, or rebuild its waiting turn
-- (`Run`: the metatable of the Run it returns). → Run, results | nil, message, err
-- The uid a take-over names: an integer, the same as text ("5", as `mcpclient runs` prints it), or the
-- run's UUID (looked up). → uid | nil, message, err (no run has that UUID; the store failed)
local function uid_of(store, run_uid)
  if math.type(run_uid) == "integer" and run_uid > 0 then return run_uid end
  if type(run_uid) ~= "string" then return nil end
  local digits = run_uid:match("^%s*(%d+)%s*$")
  if digits then
    local n = math.tointeger(tonumber(digits))
    return n and n > 0 and n or nil
  end
  if run_uid == "" or #run_uid > 64 then return nil end
  local row, message, err = store:run_by_uuid(run_uid)
  if not row then
    if message then return false, message, err end
    return errors.fail("run_lease_lost", { detail = string.format("run %s could not be taken over: no run has "
      .. "that UUID", run_uid) })
  end
  return row.uid
end

function take_over.run(store, run_uid, options, Run)
  options = validate(store, check_options("run.take_over", options, option_types))
  local asked = run_uid
  local uid, message, err = uid_of(store, run_uid)
  if uid == nil and message then return nil, message, err end
  if uid == false then return nil, message, err end
  if not uid then
    error("run.take_over: run_uid must be a run's uid (an integer, or as text) or its UUID, got "
      .. core.clip(tostring(asked), 64), 2)
  end
  run_uid = uid
  local log = options.log or default_log
  local tools
  tools, message, err = tools_of(store, options, log)
  if not tools then return nil, message, err end
  local self = new_run(store, options, log, tools, { uid = run_uid, tasks = options.tasks ~= false }, Run)
  local owner = options.owner or lease.default_owner()
  local claimed
  claimed, message, err = store:claim_run(run_uid, owner, lease_until(self), math.floor(self.now()))
  local row = claimed == 1 and store:run(run_uid) or nil
  if claimed == 1 and not row then claimed, message, err = nil, "the run's row could not be read again", nil end
  if claimed ~= 1 then
    self:close()
    if claimed == nil then return nil, message, err end
    return errors.fail("run_lease_lost", { detail = string.format("run %d could not be taken over: it is not "
      .. "running or waiting for approval with an expired lease (another owner holds it, or it was left behind "
      .. "and marked failed)", run_uid) })
  end
  self.uuid, self.owner, self.persisted, self.lease_expires = row.uuid, owner, true, row.lease_expires
  if row.status == lease.WAITING and not waiting_again(self, row) then
    return errors.fail("run_lease_lost", { detail = string.format("run %d waits for approval, but the steps it "
      .. "waits on are not readable on its row, so it cannot be taken over", run_uid) })
  end
  local events = store:events(run_uid) or {}
  for _, e in ipairs(events) do
    self.sequence = math.max(self.sequence, e.sequence)
    self.round = math.max(self.round, e.round)
  end
  local open
  open, message, err = store:open_tasks(run_uid)
  if not open then
    store_failed(self, nil, err)
    self:close()
    return nil, message, err
  end
  return self, follow_open(self, open, row.fence)
end

return take_over
