--- The audit repository of the store: a run's event stream (agent_run_event,
-- the trail of its steps, by sequence) and the governance log
-- (governance_event, one row per refusal of the gate). Both are append-only.
--
-- Rule: an event's sequence is taken and written in one statement, under a
-- lock on the run's stream where the database does not serialise writers
-- (PostgreSQL), so concurrent writers on any host never share a number nor
-- leave a gap.
local core = require "mcpclient.agent.store.core"
local dialect = require "mcpclient.agent.store.dialect"

local check_uid, adapter_of, fail, as_integer = core.check_uid, core.adapter_of, core.fail, core.as_integer
local encode_fields, append, insert, insert_sql = core.encode_fields, core.append, core.insert, core.insert_sql
local select_rows, take_turn = core.select_rows, core.take_turn

local audit = {}

local hydrate_event = core.hydrator {
  uid = "integer", run = "integer", sequence = "integer", kind = "string", round = "integer",
  duration_ms = "number", payload = "string", created_at = "integer",
}

local hydrate_governance = core.hydrator {
  uid = "integer", pid = "integer", created_at = "integer", correlation_id = "string", decision = "string",
  reason = "string", provider = "string", model = "string", configuration_identifier = "string",
  user_uid = "integer", tool_name = "string", agentrun_uid = "integer", guardrail = "string", detail = "string",
}

local function write_event(self, run_uid, row)
  local what = "append an event to run " .. run_uid
  local adapter = adapter_of(self)
  local uid, message, code = adapter:insert("INSERT INTO agent_run_event (run, sequence, kind, round, duration_ms, "
    .. "payload, created_at) VALUES (?, (SELECT COALESCE(MAX(sequence), 0) + 1 FROM agent_run_event WHERE run = ?), "
    .. "?, ?, ?, ?, ?)", row)
  if not uid then return fail(what, message, code) end
  local rows
  rows, message, code = adapter:rows("SELECT sequence FROM agent_run_event WHERE uid = ?", { uid })
  if not rows then return fail(what, message, code) end
  return as_integer(rows[1] and rows[1].sequence)
end

--- Append an event to a run's stream; the sequence is taken and written in
-- one statement, and on a database whose transactions do not serialise
-- writers (PostgreSQL) under a lock on the run's stream, so concurrent
-- writers on any host never share a number nor leave a gap. → sequence
function audit.append_event(self, run_uid, event)
  check_uid(run_uid, "run_uid")
  if type(event) ~= "table" then error("append_event: event must be a table", 2) end
  if type(event.kind) ~= "string" then error("append_event: kind must be a string", 2) end
  local round = event.round or 0
  if math.type(round) ~= "integer" then error("append_event: round must be an integer", 2) end
  local duration = event.duration_ms or 0
  if type(duration) ~= "number" then error("append_event: duration_ms must be a number", 2) end
  local payload = event.payload or ""
  if type(payload) ~= "string" then error("append_event: payload must be JSON text", 2) end
  duration = core.audit_duration(duration)
  local row = { run_uid, run_uid, event.kind, round, duration, payload, os.time() }
  if not dialect.of(adapter_of(self)).turn_lock then return write_event(self, run_uid, row) end
  return self:transaction(function()
    local ok, message, err = take_turn(self, dialect.EVENTS, run_uid, "append an event to run " .. run_uid)
    if not ok then return nil, message, err end
    return write_event(self, run_uid, row)
  end)
end

--- A run's events by sequence.
function audit.events(self, run_uid)
  check_uid(run_uid, "run_uid")
  return select_rows(self, "read the events of run " .. run_uid,
    "SELECT * FROM agent_run_event WHERE run = ? ORDER BY sequence ASC", { run_uid }, hydrate_event)
end

---------------------------------------------------------------------------
-- Governance events: append-only, one row per denial
---------------------------------------------------------------------------

local governance_fields = {
  pid = "integer", created_at = "integer", correlation_id = "string", decision = "string", reason = "string",
  provider = "string", model = "string", configuration_identifier = "string", user_uid = "integer",
  tool_name = "string", agentrun_uid = "integer", guardrail = "string", detail = "string",
}

--- Append a governance event (created_at defaults to now). → uid
function audit.insert_governance_event(self, fields)
  local columns, values = encode_fields(fields, governance_fields, "insert_governance_event")
  if fields.created_at == nil then
    append(columns, values, "created_at", os.time())
  end
  return insert(self, "record a governance event", insert_sql("governance_event", columns), values)
end

--- Every governance event by uid.
function audit.governance_events(self)
  return select_rows(self, "read the governance events", "SELECT * FROM governance_event ORDER BY uid ASC", {},
    hydrate_governance)
end

return audit
