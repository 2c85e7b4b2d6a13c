--- A turn of a run (mcpclient.agent.run): the model's calls as records,
-- admitted, refused or held for approval, executed, and their steps
-- recorded in the model's order.
--
-- Every call takes the same road, in this order: registered → offered by the
-- gate → the write fence (a write needs a persisted row and a lease to fence
-- it with) → the remote-call budget → approval → the write named in the fence
-- under the lease → execution with the run's persisted cancel flag as the
-- cancel hook → the result bounded → the TOOL event recorded (fail-closed for
-- writes) → the fence cleared and the lease renewed.
--
-- A turn's admitted calls execute at once (each a task of mcp.gather, each
-- with its own budget and the same cancel hook); their TOOL events are then
-- recorded in the model's order of calls, whatever order they finished in,
-- and the fence is cleared only once every write of the turn is recorded. A
-- call that was in flight when another ended the run is still recorded.
--
-- An approval-bound call suspends the whole turn before anything of it
-- executes (suspend: the steps that wait are kept on the run's row with its
-- status, see approval.lua). A resource read or prompt get is a record of
-- the same kind (rec.offer; see reads.lua), a turn of its own (gated_read).
local core = require "mcpclient.core"
local engine = require "mcpclient.engine"
local catalogue = require "mcpclient.agent.catalogue"
local policy = require "mcpclient.agent.policy"
local lease = require "mcpclient.agent.run.lease"
local reads = require "mcpclient.agent.run.reads"
local trail = require "mcpclient.agent.run.trail"

local json = core.json
local error_result = require("mcpclient.agent.tool").error_result
local warn_to = lease.warn
local under_lease, fail, lease_trouble = lease.under_lease, lease.fail, lease.lease_trouble
local unrecorded_refusal, conclude, cancel_requested = lease.unrecorded_refusal, lease.conclude, lease.cancel_requested
local on_the_wire = lease.on_the_wire
local lease_until, fence_entry = lease.lease_until, lease.fence_entry
local record_step, note = trail.record_step, trail.note
local offer_entry, offer_server, fetch_offer, record_read = reads.entry, reads.server, reads.send, reads.record

local turn_module = {}

-- The states of one call of a turn (a record, see new_turn):
local ADMITTING = "admitting" -- not decided yet (new, or approved and to be admitted again)
local REFUSED = "refused"     -- answered without executing; its step is not recorded yet
local ADMITTED = "admitted"   -- passed every check before approval; executes next
local SUSPENDED = "suspended" -- admitted, waits for the host's approval
local DONE = "done"           -- final: result set, its step recorded (unless stopped)

turn_module.ADMITTING, turn_module.SUSPENDED = ADMITTING, SUSPENDED

local function gate_context(self)
  return { correlation_id = self.uuid, run_uid = self.uid or 0 }
end

-- A registered tool's effect is its declaration, else read-only.
-- Refusals of unknown names never execute, so their steps are fail-soft.
local function is_write(tool)
  return (tool.effect or "read_only") ~= "read_only"
end

---------------------------------------------------------------------------
-- A turn: one record per call
---------------------------------------------------------------------------

--[[
A turn is { round, records }; a record is one call of the model's turn:
  call     { name, arguments } as the model wrote it
  state    ADMITTING → REFUSED | ADMITTED → SUSPENDED → ADMITTING (approved)
           | REFUSED (denied); REFUSED | ADMITTED → DONE
  tool     the registered tool (admitted calls); for a read, its gate entry
  offer    a resource read or prompt get instead of a tool call: { kind
           ("resource" | "prompt"), server (the identifier asked for), target
           (uri | prompt name), arguments, fetch(conn, opts), row (the server's
           row, once found) }; needs_approval when the operator asked for it
  result   { text, is_error [, err] } once the call is answered
  stopped  the run ended before or at this call: nothing of it is recorded
The results a caller sees are built from the records at the end of the turn.
]]
local function new_turn(calls, round)
  local records = {}
  for i, call in ipairs(calls) do
    -- the id the host passed (the model's tool-call id) names the call to a person deciding on it
    records[i] = { call = call, state = ADMITTING, id = call.id or string.format("call-%d-%d", round, i) }
  end
  return { round = round, records = records }
end

-- The call is answered and needs no step of its own (the run has ended).
local function stop(rec, result)
  rec.state, rec.result, rec.stopped = DONE, result, true
end

local function refuse(rec, text)
  rec.state, rec.result = REFUSED, error_result(text)
end

local function not_called(self, rec)
  stop(rec, error_result(string.format('Error: run %s has ended (%s); "%s" was not called.', self.uuid,
    self.status, rec.call.name), self.error))
end

-- The write fence: a write needs a row to fence it and a lease to fence it with.
local function refuse_unfenced_write(self, rec)
  local err = fail(self, "write_without_durable_execution", string.format('Tool "%s" declares a side effect but '
    .. "run %s holds no execution lease; the write is refused because it cannot be fenced.", rec.call.name,
    self.persisted and self.uuid or "(unpersisted)"))
  stop(rec, error_result(err.message, err))
end

-- A refusal the gate's own checks do not make (a server unknown, switched
-- off or without a data class; a denial) recorded as the gate records one: a
-- governance row for `entry`. → true, or false when the row could not be
-- recorded and the run stopped closed (`rec` answered)
local function refusal_recorded(self, rec, entry, reason)
  local d = self.gate.deny_offer and self.gate:deny_offer(entry, self.configuration, self.user, gate_context(self),
    reason)
  if d and d.unrecorded then
    local err_value = unrecorded_refusal(self, entry.name, d.unrecorded)
    stop(rec, error_result(err_value.message, err_value))
    return false
  end
  return true
end

-- The remote-call budget: a read spends it as a call does.
local function spend_budget(self, rec, what)
  if self.remote_calls >= self.remote_budget then
    refuse(rec, string.format('Error: this run has used its budget of %d calls to external tools; %s.',
      self.remote_budget, what))
    return false
  end
  self.remote_calls = self.remote_calls + 1
  return true
end

-- Decide one read, up to (not including) approval: the server's row as it
-- is now (it may have been switched off or reclassified meanwhile), then the
-- gate on its operator-set data class, then the remote-call budget. A
-- refusal is REFUSED (its event recorded later) with its governance row; one
-- whose governance row could not be recorded stops the run closed.
local function admit_offer(self, rec)
  local offer = rec.offer
  local row, message, err, state = offer_server(self, offer.server)
  if not row then
    if err then
      rec.state, rec.result = REFUSED, error_result(message, err)
      return
    end
    -- refused as a call of an unknown or switched-off tool is: a governance row, then its event
    local entry = { name = core.repair_utf8(string.format("mcp_%s:%s", core.clip(offer.server, 64), offer.kind)),
      remote = true }
    rec.tool = entry
    local reason = state == "disabled" and policy.REASONS.TOOL_DISABLED or policy.REASONS.NOT_REGISTERED
    if not refusal_recorded(self, rec, entry, reason) then return end
    return refuse(rec, string.format('Error: no enabled MCP server is named "%s".', core.clip(offer.server)))
  end
  local entry = offer_entry(row, offer.kind)
  offer.row, rec.tool = row, entry
  if not entry.data_class then
    -- "not usable yet": none of its tools is offered, and nothing of it is read either
    if not refusal_recorded(self, rec, entry, policy.REASONS.UNCLASSIFIED) then return end
    return refuse(rec, string.format('Error: server "%s" has no declared data class yet; nothing was read.',
      row.identifier))
  end
  local decision = self.gate:decide_offer(entry, self.configuration, self.user, gate_context(self))
  if decision.unrecorded then  -- a refusal must not go unrecorded: the run stops closed
    local err_value = unrecorded_refusal(self, entry.name, decision.unrecorded)
    return stop(rec, error_result(err_value.message, err_value))
  end
  if decision.reason == policy.REASONS.STORE_UNAVAILABLE then
    rec.state, rec.result = REFUSED, error_result(string.format('Error: reading %s from "%s" is unavailable for '
      .. "now (its switch could not be read from the store); nothing was read.", offer.kind, row.identifier),
      decision.err)
    return
  end
  if not decision.allowed then
    return refuse(rec, string.format('Error: reading %s from "%s" is not permitted.', offer.kind, row.identifier))
  end
  if not spend_budget(self, rec, string.format('%s "%s" of "%s" was not read', offer.kind,
      core.clip(offer.target), row.identifier)) then
    return
  end
  rec.state = ADMITTED
  rec.needs_approval = tostring(row.requires_approval) ~= "0"  -- only the literal "0" waives it
end

-- A remote tool as its server's row says now: its data class and whether
-- its calls need approval are the operator's current word, read at each
-- step (a run keeps the tools it listed, not what their server was then).
-- → the tool (a copy, when its server's row differs), or nil, message, err
-- (the store failed), or nil, nil, nil, "disabled" | "unclassified"
local function tool_now(self, tool, rows)
  if not (tool.remote and type(tool.server_identifier) == "string") then return tool end
  local row, message, err, state = offer_server(self, tool.server_identifier, rows)
  -- a host's own remote tool of a server the store does not hold: its own declaration is all there is
  if not row and state == "unknown" then return tool end
  if not row then return nil, message, err, state end
  local class = catalogue.data_class(row)
  if not class then return nil, nil, nil, "unclassified" end
  local approval = tostring(row.requires_approval) ~= "0"
  if class == tool.data_class and approval == (tool.requires_approval == true) then return tool end
  local now = setmetatable({}, getmetatable(tool))
  for k, v in pairs(tool) do now[k] = v end
  now.data_class, now.requires_approval = class, approval
  return now
end

-- Decide one call, up to (not including) approval.
local function admit(self, rec)
  if rec.offer then return admit_offer(self, rec) end
  local name = rec.call.name
  local tool = self.registry.get(name)
  if tool == nil then return refuse(rec, string.format('Error: unknown tool "%s"', name)) end
  local now, _, err, state = tool_now(self, tool)
  if not now and err then
    rec.state, rec.result = REFUSED, error_result(string.format('Error: tool "%s" is unavailable for now (its '
      .. "server could not be read from the store); it was not called.", name), err)
    return
  elseif not now then
    -- its server was switched off, removed or unclassified since the run listed it
    local reason = state == "unclassified" and policy.REASONS.UNCLASSIFIED or policy.REASONS.TOOL_DISABLED
    if not refusal_recorded(self, rec, tool, reason) then return end
    return refuse(rec, string.format('Error: tool "%s" not permitted', name))
  end
  rec.gated = now
  local decision = now == tool and self.gate:decide(name, self.configuration, self.user, gate_context(self))
    or self.gate:decide_offer(now, self.configuration, self.user, gate_context(self))
  if decision.unrecorded then
    local err_value = unrecorded_refusal(self, name, decision.unrecorded)
    return stop(rec, error_result(err_value.message, err_value))
  end
  if decision.reason == policy.REASONS.STORE_UNAVAILABLE then
    -- not a verdict on the tool: the store that holds its switch could not be read
    rec.state, rec.result = REFUSED, error_result(string.format('Error: tool "%s" is unavailable for now (its '
      .. "switch could not be read from the store); it was not called.", name), decision.err)
    return
  end
  if not decision.allowed then return refuse(rec, string.format('Error: tool "%s" not permitted', name)) end
  if is_write(tool) and not (self.persisted and self.owner) then return refuse_unfenced_write(self, rec) end
  if tool.remote and not spend_budget(self, rec, string.format('"%s" was not called', name)) then return end
  rec.state, rec.tool = ADMITTED, tool
end

-- Does this record need a person before it is sent? A call by its tool (the
-- registered one when it is not admitted yet), a read by its server's row.
local function needs_person(self, rec)
  if rec.offer then return rec.needs_approval == true end
  local tool = rec.gated or rec.tool or self.registry.get(rec.call.name)
  if tool and not rec.gated then tool = tool_now(self, tool) end -- (not admitted yet: its server as it is now)
  return tool ~= nil and policy.requires_approval(tool)
end

-- Admit the turn's calls in the model's order up to the first admitted one
-- that needs a person and was not approved: the turn stops there (the calls
-- after it are not admitted yet, so nothing of them is decided or recorded
-- twice). → the index it stopped at, or nil
local function admit_all(self, turn)
  for i, rec in ipairs(turn.records) do
    if rec.state == ADMITTING then
      if self.status ~= lease.RUNNING then not_called(self, rec) else admit(self, rec) end
      if rec.state == ADMITTED and not rec.approved and self.status == lease.RUNNING and needs_person(self, rec) then
        return i
      end
    end
  end
  return nil
end

-- A refusal's step: nothing ran, so a record that fails is only logged.
local function settle_refusal(self, turn, rec)
  if rec.offer then
    record_read(self, rec)
    rec.state = DONE
    return
  end
  record_step(self, { round = turn.round, name = rec.call.name, arguments = rec.call.arguments,
    text = rec.result.text, is_error = true })
  rec.state = DONE
end

---------------------------------------------------------------------------
-- Execution of one admitted call
---------------------------------------------------------------------------

-- Before a byte leaves: a cancelled run sends nothing, and a write is named
-- in the fence under the lease (the fence lists every write of the turn that
-- may be on the wire; a lost lease or a failed store stops the run). `sequence`
-- is the audit sequence the call's step is to take. → true to go on
local function ready_to_send(self, rec, sequence)
  if cancel_requested(self) then
    conclude(self, lease.CANCELLED)
    not_called(self, rec)
    return false
  end
  rec.sequence = sequence
  if is_write(rec.tool) then
    local fenced = self.fenced
    rec.fence_entry = fence_entry(rec, sequence)
    fenced[#fenced + 1] = rec.fence_entry
    local ok, err = under_lease(self, { fence = json.encode(json.array(fenced)),
      lease_expires = lease_until(self) })
    if not ok then
      lease_trouble(self, rec.call.name, err)
      not_called(self, rec)
      return false
    end
  end
  return true
end

-- A remote call became a task: before anything else happens its handle is
-- stored, in the same transaction as the fence that now names the task, so
-- a process that takes the run over follows the task instead of calling
-- again. Later notices only update the stored status. A handle that cannot
-- be stored leaves the fence as it was: the run is then recovered as any
-- call that may have run (failed closed), never called twice.
local function task_started(self, rec, handle)
  if rec.task then
    rec.task.status = handle.status
    if rec.task.uid then pcall(self.store.update_task, self.store, rec.task.uid, { status = handle.status }) end
    return
  end
  rec.task = { task_id = handle.id, server = handle.server, started_by = self.owner or "", status = handle.status }
  if not (self.persisted and self.owner) then return end
  local entry = rec.fence_entry
  if entry then entry.task_id = handle.id end
  local uid, message = self.store:insert_task({ run = self.uid, sequence = rec.sequence or 0,
    server = handle.server or "", task_id = handle.id, tool = core.repair_utf8(rec.call.name),
    arguments_sha256 = lease.digest(rec.call.arguments), arguments = json.try_encode(rec.call.arguments or {}) or "",
    round = rec.round or self.round, handle = json.encode(handle), status = handle.status,
    started_by = self.owner }, self.owner, json.encode(json.array(self.fenced)))
  if uid then
    rec.task.uid = uid
  else
    if entry then entry.task_id = nil end
    warn_to(self.log, string.format('The handle of task %s (tool "%s", run %s) could not be stored: %s',
      core.clip(handle.id), rec.call.name, self.uuid, uid == false and "the lease is lost" or tostring(message)))
  end
end

-- What the tool answered, as a bounded ToolResult: a tool that raises or
-- answers with something else is an error result (and a log line), and an
-- err it carries is passed on unchanged. → result, duration in ms
local function call_tool(self, rec)
  local _ <close> = on_the_wire(self)
  if rec.offer then return fetch_offer(self, rec) end
  local name, tool = rec.call.name, rec.tool
  local started = self.clock()
  -- each round of input the server asked for is an event of its own: which inputs were answered
  -- and how (accept, decline, cancel), never what the person entered
  local function on_input(round)
    note(self, "input", { round = self.round, toolName = core.repair_utf8(name), inputRound = round.round,
      answers = round.answers })
  end
  local context = { cancel = function() return cancel_requested(self) end, on_input = on_input }
  if self.tasks and tool.remote then
    context.task, context.budget = true, self.task_budget
    context.on_task = function(handle) task_started(self, rec, handle) end
  end
  local ok, answer = pcall(tool.execute, tool, rec.call.arguments, context)
  local duration_ms = (self.clock() - started) * 1000
  if not ok then
    warn_to(self.log, string.format('Tool "%s" raised: %s', name, tostring(answer)))
    return error_result(string.format('Error: tool "%s" failed.', name)), duration_ms
  elseif type(answer) == "string" then
    return { text = core.bound(answer), is_error = false }, duration_ms
  elseif type(answer) ~= "table" or type(answer.text) ~= "string" then
    return error_result(string.format('Error: tool "%s" failed.', name)), duration_ms
  end
  local err = type(answer.err) == "table" and answer.err or nil
  if type(answer.links) == "table" and type(tool.server_identifier) == "string" then
    -- a resource_link is read back from the server that returned it (run:read_resource(nil, uri))
    self.links = self.links or {}
    for _, uri in ipairs(answer.links) do
      if type(uri) == "string" and self.links[uri] == nil then self.links[uri] = tool.server_identifier end
    end
  end
  return { text = core.bound(answer.text), is_error = answer.is_error == true or err ~= nil, err = err }, duration_ms
end

-- After the call: nothing with a side effect runs unrecorded (the fence stays
-- stamped: the effect happened and its record is missing), a cancellation
-- ends the run, and otherwise the lease is renewed and the fence cleared —
-- once no write of the turn is left unrecorded (`last_write`).
local function settle_call(self, rec, recorded, store_error, last_write)
  local write = is_write(rec.tool)
  if not recorded and write then
    local err = fail(self, "audit_persistence_failed", string.format('The step of tool "%s" could not be recorded '
      .. "in run %s; the run stops because a write must not go unrecorded.", rec.call.name, self.uuid), store_error)
    return stop(rec, error_result(err.message, err))
  end
  local err = rec.result.err
  if (err and err.kind == "cancelled") or cancel_requested(self) then
    conclude(self, lease.CANCELLED)
    rec.stopped = true
    return
  end
  if not self.persisted then return end
  local fields = { lease_expires = lease_until(self) }
  local clears = write and last_write
  if clears then fields.fence = "" end
  local ok, lease_err = under_lease(self, fields)
  if not ok then
    lease_trouble(self, nil, lease_err)
    rec.stopped = true
  elseif clears then
    self.fenced = {}
  end
end

-- Record an executed call's step, then settle it. A call that ran after the
-- run ended (it was in flight with others) is still recorded: it happened.
local function record_call(self, turn, rec, last_write)
  if rec.offer then
    record_read(self, rec)
    if self.status == lease.RUNNING then settle_call(self, rec, true, nil, false) else rec.stopped = true end
    return
  end
  local result = rec.result
  local recorded, store_error = record_step(self, { round = turn.round, name = rec.call.name,
    arguments = rec.call.arguments, text = result.text, is_error = result.is_error, duration_ms = rec.duration_ms,
    task = rec.task, error_kind = type(result.err) == "table" and result.err.kind or nil })
  if self.status == lease.RUNNING then
    settle_call(self, rec, recorded, store_error, last_write)
  else
    rec.stopped = true
  end
end

-- Run the calls that are ready, all at once (one of them blocks as before).
local function execute_all(self, ready)
  if #ready == 1 then
    ready[1].result, ready[1].duration_ms = call_tool(self, ready[1])
  else
    local tasks = {}
    for i, rec in ipairs(ready) do tasks[i] = function() return call_tool(self, rec) end end
    for i, answer in ipairs(engine.gather(tasks)) do ready[i].result, ready[i].duration_ms = answer[1], answer[2] end
  end
  for _, rec in ipairs(ready) do rec.state = DONE end
end

---------------------------------------------------------------------------
-- Turns
---------------------------------------------------------------------------

local function check_calls(calls)
  if type(calls) ~= "table" then error("turn: calls must be a list of { name, arguments }", 3) end
  local ids = {}
  for i, call in ipairs(calls) do
    if type(call) ~= "table" or type(call.name) ~= "string" then
      error(string.format("turn: call %d must be a table with a string name", i), 3)
    end
    if call.id ~= nil and (type(call.id) ~= "string" or call.id == "" or ids[call.id]) then
      error(string.format("turn: the id of call %d must be a non-empty string no other call of the turn has", i), 3)
    end
    if call.id then ids[call.id] = true end
    if call.arguments ~= nil and type(call.arguments) ~= "table" then
      error(string.format("turn: the arguments of call %d must be a table", i), 3)
    end
  end
end

local function check_not_waiting(self)
  if self.status == lease.WAITING then
    error("the run is waiting for approval: call approve() or deny(), then resume()", 3)
  end
end

-- The caller's view of the turn, built from its records.
local function results_of(turn)
  local out = {}
  for i, rec in ipairs(turn.records) do
    if (rec.state == SUSPENDED or rec.state == ADMITTING) and rec.offer then
      out[i] = { suspended = true, is_error = false, text = string.format('The run is waiting for approval; %s '
        .. '"%s" of "%s" has not been read yet.', rec.offer.kind, core.clip(rec.offer.target),
        rec.offer.row.identifier) }
    elseif rec.state == SUSPENDED or rec.state == ADMITTING then
      out[i] = { suspended = true, is_error = false,
        text = string.format('The run is waiting for approval; "%s" has not been called yet.', rec.call.name) }
    else
      local r = rec.result
      out[i] = { text = r.text, is_error = r.is_error, err = r.err, stopped = rec.stopped }
    end
  end
  return out
end

-- A waiting record as a step: { kind = "call", name, arguments } | { kind =
-- "read", server, uri } | { kind = "prompt", server, name, arguments }.
-- Each step also carries the record's id, whether it needs a person
-- (needs_approval) and why it waits (reason: "approval", or "behind:<id>"
-- for a step that only waits behind the one that stopped the turn).
local function step_of(rec)
  local offer, step = rec.offer
  if not offer then
    step = { kind = "call", name = rec.call.name, arguments = rec.call.arguments }
  elseif offer.kind == "resource" then
    step = { kind = "read", server = offer.row.identifier, uri = offer.target }
  else
    step = { kind = "prompt", server = offer.row.identifier, name = offer.target, arguments = offer.arguments }
  end
  step.id, step.needs_approval, step.reason = rec.id, rec.needs_approval == true, rec.reason
  return step
end

-- What a waiting run keeps on its row so that another process can take it
-- over: the round and each step that waits, with its arguments, as JSON text
-- ({ round, steps = { { kind = "call", name, arguments } | { kind = "read",
-- server, uri } | { kind = "prompt", server, name, arguments } } }); "" when
-- the arguments cannot be encoded (such a run is resumed only by its process).
local function steps_text(turn)
  local steps = {}
  for _, rec in ipairs(turn.records) do
    if rec.state == SUSPENDED then
      local step = step_of(rec)
      if step.kind ~= "read" then step.arguments = step.arguments or {} end
      steps[#steps + 1] = step
    end
  end
  return json.try_encode { round = turn.round, steps = json.array(steps) } or ""
end

-- Hold the turn from record `from` on (the first call that needs a person;
-- the calls before it have run): it and every call after it wait, each with
-- why (see step_of). The steps that wait are kept on the run's row with its
-- status, in one guarded write, and any earlier decision is cleared. A run
-- that ended meanwhile makes none of them.
local function suspend(self, turn, from)
  local stop_id = turn.records[from].id
  for i = from, #turn.records do
    local rec = turn.records[i]
    if rec.state == ADMITTED or rec.state == ADMITTING then
      if self.status ~= lease.RUNNING then
        not_called(self, rec)
      else
        rec.needs_approval = needs_person(self, rec)
        rec.reason = (i == from or rec.needs_approval) and "approval" or ("behind:" .. stop_id)
        rec.state, rec.approved = SUSPENDED, nil
      end
    end
  end
  if self.status ~= lease.RUNNING then return results_of(turn) end
  self.pending_steps = steps_text(turn)
  local ok, err = under_lease(self, { status = lease.WAITING, lease_expires = lease_until(self),
    pending_steps = self.pending_steps, approval = "" })
  if self.persisted and not ok then
    lease_trouble(self, nil, err)
    for _, rec in ipairs(turn.records) do
      if rec.state == SUSPENDED then not_called(self, rec) end
    end
    return results_of(turn)
  end
  self.status, self.waiting, self.decisions, self.approval_text = lease.WAITING, turn, {}, ""
  local listed = {}
  for _, rec in ipairs(turn.records) do
    if rec.state == SUSPENDED then
      local entry
      if rec.offer then
        entry = { offerKind = rec.offer.kind, server = rec.offer.row.identifier,
          target = core.repair_utf8(rec.offer.target) }
      else
        entry = { toolName = core.repair_utf8(rec.call.name), toolArguments = rec.call.arguments or {} }
      end
      entry.id, entry.needsApproval, entry.reason = core.repair_utf8(rec.id), rec.needs_approval, rec.reason
      listed[#listed + 1] = entry
    end
  end
  note(self, "approval_required", { round = turn.round, calls = listed })
  return results_of(turn)
end

-- Ready every admitted call in the model's order (the cancel flag, the fence
-- stamped for writes); → the calls to execute, and the last write among them.
-- The turn's steps are recorded in the model's order after the calls (a
-- refusal's and an executed call's; a call not made has none), so each call's
-- audit sequence is known before it is sent.
local function ready_all(self, turn, limit)
  local ready, last_write, sequence = {}, nil, self.sequence
  for i, rec in ipairs(turn.records) do
    if i >= limit then break end
    if rec.state == REFUSED then
      sequence = sequence + 1
    elseif rec.state == ADMITTED then
      if self.status == lease.RUNNING and ready_to_send(self, rec, sequence + 1) then
        sequence = sequence + 1
        ready[#ready + 1] = rec
        if is_write(rec.tool) then last_write = rec end
      elseif rec.state == ADMITTED then
        not_called(self, rec)
      end
    end
  end
  return ready, last_write
end

-- Admit the turn's calls in the model's order up to the first one that
-- needs a person (admit_all); execute the admitted calls before it at once
-- and record their steps in the model's order, whatever order they finished
-- in; then hold the rest of the turn for approval (suspend), or end it.
local function play(self, turn)
  local stop_at = admit_all(self, turn)
  local limit = stop_at or (#turn.records + 1)
  local ready, last_write = ready_all(self, turn, limit)
  execute_all(self, ready)
  for i, rec in ipairs(turn.records) do
    if i >= limit then break end
    if rec.state == REFUSED then
      settle_refusal(self, turn, rec)
    elseif rec.result and rec.duration_ms and not rec.recorded then
      rec.recorded = true
      record_call(self, turn, rec, rec == last_write)
    end
  end
  if stop_at then return suspend(self, turn, stop_at) end
  return results_of(turn)
end

---------------------------------------------------------------------------
-- A read as a turn of its own
---------------------------------------------------------------------------

-- One gated read: a record of its own (see new_turn), admitted by the gate;
-- where the operator asked for approval it suspends the run as a turn of one
-- read (run:resume() then executes it and returns its result), otherwise it
-- is sent at once and its event recorded. → { text, is_error [, err] [, suspended] }
local function gated_read(self, kind, identifier, target, arguments, fetch)
  if self.status ~= lease.RUNNING then
    return error_result(string.format("Error: run %s has ended (%s); nothing was read.", self.uuid, self.status),
      self.error)
  end
  self.reads = (self.reads or 0) + 1
  local rec = { call = { name = string.format("mcp_%s:%s", identifier, kind) }, state = ADMITTING,
    id = string.format("read-%d-%d", self.round, self.reads),
    offer = { kind = kind, server = identifier, target = target, arguments = arguments, fetch = fetch } }
  local started = self.clock()
  admit_offer(self, rec)
  if rec.state == DONE then return rec.result end
  if rec.state == REFUSED then
    rec.duration_ms = (self.clock() - started) * 1000
    record_read(self, rec)
    return rec.result
  end
  if rec.needs_approval then return suspend(self, { round = self.round, records = { rec } }, 1)[1] end
  if cancel_requested(self) then
    conclude(self, lease.CANCELLED)
    return error_result(string.format("Error: run %s was cancelled; nothing was read.", self.uuid))
  end
  do
    local _ <close> = on_the_wire(self)
    rec.result, rec.duration_ms = fetch_offer(self, rec)
  end
  record_read(self, rec)
  return rec.result
end

-- A resource_link read whose uri no tool of the run returned: no server is
-- known for it, so nothing is read; refused as a read of an unknown server
-- is (a governance row naming no server, "mcp_?:resource", and an event).
local function unlinked_read(self, uri)
  if self.status ~= lease.RUNNING then
    return error_result(string.format("Error: run %s has ended (%s); nothing was read.", self.uuid, self.status),
      self.error)
  end
  local entry = { name = "mcp_?:resource", remote = true }
  local rec = { call = { name = entry.name }, state = ADMITTING, tool = entry,
    offer = { kind = "resource", server = "", target = uri } }
  if not refusal_recorded(self, rec, entry, policy.REASONS.NOT_REGISTERED) then return rec.result end
  refuse(rec, string.format('Error: no tool of this run returned a link to "%s", so no server is known for it; '
    .. "nothing was read.", core.clip(uri)))
  rec.duration_ms = 0
  record_read(self, rec)
  return rec.result
end

turn_module.unlinked_read = unlinked_read
turn_module.gate_context, turn_module.new_turn, turn_module.stop, turn_module.refuse = gate_context, new_turn, stop,
  refuse
turn_module.check_calls, turn_module.check_not_waiting, turn_module.step_of = check_calls, check_not_waiting, step_of
turn_module.play, turn_module.gated_read, turn_module.needs_person = play, gated_read, needs_person
turn_module.tool_now = tool_now

return turn_module
