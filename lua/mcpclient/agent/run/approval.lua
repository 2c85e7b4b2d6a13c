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

-- What the host is asked to approve for one suspended record.
local function pending_entry(rec)
  local step = step_of(rec)
  -- a uri may come from a resource_link a tool returned: far-side text, shown under the text rule
  if step.kind == "read" then step.uri = core.clip(step.uri) end
  if step.kind == "prompt" then step.name = core.clip(step.name) end
  return step
end

-- Run:pending(): the suspended records, as the host is asked to approve them.
function approval.pending(self)
  local out = {}
  if not self.waiting then return out end
  for _, rec in ipairs(self.waiting.records) do
    if rec.state == SUSPENDED then out[#out + 1] = pending_entry(rec) end
  end
  return out
end

-- The audit's last sequence, read again: another process may have appended
-- an event (a decision) since this one wrote its last, and a call's fence
-- names the sequence its step is to take.
local function sync_sequence(self)
  if not self.persisted then return end
  local events = self.store:events(self.uid)
  for _, e in ipairs(events or {}) do self.sequence = math.max(self.sequence, e.sequence) end
end

-- Record the host's decision. A persisted run whose waiting steps are on its
-- row records it there (the first decision wins, from any process; see
-- run.decide), so a process that takes the run over resumes with it.
local function decide_approval(self, approved)
  if self.status ~= lease.WAITING then error("the run is not waiting for approval", 3) end
  local round = self.waiting.round
  if self.persisted and (self.pending_steps or "") ~= "" then
    local decided, message = self.store:decide_run(self.uid, approved and "approved" or "denied", self.pending_steps,
      approval_event(round, approved, self.owner or ""), self.owner or "")
    if decided == 1 then
      self.approval = approved
      sync_sequence(self)
      return true
    elseif decided == 0 then
      local row = self.store:run(self.uid)
      if row and row.status == lease.WAITING and row.claimed_by == self.owner and row.approval ~= "" then
        -- a person decided first, from another process: that decision holds
        self.approval = row.approval == "approved"
        return errors.fail("invalid", { field = "approval", detail = string.format("Run %s was %s already; that "
          .. "decision holds.", self.uuid, row.approval) })
      end
      self.waiting = nil
      local failure = lease_trouble(self, nil, nil)
      return nil, failure.message, failure
    end
    warn_to(self.log, string.format("The decision on run %s could not be stored, so it holds in this process "
      .. "only: %s", self.uuid, tostring(message)))
  end
  self.approval = approved
  note(self, "approval", { round = round, approved = approved, by = core.repair_utf8(self.owner or "") })
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
  self.status, self.owner, self.waiting, self.approval = lease.RELEASED, nil, nil, nil
  self:close()
  return true
end

-- Run:resume(): a fresh segment; approved calls admitted again and executed, denied ones refused.
function approval.resume(self)
  if self.status ~= lease.WAITING then error("the run is not waiting for approval", 2) end
  if self.approval == nil and self.persisted then
    -- a person may have decided from another process (run.decide, `mcpclient runs approve`)
    local row = self.store:run(self.uid)
    if row and row.approval ~= "" and row.pending_steps == self.pending_steps then
      self.approval = row.approval == "approved"
      sync_sequence(self)
    end
  end
  if self.approval == nil then error("resume: approve() or deny() first", 2) end
  local turn, approved = self.waiting, self.approval
  local ok, err = under_lease(self, { status = lease.RUNNING, lease_expires = lease_until(self), pending_steps = "",
    approval = "" })
  self.pending_steps = nil
  self.waiting, self.approval = nil, nil
  if self.persisted and not ok then lease_trouble(self, nil, err) else self.status = lease.RUNNING end
  self.segment, self.remote_calls = self.segment + 1, 0
  for _, rec in ipairs(turn.records) do
    if rec.state == SUSPENDED then
      if not approved and self.status == lease.RUNNING and rec.offer then
        -- a denied read is a refusal of the gate's kind: it reaches the governance log
        local d = self.gate:deny_offer(rec.tool, self.configuration, self.user, gate_context(self))
        if d.unrecorded then
          local err_value = unrecorded_refusal(self, rec.tool.name, d.unrecorded)
          stop(rec, error_result(err_value.message, err_value))
        else
          refuse(rec, string.format('Error: reading %s from "%s" was not approved; nothing was read.',
            rec.offer.kind, rec.offer.row.identifier))
        end
      elseif not approved and self.status == lease.RUNNING then
        refuse(rec, string.format('Error: the call to "%s" was not approved.', rec.call.name))
      else
        rec.state = ADMITTING
      end
    end
  end
  return play(self, turn, true)
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
  for i, step in ipairs(parsed.steps) do
    if step.kind == "call" then
      steps[i] = { kind = "call", name = core.clip(step.name), arguments = step.arguments or {} }
    elseif step.kind == "read" then
      steps[i] = { kind = "read", server = core.clip(step.server), uri = core.clip(step.uri) }
    else
      steps[i] = { kind = "prompt", server = core.clip(step.server), name = core.clip(step.name),
        arguments = step.arguments or {} }
    end
  end
  return { round = parsed.round, steps = steps, approval = row.approval ~= "" and row.approval or nil }
end

-- run.decide: a person's decision on a waiting run, from any process (the first one wins).
function approval.decide(store, run_uid, approved, options)
  if type(store) ~= "table" then error("run.decide: store must be a store", 2) end
  if math.type(run_uid) ~= "integer" or run_uid <= 0 then error("run.decide: run_uid must be a run's uid", 2) end
  if type(approved) ~= "boolean" then error("run.decide: approved must be a boolean", 2) end
  options = options or {}
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
  if row.approval ~= "" then
    return errors.fail("invalid", { field = "run", detail = string.format("Run %d was %s already; that decision "
      .. "holds.", run_uid, row.approval) })
  end
  local steps = options.steps or row.pending_steps
  local decided
  decided, message, err = store:decide_run(run_uid, approved and "approved" or "denied", steps,
    approval_event(parsed.round, approved, by))
  if decided == nil then return nil, message, err end
  if decided ~= 1 then
    return errors.fail("invalid", { field = "run", detail = string.format("Run %d changed before the decision "
      .. "was recorded (decided, resumed or finished meanwhile); nothing was recorded.", run_uid) })
  end
  return true
end

approval.decide_approval, approval.parse_steps = decide_approval, parse_steps

return approval
