--- Resource reads and prompt gets of a run (mcpclient.agent.run): what a
-- read is to the gate, the server it goes to, the connection it takes, and
-- its event.
--
-- Rules: a read is a remote tool of its server to the gate, named for the
-- governance log ("mcp_&lt;server&gt;:resource" | ":prompt"), carrying the
-- server's operator-set data class (nothing the server says) and its group
-- switch; it is not a write. It is sent once, through the run's own
-- connection to the server (opened on first use), with the run's cancel
-- flag as its hook; its text reaches the model inert and bounded, a prompt's
-- turns beside it. Each read is an event of the run (fail-soft: a read has
-- no side effect to fence).
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local agent_names = require "mcpclient.agent.names"
local lease = require "mcpclient.agent.run.lease"
local trail = require "mcpclient.agent.run.trail"
local error_result = require("mcpclient.agent.tool").error_result

local reads = {}

-- What a resource read or prompt get is to the gate: a remote tool of the
-- server, named for the governance log, carrying the server's operator-set
-- data class (nothing the server says). A read is not a write.
local function offer_entry(row, what)
  return { name = string.format("mcp_%s:%s", row.identifier, what), data_class = catalogue.data_class(row),
    group = agent_names.group(row.identifier), -- the server's group switch holds for its reads too
    remote = true, enabled_by_default = true, effect = "read_only" }
end

-- How a read is sent once its connection is open: (conn, opts) -> answer.
local function offer_fetch(kind, target, arguments)
  if kind == "resource" then return function(conn, opts) return conn:read_resource(target, opts) end end
  return function(conn, opts) return conn:get_prompt(target, arguments, opts) end
end

-- The enabled server named `identifier` as its row is now, or nil, message,
-- err (the store failed), or nil, nil, nil, "disabled" | "unknown". `rows`:
-- the servers' rows read once for several tools (store:servers()).
local function offer_server(self, identifier, rows)
  local message, err
  if not rows then rows, message, err = self.store:servers() end
  if not rows then return nil, message, err end
  local state = "unknown"
  for _, row in ipairs(rows) do
    if row.identifier == identifier then
      if row.enabled == true then return row end
      state = "disabled" -- (a twin of the same identifier may be the enabled one)
    end
  end
  return nil, nil, nil, state
end

-- The run's connection to `row`, opened on first use.
local function offer_connection(self, row)
  -- a run taken over from another process has no table of them yet
  self.offer_connections = self.offer_connections or {}
  local conn = self.offer_connections[row.uid]
  if conn then return conn end
  local message, err
  if self.offer_connect then
    conn, message, err = self.offer_connect(row)
  else
    conn, message, err = catalogue.connect(row, { store = self.store, on_sampling_for = self.sampling_for })
  end
  if not conn then return nil, message, err end
  self.offer_connections[row.uid] = conn
  return conn
end

-- A prompt's turns as a model may be handed them: { role, text } each, the
-- text inert (the connection's turns are; this holds whatever answered).
local function inert_turns(turns)
  if type(turns) ~= "table" then return nil end
  local out = {}
  for _, turn in ipairs(turns) do
    if type(turn) == "table" and type(turn.text) == "string" then
      out[#out + 1] = { role = turn.role, text = core.inert(turn.text), note = turn.note }
    end
  end
  return out
end

-- One read, sent once: the run's connection to the server, then the
-- request. → result (inert and bounded as a tool result; a prompt's turns
-- beside its text), duration in ms
local function fetch_offer(self, rec)
  local started = self.clock()
  local conn, message, err = offer_connection(self, rec.offer.row)
  local answer
  if conn then
    answer, message, err = rec.offer.fetch(conn, { cancel = function() return lease.cancel_requested(self) end })
  end
  local result = answer and { text = core.inert(answer.text), is_error = false, turns = inert_turns(answer.turns) }
    or error_result(message, err)
  return result, (self.clock() - started) * 1000
end

-- A read's event (fail-soft: a read has no side effect to fence). A read
-- of a server that is unknown or switched off names the server as asked.
local function record_read(self, rec)
  local offer = rec.offer
  local server = offer.row and offer.row.identifier or core.repair_utf8(core.clip(offer.server, 64))
  trail.record_event(self, offer.kind, { server = server, target = core.repair_utf8(offer.target),
    result = rec.result.text, isError = rec.result.is_error }, rec.duration_ms)
end

reads.entry, reads.fetch_with, reads.server, reads.send, reads.record = offer_entry, offer_fetch, offer_server,
  fetch_offer, record_read

return reads
