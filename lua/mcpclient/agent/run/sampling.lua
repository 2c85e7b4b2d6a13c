--- A server's sampling request during a run (mcpclient.agent.run): a model
-- call the host makes on the server's behalf, judged and audited like a read
-- of that server.
--
-- Rules: the gate decides it as an offer of the server named
-- "mcp_&lt;server&gt;:sampling" — the server's operator-set data class (as its
-- row says now) against the zone of the run's providers, the
-- administrators-only rule for remote offers, the switches — and a refusal
-- is a governance row. A server whose calls need a person's approval is
-- refused too (recorded with the reason "approvalUnavailable"): the request
-- arrives while the server waits inside a call, and this host does not hold
-- that call open for a person. Each request spends one of the run's remote
-- calls. Only then does the host's own model call (run.start's on_sampling)
-- run. Every request, allowed or refused, is an event of kind "sampling" (the
-- server, the model, maxTokens, the tokens the host reports, the refusal's
-- reason), never the text of the request or the answer. A refusal answers
-- the server with an error (see mcpclient.answers).
local core = require "mcpclient.core"
local policy = require "mcpclient.agent.policy"
local lease = require "mcpclient.agent.run.lease"
local reads = require "mcpclient.agent.run.reads"
local trail = require "mcpclient.agent.run.trail"

local sampling = {}

-- What the server is told for each refusal (inert, short: the server's own
-- text is never echoed back to it).
local TOLD = {
  ended = "the run has ended",
  unknown = "the server is not enabled in this host",
  unclassified = "the server has no declared data class",
  gate = "the host's policy does not permit it",
  approval = "the server's requests need a person's approval, which this request cannot wait for",
  budget = "the run has used its budget of remote calls",
  store = "the host's store is unavailable",
}

local function gate_context(self)
  return { correlation_id = self.uuid, run_uid = self.uid or 0 }
end

local function whole(n)
  return math.type(n) == "integer" and n >= 0 and n or nil
end

-- The event of one request: what it was (never its text) and how it ended.
local function record(self, server, request, outcome, duration_ms)
  local usage = outcome.usage
  trail.record_event(self, "sampling", {
    server = core.repair_utf8(server), maxTokens = whole(request.maxTokens),
    model = outcome.model and core.repair_utf8(core.clip(outcome.model, 200)) or nil,
    tokensIn = type(usage) == "table" and whole(usage.input_tokens) or nil,
    tokensOut = type(usage) == "table" and whole(usage.output_tokens) or nil,
    allowed = outcome.refused == nil, refused = outcome.refused,
  }, duration_ms)
end

-- A refusal: its event, then the answer for the server (nil, reason).
local function refuse(self, server, request, why)
  record(self, server, request, { refused = why }, 0)
  return nil, TOLD[why]
end

-- A refusal the gate's own checks do not make, recorded as one: its
-- governance row (a row that cannot be written stops the run closed).
local function deny(self, entry, reason)
  local d = self.gate.deny_offer and self.gate:deny_offer(entry, self.configuration, self.user, gate_context(self),
    reason)
  if d and d.unrecorded then lease.unrecorded_refusal(self, entry.name, d.unrecorded) end
end

--[[
Judge and make one sampling request of the server `row` names (the row its
connection was opened for; judged as the store holds it now).
@return the host's message | nil, reason (told to the server)
]]
function sampling.judge(self, row, request)
  local server = row.identifier
  if self.status ~= lease.RUNNING or lease.cancel_requested(self) then return refuse(self, server, request, "ended") end
  local now, _, err, state = reads.server(self, server)
  if not now then
    if err then return refuse(self, server, request, "store") end
    deny(self, { name = string.format("mcp_%s:sampling", server), remote = true },
      state == "disabled" and policy.REASONS.TOOL_DISABLED or policy.REASONS.NOT_REGISTERED)
    return refuse(self, server, request, "unknown")
  end
  local entry = reads.entry(now, "sampling")
  if not entry.data_class then
    deny(self, entry, policy.REASONS.UNCLASSIFIED)
    return refuse(self, server, request, "unclassified")
  end
  local decision = self.gate:decide_offer(entry, self.configuration, self.user, gate_context(self))
  if decision.unrecorded then
    lease.unrecorded_refusal(self, entry.name, decision.unrecorded)
    return refuse(self, server, request, "ended")
  end
  if decision.reason == policy.REASONS.STORE_UNAVAILABLE then return refuse(self, server, request, "store") end
  if not decision.allowed then return refuse(self, server, request, "gate") end
  if tostring(now.requires_approval) ~= "0" then  -- only the literal "0" waives it
    deny(self, entry, policy.REASONS.APPROVAL_UNAVAILABLE)
    return refuse(self, server, request, "approval")
  end
  if self.remote_calls >= self.remote_budget then return refuse(self, server, request, "budget") end
  self.remote_calls = self.remote_calls + 1
  local started = self.clock()
  local ok, answer, reason = pcall(self.on_sampling, request)
  local duration = (self.clock() - started) * 1000
  if not ok then
    record(self, server, request, { refused = "failed" }, duration)
    error(answer, 0)  -- the connection answers the server (a fixed wording) and tells the host's log
  end
  if answer == nil then
    record(self, server, request, { refused = "host" }, duration)
    return nil, reason
  end
  record(self, server, request, type(answer) == "table" and answer or {}, duration)
  return answer
end

--- The function a run's connections take as on_sampling for `row`, or nil
--- when the host gave the run none (then nothing is declared to servers).
function sampling.for_run(holder)
  return function(row)
    return function(request)
      local self = holder.run
      if not self then return nil, TOLD.ended end
      return sampling.judge(self, row, request)
    end
  end
end

return sampling
