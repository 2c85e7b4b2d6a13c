--- The 2025-11-25 revision of MCP (and the 2025 revisions before it): everything of its era in one place.
--
-- An `initialize` handshake opens a session; its id and the negotiated
-- revision travel in headers with every request, and a request carries
-- nothing else of the era. Results are final as they come; listings carry no
-- freshness hint; a kept schema is held to the 2025 rule (core.normalise_schema);
-- a task is `{ task }` in a result, its outcome and its input both through
-- tasks/result; change notices arrive on the session's GET stream. The
-- contract every era file fills is era/init.lua's CONTRACT.
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"

local fail = errors.fail

-- The era object: the slots of era/init.lua's CONTRACT.
local legacy = {}
-- The revision's own helpers: the era object's `wire`.
local wire = {}
legacy.wire = wire

-- the era's name in reports, its revision, the revisions it speaks (best first)
legacy.name = "legacy"
legacy.revision = "2025-11-25"
legacy.versions = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" }

-- opened by the initialize handshake, which may open a session
legacy.discovered = false
-- a server request on a response stream is answered (ping, elicitation, sampling, roots, "method not found")
legacy.answers_server_requests = true
-- a response stream may be resumed with Last-Event-ID
legacy.resumable = true
-- abandoning a written request over HTTP: notifications/cancelled is POSTed
legacy.cancel_notice = true
-- change notices: the session's standalone GET stream
legacy.listens = "stream"

--- A request carries nothing of the era: the params as they are.
function legacy.envelope(params)
  return params
end

-- a result never asks for input: it is final as it comes
legacy.asks_input = false

-- an MCP ping on the session
legacy.ping_method = "ping"

--- A ping answer changes nothing the session knows.
function legacy.refreshed(state)
  return state
end

--- What the client declares, in the initialize request: each capability
--- only when the host gave what answers it (`answers`: { elicitation,
--- sampling (handlers), roots (the list) }); roots with listChanged, since
--- conn:set_roots announces a change. (Nothing per request in this revision.)
function legacy.capabilities(answers)
  local declared = {}
  if not answers then return declared end
  if answers.elicitation then declared.elicitation = {} end
  if answers.sampling then declared.sampling = {} end
  if answers.roots then declared.roots = { listChanged = true } end
  return declared
end

-- a change of the roots is announced (notifications/roots/list_changed)
legacy.roots_notice = true

-- A session id goes back to the server in a header on every request, so it
-- may hold only visible ASCII (0x21-0x7E), as the protocol requires; anything
-- else is refused rather than break every later request.
function wire.valid_session_id(id)
  return id == nil or not id:find("[^\33-\126]")
end

--- The state an initialize answer opens (checked by the session first).
function legacy.state(version, result, session_id)
  return {
    era = legacy,
    id = session_id,
    version = version,
    server_info = type(result.serverInfo) == "table" and result.serverInfo or {},
    capabilities = type(result.capabilities) == "table" and result.capabilities or {},
    instructions = type(result.instructions) == "string" and result.instructions or nil,
  }
end

local supported = {}
for _, v in ipairs(legacy.versions) do supported[v] = true end

-- The state an initialize answer opens: it must name a revision this
-- client speaks, and a session id it can send back.
-- @return state | nil, message, err
local function opened_by(server, reply)
  local result = reply.result
  local version = result.protocolVersion
  if type(version) ~= "string" then
    return fail("malformed", { server = server, detail = "the initialize result names no protocol version" })
  end
  if not supported[version] then
    return fail("protocol_version",
      { server = server, version = version, supported = table.concat(legacy.versions, ", ") })
  end
  if not wire.valid_session_id(reply.session_id) then
    return fail("malformed", { server = server, detail = "the session id holds characters other than visible ASCII" })
  end
  return legacy.state(version, result, reply.session_id)
end

local INITIALIZED = { method = "notifications/initialized",
  body = '{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}' }

--- The opening of this revision, the handshake: initialize, check the
--- answer, initialized (era.negotiate runs it; see its `host`).
-- @return reply (of initialize), state | nil, message, err
function legacy.open(host, op)
  local params = {
    protocolVersion = legacy.revision,
    -- a capability only for what the host gave
    capabilities = legacy.capabilities(host.answers),
    clientInfo = host.settings and host.settings.client_info or { name = "mcpclient", version = core.version },
  }
  local reply, message, err = host.send(op, nil, "initialize", params)
  if not reply then return nil, message, err end
  local state, ok
  state, message, err = opened_by(host.identifier, reply)
  if not state then return nil, message, err end
  ok, message, err = host.notify(op, state, INITIALIZED)
  if not ok then return nil, message, err end
  local level = host.settings and host.settings.log_level
  if level and wire.logs(state) then
    -- the level asked for is the host's wish, not a condition of the session: a refusal is told, not fatal
    ok, message = legacy.set_level(host, op, state, level)
    if not ok and host.warn then host.warn("logging/setLevel was refused: " .. message) end
  end
  return reply, state
end

-- Does the server declare the logging capability (setLevel is then one of its requests)?
function wire.logs(state)
  local caps = state.capabilities
  return type(caps) == "table" and type(caps.logging) == "table"
end

--- A request carries no settings of the host's in this revision (the
--- client's identity went in initialize; the log level is set once).
function legacy.with_settings(params)
  return params
end

--- Ask the server for log notices at `level` and above: logging/setLevel,
--- which only a server declaring logging has (else not_offered, nothing sent).
-- @return true | nil, message, err
function legacy.set_level(host, op, state, level)
  if not wire.logs(state) then
    return fail("not_offered", { server = host.identifier, method = "logging/setLevel", capability = "logging" })
  end
  local reply, message, err = host.send(op, state, "logging/setLevel", { level = level })
  if not reply then return nil, message, err end
  return true
end

--- Every result is final as it comes.
function legacy.complete()
  return true
end

-- the same header lines on every request of a session (made once per state)
legacy.headers_per_request = false

--- No request metadata headers beyond the session's (the channel's, every era).
function legacy.request_headers(list)
  return list
end

--- No freshness hint.
function legacy.freshness()
  return nil
end

--- The rule a kept schema is held to: the 2025 normaliser.
legacy.schema_rule = core.normalise_schema

-- A kept listing is judged by the C decoder in the same pass (the 2025 rule).
local DECODING = { tables = "text", text = "text", kept = "kept" }

--- How a page of a tool listing in `form` is read (rpc_classify's decoding).
function legacy.listing_decoding(form)
  return DECODING[form]
end

--- The page as the decoder left it.
function legacy.keep_page()
  return true
end

-- a cached listing is fresh while the server promises list_changed notices for it
legacy.cache_by = "notices"

--- No header markings in this revision.
legacy.mirrors = false

function legacy.header_params()
  return {}
end

---------------------------------------------------------------------------
-- Tasks: { task } in a result, followed by tasks/get, ended by tasks/result
---------------------------------------------------------------------------

function legacy.task_of(result)
  return result.task
end

function legacy.task_times(t)
  return t.pollInterval, t.ttl
end

--- A server must offer tasks for tools/call, or the call is not augmented.
function legacy.task_offered(capabilities)
  local caps = capabilities and capabilities.tasks
  local requests = type(caps) == "table" and caps.requests
  local tools = type(requests) == "table" and requests.tools
  return type(tools) == "table" and tools.call ~= nil
end

--- A tools/call asked as a task: `task = {}` in its params (the server keeps
--- the task for its own time to live).
function legacy.ask_task(params)
  local copy = {}
  for k, v in pairs(params) do copy[k] = v end
  copy.task = {}
  return copy
end

-- an ended task's outcome is read with tasks/result
legacy.task_outcome = "tasks/result"
-- input a task waits for is asked and answered on the tasks/result stream
legacy.task_input = "tasks/result"
-- a tasks/cancel answer describes the task
legacy.cancel_reads_task = true
-- a task is asked for only for a tool the listing allows: the tools are listed first
legacy.task_listed_first = true

return legacy
