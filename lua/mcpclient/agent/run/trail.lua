--- A run's trail (mcpclient.agent.run): the events its store row keeps in
-- order, one per step.
--
-- Rules: every call's TOOL event is recorded, fail-closed for writes (a write
-- whose step could not be stored stops the run: see lease.lua), fail-soft
-- for the rest; a step names what the model asked and what it read, under
-- the text rule; a task-backed call's step closes its task in the same
-- transaction (a task is open exactly while its step is missing, and only
-- one owner records it). An unpersisted run keeps its trail in memory.
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"
local lease = require "mcpclient.agent.run.lease"

local json = core.json
local audit_duration = require("mcpclient.agent.store.core").audit_duration
local warn_to = lease.warn
local UNENCODABLE = lease.UNENCODABLE

local PAYLOAD_ORDER = { "kind", "round", "durationMs", "toolName", "toolArguments", "toolResult", "toolIsError",
  "errorKind", "taskId", "taskServer", "startedBy", "finishedBy" }

local trail = {}

-- JSON text of an event payload. Arguments a model wrote may not encode
-- (a function, a sparse list): the step is still recorded, without them.
local function encode_payload(payload, order)
  if order then json.set_key_order(payload, order) end
  local text = json.try_encode(payload)
  if text then return text end
  payload.toolArguments = UNENCODABLE
  if payload.calls then
    for _, call in ipairs(payload.calls) do call.toolArguments = nil end
  end
  return json.encode(payload)
end

-- The step of a call, and for a task-backed one the task closed (its last
-- status, who finished it) in the same transaction: a task is open exactly
-- while its step is missing, and only one owner records it. → sequence |
-- nil, message, err
local function append_step(self, event, task)
  if not (task and task.uid) then return self.store:append_event(self.uid, event) end
  return self.store:transaction(function()
    local closed, message, err = self.store:close_task(task.uid, self.owner or "", task.status or "")
    if not closed then return nil, message, err end
    if closed ~= 1 then
      return errors.fail("run_lease_lost", { run_uuid = self.uuid, detail = string.format("Run %s lost its "
        .. "execution lease: the step of task %s was recorded by another owner.", self.uuid, task.task_id) })
    end
    return self.store:append_event(self.uid, event)
  end)
end

-- Record one TOOL step. → true when it is in the store | false, err
local function record_step(self, step)
  local arguments = step.arguments
  if arguments == nil then arguments = {} end
  local duration = audit_duration(step.duration_ms or 0)
  -- names and texts reach JSON as valid UTF-8 whatever the model or the tool wrote
  local payload = encode_payload({
    kind = "tool", round = step.round, durationMs = duration, toolName = core.repair_utf8(step.name),
    toolArguments = arguments, toolResult = core.repair_utf8(step.text), toolIsError = step.is_error == true,
    -- a call that failed as the library's failure value (not an isError answer): its kind, for the audit
    errorKind = step.error_kind,
    taskId = step.task and core.repair_utf8(step.task.task_id) or nil,
    taskServer = step.task and core.repair_utf8(step.task.server) or nil,
    startedBy = step.task and core.repair_utf8(step.task.started_by) or nil,
    finishedBy = step.task and core.repair_utf8(self.owner or "") or nil,
  }, PAYLOAD_ORDER)
  local event = { kind = "tool", round = step.round, duration_ms = duration, payload = payload }
  if not self.persisted then
    self.trail[#self.trail + 1] = event
    return false
  end
  local sequence, message, err = append_step(self, event, step.task)
  if not sequence then
    warn_to(self.log, string.format('The step of tool "%s" in run %s could not be recorded: %s',
      step.name, self.uuid, tostring(message)))
    return false, err
  end
  self.sequence = sequence
  return true
end

-- Record an event that is not a tool step (approval): fail-soft.
local function note(self, kind, fields)
  fields.kind = kind
  local event = { kind = kind, round = fields.round or self.round, payload = encode_payload(fields) }
  if self.persisted then
    local sequence = self.store:append_event(self.uid, event)
    if sequence then self.sequence = sequence end
  else
    self.trail[#self.trail + 1] = event
  end
end

-- The run's events in order (Run:events): { sequence, kind, round, duration_ms, payload
-- (JSON text), data (payload decoded) }. A persisted run reads the store; an
-- unpersisted one answers with what it kept in memory (nothing else keeps it).

-- @return list | nil, message, err
function trail.events(self)
  local list = self.trail
  if self.persisted then
    local rows, message, err = self.store:events(self.uid)
    if not rows then return nil, message, err end
    list = rows
  end
  local out = {}
  for i, e in ipairs(list) do
    out[i] = { sequence = e.sequence or i, kind = e.kind, round = e.round, duration_ms = e.duration_ms or 0,
      payload = e.payload, data = json.decode(e.payload) }
  end
  return out
end

-- Record one read as an event of the run (fail-soft: a read has no side
-- effect to fence), with its latency.
local function record_offer(self, kind, fields, duration_ms)
  local duration = audit_duration(duration_ms or 0)
  fields.kind, fields.round, fields.durationMs = kind, self.round, duration
  if fields.result ~= nil then fields.result = core.repair_utf8(fields.result) end  -- (a sampling event has none)
  local event = { kind = kind, round = self.round, duration_ms = duration, payload = encode_payload(fields) }
  if not self.persisted then
    self.trail[#self.trail + 1] = event
    return
  end
  local sequence, message = self.store:append_event(self.uid, event)
  if sequence then
    self.sequence = sequence -- the next call's fence names the sequence its step is to take
  else
    warn_to(self.log, string.format("A %s read in run %s could not be recorded: %s", kind, self.uuid,
      tostring(message)))
  end
end

-- The decision as the "approval" event records it.
-- A decision's event: on one waiting step (`id`) or on the batch (no id),
-- a denial with the reason the person gave, if any.
local function approval_event(round, approved, by, id, reason)
  return { kind = "approval", round = round, payload = encode_payload({ kind = "approval", round = round,
    approved = approved, by = core.repair_utf8(by), id = id and core.repair_utf8(id) or nil,
    reason = reason and core.repair_utf8(reason) or nil }) }
end


trail.encode_payload, trail.record_step, trail.note = encode_payload, record_step, note
trail.record_event, trail.approval_event = record_offer, approval_event

return trail
