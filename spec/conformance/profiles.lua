--- The connections the conformance suite holds this client to: stateless with JSON answers,
--- and with a session and event-stream answers (the 2025 era), and the 2026-07-28 era (no
--- handshake, no session: server/discover, then per-request metadata), under different operator
--- settings.
--
-- A profile carries only what legitimately differs between two servers this
-- client speaks to: what the operator configured (identifier, data class,
-- approval flag) and what the server does about session state (whether
-- initialize issues a session id, and how every answer is framed on the wire).
-- Every response, failure and bound is scripted identically for all profiles
-- by the checks (spec/conformance/checks.lua); a profile never scripts one.
--
-- Adding a transport later is a new entry in this list: a framing (a function
-- that queues one JSON-RPC message on the scripted server the way that
-- transport carries it) and the operator's configuration for it. The shared
-- list of checks then decides whether it is supported.

local profiles = {}

--- How a server frames one answer. `message` is the JSON-RPC message text,
--- with "%ID%" standing for the id of the request it answers; `session_id`
--- is set only on the initialize answer of a server that issues sessions.
local framing = {}

-- One JSON body per exchange (Streamable HTTP, JSON response mode).
function framing.json(fake, message, session_id)
  fake:will_return_raw(message, 200, "application/json", session_id)
end

-- An event stream per exchange carrying the answer as one `message` event
-- (Streamable HTTP, SSE response mode, as the official SDK sends it).
function framing.event_stream(fake, message, session_id)
  fake:will_stream({ "event: message\ndata: " .. message .. "\n\n" }, { session_id = session_id })
end

--- The keys a profile may have; conformance_spec refuses any other, so a
--- profile cannot grow a script of its own.
profiles.KEYS = {
  identifier = true, description = true, session_id = true, frame = true,
  data_class = true, requires_approval = true, era = true, channel = true,
}

profiles.list = {
  {
    identifier = "stateless",
    description = "stateless HTTP, JSON answers",
    session_id = nil,                      -- initialize issues no Mcp-Session-Id
    frame = framing.json,
    data_class = "publicContent",
    requires_approval = "1",
  },
  {
    identifier = "sessioned",
    description = "session HTTP, event-stream answers",
    session_id = "sess-conformance",
    frame = framing.event_stream,
    data_class = "internalConfiguration",
    requires_approval = "0",
  },
  {
    identifier = "modern",
    description = "2026-07-28, no session, event-stream answers",
    era = "modern",                        -- server/discover answers; initialize is never sent
    session_id = nil,
    frame = framing.event_stream,
    data_class = "sourceCode",
    requires_approval = "1",
  },
  {
    identifier = "lines",
    description = "a channel that is not HTTP: one message per line, as stdio",
    channel = "lines",                     -- spec/support/fake_channel.lua over the same script
    session_id = nil,
    frame = framing.json,                  -- one message per scripted answer
    data_class = "systemDiagnostics",
    requires_approval = "0",
  },
  {
    identifier = "lines-modern",
    description = "2026-07-28 over a channel that is not HTTP: server/discover, one message per line",
    era = "modern",
    channel = "lines",
    session_id = nil,
    frame = framing.json,
    data_class = "editorContent",
    requires_approval = "1",
  },
  {
    identifier = "stdio",
    description = "stdio: the stdio channel over a scripted child, one message per line",
    channel = "stdio",                     -- lua/mcpclient/channel/stdio.lua over support/fake_process.lua
    session_id = nil,
    frame = framing.json,
    data_class = "secretAdjacent",
    requires_approval = "0",
  },
  {
    identifier = "stdio-modern",
    description = "2026-07-28 over stdio: server/discover first, the stdio channel over a scripted child",
    era = "modern",
    channel = "stdio",
    session_id = nil,
    frame = framing.json,
    data_class = "secretAdjacent",
    requires_approval = "1",
  },
}

--- The operator's record for a profile's server, the same for every profile: uid 1,
--- "Test server", https://mcp.example.com/rpc, no credential, enabled.
function profiles.server(profile)
  return {
    uid = 1,
    identifier = profile.identifier,
    name = "Test server",
    url = "https://mcp.example.com/rpc",
    data_class = profile.data_class,
    requires_approval = profile.requires_approval,
    auth_placement = "bearer",
    auth_credential = "",
    enabled = true,
  }
end

return profiles
