--- Waiting runs and decisions on them (mcpclient.agent.run): what a run
-- held for approval waits on, the host's approve/deny, a decision from any
-- process, resume, and handing a waiting run over.
--
-- An approval-bound call suspends the run before anything of its model turn
-- executes: run:turn{ calls... } admits every call of the turn first and
-- executes none of them when one needs approval; run:invoke(name, args) is a
-- turn of one call. run.status is then "waiting_approval" and run:pending()
-- lists the calls. The host calls run:approve() or run:deny() and
-- run:resume(), which starts a new segment (a fresh remote-call budget, the
-- lease renewed) and returns the whole turn's results: approved calls are
-- admitted again and executed, denied ones answer with an error result. A
-- resource read or prompt get from a server whose operator asked for
-- approval is the same kind of step: run:read_resource / run:get_prompt
-- suspend the run as a turn of that one read (pending kind "read" or
-- "prompt"), and resume() sends it once after approve(), or records the
-- denial in the governance log and sends nothing.
--
-- Rules: the steps that wait are kept on the run's row with its status, and
-- a decision is recorded there from any process (run.decide; the holder's
-- approve/deny only while it holds the lease); the first decision wins, and
-- a decision never lands on a later suspension (it names the steps it was
-- shown). Another process takes a waiting run over (take_over.lua) once its
-- lease expired or its holder released it (run:release()), and resumes it.
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"
local lease = require "mcpclient.agent.run.lease"
local trail = require "mcpclient.agent.run.trail"
local turns = require "mcpclient.agent.run.turn"

local json = core.json
local error_result = require("mcpclient.agent.tool").error_result
local warn_to = lease.warn
local under_lease, lease_trouble, unrecorded_refusal = lease.under_lease, lease.lease_trouble, lease.unrecorded_refusal
local lease_until = lease.lease_until
local note, approval_event = trail.note, trail.approval_event
local SUSPENDED, ADMITTING = turns.SUSPENDED, turns.ADMITTING
local step_of, stop, refuse, play, gate_context = turns.step_of, turns.stop, turns.refuse, turns.play,
  turns.gate_context

local approval = {}

-- What the host is asked to approve for one suspended record: { id, kind,
-- tool, server, uri, needs_approval, reason } (a call's name and arguments,
-- a prompt's name and arguments beside them).
local function pending_entry(self, rec)
  local step = step_of(rec)
  -- a uri may come from a resource_link a tool returned: far-side text, shown under the text rule
  if step.kind == "read" then step.uri = core.clip(step.uri) end
  if step.kind == "prompt" then step.name = core.clip(step.name) end
  step.tool = rec.call.name
  if step.kind == "call" then
    local tool = rec.tool or self.registry.get(rec.call.name)
    step.server = tool and tool.server_identifier or nil
  end
  step.id = core.clip(step.id)
  return step
end

-- The suspended records of the waiting turn, in the model's order.
local function suspended(self)
  local out = {}
  for _, rec in ipairs(self.waiting and self.waiting.records or {}) do
    if rec.state == SUSPENDED then out[#out + 1] = rec end
  end
  return out
end

-- Run:pending(): the suspended records, as the host is asked to approve them.
function approval.pending(self)
  local out = {}
  for _, rec in ipairs(suspended(self)) do out[#out + 1] = pending_entry(self, rec) end
  return out
end

-- The decisions a row's approval text holds, over the ids that wait:
-- { [id] = "approved" | "denied" }. "approved"/"denied" is a decision on
-- the whole batch; a JSON object decides id by id.
-- A denial may carry its reason: { denied = "<reason>" } for that id.
-- → decisions, reasons ({ [id] = reason })
local function decisions_of(text, ids)
  local out, reasons = {}, {}
  if text == "approved" or text == "denied" then
    for _, id in ipairs(ids) do out[id] = text end
  elseif type(text) == "string" and text:sub(1, 1) == "{" then
    local ok, data = pcall(json.decode, text)
    if ok and type(data) == "table" then
      for _, id in ipairs(ids) do
        local d = data[id]
        if d == "approved" or d == "denied" then
          out[id] = d
        elseif type(d) == "table" and type(d.denied) == "string" then
          out[id], reasons[id] = "denied", d.denied
        end
      end
    end
  end
  return out, reasons
end

-- The approval text for `decisions`: the batch form when every id is
-- decided alike (what a whole-batch decision always was), else the JSON object.
local function decisions_text(decisions, ids, reasons)
  local first, same = decisions[ids[1]], true
  for _, id in ipairs(ids) do
    if decisions[id] ~= first or (reasons and reasons[id]) then same = false end
  end
  if same and first then return first end
  local object = {}
  for _, id in ipairs(ids) do
    object[id] = reasons and reasons[id] and { denied = reasons[id] } or decisions[id]
  end
  return json.encode(object)
end

-- The ids a waiting turn's steps name (pending_steps), in order.
local function ids_of_steps(steps)
  local ids = {}
  for i, step in ipairs(steps) do ids[i] = step.id or tostring(i) end
  return ids
end

local function ids_of(self)
  local ids = {}
  for i, rec in ipairs(suspended(self)) do ids[i] = rec.id end
  return ids
end

-- The audit's last sequence, read again: another process may have appended
-- an event (a decision) since this one wrote its last, and a call's fence
-- names the sequence its step is to take.
local function sync_sequence(self)
  if not self.persisted then return end
  local events = self.store:events(self.uid)
  for _, e in ipairs(events or {}) do self.sequence = math.max(self.sequence, e.sequence) end
end

-- The decisions `approved` makes on `id` (nil: every step not decided yet)
-- on top of `decisions`. → the new decisions, or nil, message when there is
-- nothing left to decide.
local function merged(decisions, reasons, ids, id, approved, reason, who)
  local value = approved and "approved" or "denied"
  local out, why = {}, {}
  for k, v in pairs(decisions) do out[k] = v end
  for k, v in pairs(reasons) do why[k] = v end
  if id then
    if out[id] then
      return nil, string.format("%s: step %s was %s already; that decision holds.", who, core.clip(id), out[id])
    end
    out[id], why[id] = value, (not approved) and reason or nil
    return out, why
  end
  local any = false
  for _, each in ipairs(ids) do
    if not out[each] then out[each], why[each], any = value, (not approved) and reason or nil, true end
  end
  if not any then
    local all = decisions_text(decisions, ids)
    return nil, string.format("%s was %s already; that decision holds.", who,
      (all == "approved" or all == "denied") and all or "decided step by step")
  end
  return out, why
end

local function unknown_id(ids, id)
  for _, each in ipairs(ids) do
    if each == id then return false end
  end
  return true
end

-- Record the host's decision on one waiting step (`id`) or on every one not
-- decided yet. A persisted run whose waiting steps are on its row records it
-- there (the first decision on a step wins, from any process; see
-- run.decide), so a process that takes the run over resumes with it.
local function decide_approval(self, approved, id, reason)
  if self.status ~= lease.WAITING then error("the run is not waiting for approval", 3) end
  if id ~= nil and type(id) ~= "string" then error("approve/deny: the id must be a string", 3) end
  if reason ~= nil and type(reason) ~= "string" then error("deny: the reason must be a string", 3) end
  local ids = ids_of(self)
  if id and unknown_id(ids, id) then
    error(string.format("approve/deny: no step of the waiting turn has the id %q", core.clip(id)), 3)
  end
  local round = self.waiting.round
  local event = approval_event(round, approved, self.owner or "", id, reason)
  if self.persisted and (self.pending_steps or "") ~= "" then
    for _ = 1, 5 do
      local decisions, message = merged(self.decisions or {}, self.reasons or {}, ids, id, approved, reason,
        string.format("Run %s", self.uuid))
      if not decisions then return errors.fail("invalid", { field = "approval", detail = message }) end
      local reasons = message
      local text = decisions_text(decisions, ids, reasons)
      local decided
      decided, message = self.store:decide_run(self.uid, text, self.pending_steps, event, self.owner or "",
        self.approval_text or "")
      if decided == 1 then
        self.decisions, self.reasons, self.approval_text = decisions, reasons, text
        sync_sequence(self)
        return true
      elseif decided == 0 then
        local row = self.store:run(self.uid)
        if not (row and row.status == lease.WAITING and row.claimed_by == self.owner
            and row.pending_steps == self.pending_steps) then
          self.waiting = nil
          local failure = lease_trouble(self, nil, nil)
          return nil, failure.message, failure
        end
        -- another process decided meanwhile: its decisions hold, and this one goes on top of them
        self.decisions, self.reasons = decisions_of(row.approval, ids)
        self.approval_text = row.approval
      else
        warn_to(self.log, string.format("The decision on run %s could not be stored, so it holds in this process "
          .. "only: %s", self.uuid, tostring(message)))
        break
      end
    end
  end
  local decisions, reasons = merged(self.decisions or {}, self.reasons or {}, ids, id, approved, reason,
    string.format("Run %s", self.uuid))
  if not decisions then return errors.fail("invalid", { field = "approval", detail = reasons }) end
  self.decisions, self.reasons = decisions, reasons
  note(self, "approval", { round = round, approved = approved, by = core.repair_utf8(self.owner or ""),
    id = id and core.repair_utf8(id) or nil, reason = reason and core.repair_utf8(reason) or nil })
  return true
end

-- Run:renew(): the lease for another lease_seconds, for a holder that waits for a person.
function approval.renew(self)
  if self.status ~= lease.RUNNING and self.status ~= lease.WAITING then
    error("renew: the run has ended (" .. tostring(self.status) .. ")", 2)
  end
  if not self.persisted then return true end
  local ok, err = under_lease(self, { lease_expires = lease_until(self) })
  if ok then return true end
  if err then return nil, err.message, err end
  self.waiting = nil
  local failure = lease_trouble(self, nil, nil)
  return nil, failure.message, failure
end

-- Run:release(): the lease ends now, so another process may take the waiting run over.
function approval.release(self)
  if self.status ~= lease.WAITING then error("release: the run is not waiting for approval", 2) end
  if not self.persisted or (self.pending_steps or "") == "" then
    error("release: only a stored run whose waiting steps are on its row can be released", 2)
  end
  local ok, err = under_lease(self, { lease_expires = 0 })
  if not ok then
    if err then return nil, err.message, err end
    self.waiting = nil
    local failure = lease_trouble(self, nil, nil)
    return nil, failure.message, failure
  end
  self.status, self.owner, self.waiting, self.decisions = lease.RELEASED, nil, nil, nil
  self:close()
  return true
end

-- A denial is a refusal of the gate's kind: it reaches the governance log
-- (a call's as a read's), and the step answers with an error result.
local function refuse_denied(self, rec)
  local entry = rec.tool or self.registry.get(rec.call.name) or { name = rec.call.name }
  local d = self.gate.deny_offer and self.gate:deny_offer(entry, self.configuration, self.user, gate_context(self))
  if d and d.unrecorded then
    local err_value = unrecorded_refusal(self, entry.name, d.unrecorded)
    return stop(rec, error_result(err_value.message, err_value))
  end
  local why = rec.denial_reason and (": " .. core.clip(rec.denial_reason)) or ""
  if rec.offer then
    return refuse(rec, string.format('Error: reading %s from "%s" was not approved%s; nothing was read.',
      rec.offer.kind, rec.offer.row.identifier, why))
  end
  refuse(rec, string.format('Error: the call to "%s" was not approved%s.', rec.call.name, why))
end

-- Run:resume(): a fresh segment; the waiting steps go on in the model's
-- order: approved ones admitted again and sent, denied ones refused, the
-- others admitted again (the turn stops again at the next step that needs
-- a person and was not decided). The step that stopped the turn must be decided.
function approval.resume(self)
  if self.status ~= lease.WAITING then error("the run is not waiting for approval", 2) end
  local ids = ids_of(self)
  if self.persisted then
    -- a person may have decided from another process (run.decide, `mcpclient runs approve`)
    local row = self.store:run(self.uid)
    if row and row.approval ~= "" and row.pending_steps == self.pending_steps then
      self.decisions, self.reasons = decisions_of(row.approval, ids)
      self.approval_text = row.approval
      sync_sequence(self)
    end
  end
  local decisions, reasons = self.decisions or {}, self.reasons or {}
  local first
  for _, rec in ipairs(suspended(self)) do
    if rec.reason == "approval" then first = rec break end
  end
  if first and not decisions[first.id] then
    error(string.format("resume: approve() or deny() first (the step %q waits for a person)", first.id), 2)
  end
  local turn = self.waiting
  local ok, err = under_lease(self, { status = lease.RUNNING, lease_expires = lease_until(self), pending_steps = "",
    approval = "" })
  self.pending_steps, self.approval_text = nil, nil
  self.waiting, self.decisions, self.reasons = nil, nil, nil
  if self.persisted and not ok then lease_trouble(self, nil, err) else self.status = lease.RUNNING end
  self.segment, self.remote_calls = self.segment + 1, 0
  for _, rec in ipairs(turn.records) do
    if rec.state == SUSPENDED then
      local d = decisions[rec.id]
      if d == "denied" and self.status == lease.RUNNING then
        rec.denial_reason = reasons[rec.id]
        refuse_denied(self, rec)
      else
        rec.state, rec.approved = ADMITTING, d == "approved"
      end
    end
  end
  return play(self, turn)
end

-- The waiting steps a row keeps (see steps_text), checked: { round, steps }
-- | nil when they are missing or unreadable.
local function parse_steps(text)
  if type(text) ~= "string" or text == "" then return nil end
  local ok, data = pcall(json.decode, text)
  if not ok or type(data) ~= "table" or type(data.steps) ~= "table" or #data.steps == 0 then return nil end
  for _, step in ipairs(data.steps) do
    if type(step) ~= "table" then return nil end
    local named = step.kind == "call" and step.name or step.kind == "read" and step.uri
      or step.kind == "prompt" and step.name
    if type(named) ~= "string" or (step.kind ~= "call" and type(step.server) ~= "string") then return nil end
    if step.arguments ~= nil and type(step.arguments) ~= "table" then return nil end
    if step.id ~= nil and type(step.id) ~= "string" then return nil end
  end
  return { round = math.tointeger(data.round) or 0, steps = data.steps }
end

-- run.waiting(row): a waiting run's row as a person decides on it.
function approval.waiting(row)
  if type(row) ~= "table" then error("run.waiting: row must be a run's row", 2) end
  if row.status ~= lease.WAITING then return nil end
  local parsed = parse_steps(row.pending_steps)
  if not parsed then return nil end
  local steps = {}
  local ids = ids_of_steps(parsed.steps)
  local decisions, reasons = decisions_of(row.approval, ids)
  for i, step in ipairs(parsed.steps) do
    if step.kind == "call" then
      steps[i] = { kind = "call", name = core.clip(step.name), arguments = step.arguments or {} }
    elseif step.kind == "read" then
      steps[i] = { kind = "read", server = core.clip(step.server), uri = core.clip(step.uri) }
    else
      steps[i] = { kind = "prompt", server = core.clip(step.server), name = core.clip(step.name),
        arguments = step.arguments or {} }
    end
    local s = steps[i]
    s.id, s.needs_approval = core.clip(ids[i]), step.needs_approval ~= false
    s.reason = type(step.reason) == "string" and core.clip(step.reason) or "approval"
    s.decision, s.denial_reason = decisions[ids[i]], reasons[ids[i]] and core.clip(reasons[ids[i]]) or nil
  end
  local batch = (row.approval == "approved" or row.approval == "denied") and row.approval or nil
  return { round = parsed.round, steps = steps, approval = batch }
end

-- run.decide: a person's decision on a waiting run, from any process (the first one wins).
function approval.decide(store, run_uid, approved, options)
  if type(store) ~= "table" then error("run.decide: store must be a store", 2) end
  if math.type(run_uid) ~= "integer" or run_uid <= 0 then error("run.decide: run_uid must be a run's uid", 2) end
  if type(approved) ~= "boolean" then error("run.decide: approved must be a boolean", 2) end
  options = options or {}
  local id = options.id
  if id ~= nil and (type(id) ~= "string" or id == "") then error("run.decide: id must be a non-empty string", 2) end
  if options.reason ~= nil and type(options.reason) ~= "string" then error("run.decide: reason must be a string", 2) end
  local by = options.by or "operator"
  if type(by) ~= "string" or by == "" then error("run.decide: by must be a non-empty string", 2) end
  by = core.clip(by, lease.MAX_OWNER_LENGTH)
  local row, message, err = store:run(run_uid)
  if not row then
    if message then return nil, message, err end
    return errors.fail("invalid", { field = "run", detail = string.format("No run has the id %d.", run_uid) })
  end
  local parsed = row.status == lease.WAITING and parse_steps(row.pending_steps)
  if not parsed then
    return errors.fail("invalid", { field = "run", detail = string.format("Run %d is not waiting for approval "
      .. "(it is %s)%s.", run_uid, row.status, row.status == lease.WAITING and ", and its waiting steps are not "
      .. "kept on its row, so only the process that holds it can decide" or "") })
  end
  local ids = ids_of_steps(parsed.steps)
  if id ~= nil and unknown_id(ids, id) then
    return errors.fail("invalid", { field = "id", detail = string.format("Run %d waits on no step with the id "
      .. "%q; nothing was recorded.", run_uid, core.clip(id)) })
  end
  if options.steps ~= nil and options.steps ~= row.pending_steps then
    return errors.fail("invalid", { field = "run", detail = string.format("Run %d changed before the decision "
      .. "was recorded (decided, resumed or finished meanwhile); nothing was recorded.", run_uid) })
  end
  local decisions, reasons = decisions_of(row.approval, ids)
  local who = string.format("Run %d", run_uid)
  local new, why = merged(decisions, reasons, ids, id, approved, options.reason, who)
  if not new then return errors.fail("invalid", { field = "run", detail = why }) end
  local decided
  decided, message, err = store:decide_run(run_uid, decisions_text(new, ids, why), row.pending_steps,
    approval_event(parsed.round, approved, by, id, options.reason), nil, row.approval)
  if decided == nil then return nil, message, err end
  if decided ~= 1 then
    return errors.fail("invalid", { field = "run", detail = string.format("Run %d changed before the decision "
      .. "was recorded (decided, resumed or finished meanwhile); nothing was recorded.", run_uid) })
  end
  return true
end

approval.decide_approval, approval.parse_steps = decide_approval, parse_steps
approval.decisions_of, approval.ids_of_steps = decisions_of, ids_of_steps

return approval
