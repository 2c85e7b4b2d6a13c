--- The run's safe point (mcpclient.agent.run): run:tools(), where the run
-- imports again, before the gate decides the next turn's tools, the
-- catalogues a change notice made stale on servers the operator set to
-- re-import on their own (never inside a turn; see catalogue.reimport_due),
-- each an event "reimport"; then the tools the gate offers the model.
--
-- Rules: a re-import reaches a server only where this run's gate lets it (as
-- a read of it); a refusal is a governance row and leaves the re-import due
-- for a host that may. A refusal that cannot be recorded stops the run
-- closed, and nothing is offered.
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local lease = require "mcpclient.agent.run.lease"
local policy = require "mcpclient.agent.policy"
local reads = require "mcpclient.agent.run.reads"
local trail = require "mcpclient.agent.run.trail"
local turn = require "mcpclient.agent.run.turn"

local warn_to = lease.warn
local gate_context = turn.gate_context

local safe_point = {}

-- Why no remote tool is offered, when the reason is the user: remote tools
-- are for administrators only, whatever a server declares.
local function remote_withheld(self, offered)
  if type(self.user) == "table" and self.user.admin == true then return nil end
  for _, spec in ipairs(offered) do
    local t = self.registry.get(spec.name)
    if t and t.remote then return nil end
  end
  for _, name in ipairs(self.registry.names()) do
    local t = self.registry.get(name)
    if t and t.remote then
      return "No remote MCP tool is offered: remote tools are available to administrators only, and this "
        .. "run's user is not one."
    end
  end
  return nil
end

-- The run's tools again from its provider, after a re-import (a host that
-- gave its own registry keeps it as it is).
local function refresh_tools(self)
  local source = self.tool_source
  if not (source and source.provider and source.fill) then return end
  local listed, message = source.provider.tools()
  if not listed then
    warn_to(self.log, string.format("Run %s keeps its tools as they were: the provider could not list them "
      .. "again: %s", self.uuid, tostring(message)))
    return
  end
  for _, t in ipairs(source.extra or {}) do listed[#listed + 1] = t end
  source.fill(listed)
end

-- What the run's trail says of one automatic re-import.
local function reimport_text(report)
  if report.refused then
    return "The catalogue was not imported again and is still stale: "
      .. core.clip(tostring(report.skip_reasons[1]), 300)
  end
  return string.format("Imported %d tools, skipped %d, orphaned %d.", report.imported, report.skipped,
    report.orphaned)
end

-- The safe point: run:tools(), before the gate decides what the next model
-- turn is offered, never while a turn runs. Each server the operator set to
-- re-import on its own whose catalogue a change notice made stale is
-- imported again here (catalogue.reimport_due: the import's own rules, one
-- process per burst of notices) — only where this run's gate lets it reach
-- the server (as a read of it: its data class against the zone, remote for
-- administrators only, its group switch; a refusal is a governance row and
-- leaves the re-import due for a host that may). Each re-import is an event
-- of the run ("reimport", with its latency); the run's tools are then listed
-- again from its provider.
local function reimport(self)
  if self.status ~= lease.RUNNING then return end
  local done, message = catalogue.reimport_due(self.store, {
    builtin_names = self.builtin_names, log = self.log, connect = self.offer_connect,
    admit = function(row)
      if self.status ~= lease.RUNNING then return false end
      local d = self.gate:decide_offer(reads.entry(row, "catalogue"), self.configuration, self.user,
        gate_context(self))
      if d.unrecorded then
        lease.unrecorded_refusal(self, reads.entry(row, "catalogue").name, d.unrecorded)
        return false
      end
      return d.allowed == true
    end,
  })
  if not done then
    warn_to(self.log, string.format("Run %s could not look for catalogues to import again: %s", self.uuid,
      tostring(message)))
    return
  end
  local changed = false
  for _, item in ipairs(done) do
    local report = item.report
    trail.record_event(self, "reimport", { server = item.row.identifier, imported = report.imported,
      skipped = report.skipped, orphaned = report.orphaned, refused = report.refused == true,
      result = reimport_text(report), isError = report.refused == true }, item.duration_ms)
    changed = changed or not report.refused
  end
  if changed then refresh_tools(self) end
end

-- May a tool the gate allowed by the class the run listed still be offered
-- by its server's row as it is now? A server switched off or left without a
-- data class offers nothing; a class changed since is decided again. Each
-- refusal is a governance row, as the gate's own (one that cannot be
-- recorded stops the run closed). → true | false
local function current(self, t, rows)
  local now, _, err, state = turn.tool_now(self, t, rows)
  if now == t or err then return true end -- unchanged (a store failure is the call's to meet)
  local context = gate_context(self)
  local d
  if now then
    d = self.gate:decide_offer(now, self.configuration, self.user, context)
  else
    d = self.gate:deny_offer(t, self.configuration, self.user, context,
      state == "unclassified" and policy.REASONS.UNCLASSIFIED or policy.REASONS.TOOL_DISABLED)
  end
  if d.unrecorded then
    lease.unrecorded_refusal(self, t.name, d.unrecorded)
    return false
  end
  return d.allowed == true
end

--- The tools the gate offers to the model now (Run:tools), after the safe point.
function safe_point.tools(self)
  local offered = {}
  -- the safe point of the run: no turn is using the tools now
  reimport(self)
  if self.status == lease.FAILED then return offered, self.error.message end
  local names, unrecorded = self.gate:filter_offerable(nil, self.configuration, self.user, gate_context(self))
  if unrecorded then return offered, lease.unrecorded_refusal(self, nil, unrecorded).message end
  local rows = self.store:servers() -- once for every tool: each remote tool as its server's row is now
  for _, name in ipairs(names) do
    local t = self.registry.get(name)
    if t and rows and current(self, t, rows) == false then t = nil end
    if self.status == lease.FAILED then return {}, self.error.message end
    if t then
      offered[#offered + 1] = t.spec and t:spec()
        or { name = t.name, description = t.description, parameters = t.parameters }
    end
  end
  local why = remote_withheld(self, offered)
  if not why and #offered == 0 then
    -- an empty offer is never silent: the host can show the person why the model has no tool
    why = "No tool is offered: none is switched on for this run, or the gate refused each (the governance log "
      .. "says why for each refusal)."
  end
  return offered, why
end

return safe_point
