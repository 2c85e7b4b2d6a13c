--- The conformance checks, written once: the numbered list of docs/CONFORMANCE.md, adapted where
--- this client deliberately does better (sessions reused, real cancellation, exact JSON, ...).
--
-- Every check runs for every profile in spec/conformance/profiles.lua. A check
-- gets a fresh harness over the scripted server (spec/support/fake_server.lua):
-- it scripts answers with h:will_answer(result), h:will_handshake(...) and
-- h:will_refuse(code, message), which the profile frames (JSON body or event
-- stream, plus the session id on initialize), and failures with h:will_raw,
-- h:will_fail and h:will_hang, which are byte-identical for every profile.
-- Expectations may read the profile's declared facts (identifier, session id,
-- data class, approval flag) and nothing else.
--
-- Above each check, "-- fails if:" says how a broken client would turn it red, and the line after names
-- the deliberately broken copy of the client that did (docs/CONFORMANCE.md, "How the checks were proven
-- to fail"); that document also lists every numbered check and where it stands.
-- busted hands luassert to spec files only; a module required by one asks for it.
local assert = require "luassert"
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local names = require "mcpclient.agent.names"
local policy = require "mcpclient.agent.policy"
local tool = require "mcpclient.agent.tool"
local Fake = require "support.fake_server"
local FakeChannel = require "support.fake_channel"
local FakeProcess = require "support.fake_process"
local profiles = require "conformance.profiles"
local eras = require "mcpclient.era"
local modern = require("mcpclient.era.2026_07_28").wire

local json = core.json

local checks = { list = {} }

---------------------------------------------------------------------------
-- The harness: one scripted server and one operator record per check
---------------------------------------------------------------------------

local Harness = {}
Harness.__index = Harness

--- A fresh harness for `profile`. Fields: profile, fake, id (the identifier),
--- session (the session header every leg after initialize must carry, "" for
--- none), server (the operator's record), contacts (health, in memory).
function checks.harness(profile)
  return setmetatable({
    profile = profile,
    modern = profile.era == "modern",
    http = (profile.channel or "http") == "http",
    -- one subscriptions/listen stands open while the host listens (the 2026-07-28 era over stdio)
    standing = profile.era == "modern" and profile.channel == "stdio",
    fake = Fake.new { modern = profile.era == "modern" },
    id = profile.identifier,
    quoted = '"' .. profile.identifier .. '"',
    session = profile.session_id or "",
    server = profiles.server(profile),
    contacts = mcp.health.memory(),
  }, Harness)
end

-- The JSON-RPC result message answering "%ID%"; `result` is a table or the
-- result's own JSON text (when key order or exact numbers matter).
local function result_message(result)
  local text = type(result) == "string" and result or json.encode(result)
  return '{"jsonrpc":"2.0","id":%ID%,"result":' .. text .. "}"
end

--- A successful answer, framed by the profile.
function Harness:will_answer(result)
  self.profile.frame(self.fake, result_message(result))
  return self
end

--- The era's opening answer, framed by the profile: the initialize answer
--- issuing its session (if any), or in the modern era the server/discover
--- answer (naming 2026-07-28 unless `version` is no 2025 revision).
function Harness:will_handshake(version, server_info, capabilities)
  if self.modern then
    local named = version and not version:match("^2025%-") and not version:match("^2024%-") and version
    self.profile.frame(self.fake, result_message {
      supportedVersions = json.array { named or modern.VERSION },
      capabilities = capabilities or { tools = {} },
      resultType = "complete", ttlMs = 0, cacheScope = "private",
      _meta = { ["io.modelcontextprotocol/serverInfo"] = server_info or { name = "Conformance MCP", version = "1.0" } },
    })
    return self
  end
  self.profile.frame(self.fake, result_message {
    protocolVersion = version or "2025-11-25",
    capabilities = capabilities or { tools = {} },
    serverInfo = server_info or { name = "Conformance MCP", version = "1.0" },
  }, self.profile.session_id)
  return self
end

--- A JSON-RPC error object, framed by the profile.
function Harness:will_refuse(code, message)
  self.profile.frame(self.fake, '{"jsonrpc":"2.0","id":%ID%,"error":'
    .. json.encode { code = code, message = message } .. "}")
  return self
end

--- Exactly these bytes, status and media type, whatever the profile.
function Harness:will_raw(body, status, content_type)
  self.fake:will_return_raw(body, status, content_type)
  return self
end

function Harness:will_fail(kind, detail) self.fake:will_fail(kind, detail); return self end
function Harness:will_hang(step) self.fake:will_hang(step); return self end
function Harness:will_stream(events) self.fake:will_stream(events); return self end
function Harness:take(...) self.fake:take(...); return self end

--- A connection to the profile's server over the scripted leg.
function Harness:connect(extra)
  local options = {
    url = self.server.url, identifier = self.id, name = self.server.name,
    clock = self.fake.clock, health = self.contacts,
  }
  -- the profile's channel over the script: the HTTP channel over the fake leg, or a channel of
  -- another kind (its file in spec/support) over the same script
  if self.profile.channel == "lines" then
    options.channel = FakeChannel.new(self.fake, self.id)
  elseif self.profile.channel == "stdio" then
    -- the real stdio channel over a scripted child
    options.url, options.command = nil, { "scripted-server" }
    options.transport = { spawn = FakeProcess.spawner(self.fake) }
  else
    options.transport = self.fake
  end
  for k, v in pairs(extra or {}) do options[k] = v end
  -- held for the check's life: a connection a check drops (h:connect():list_tools()) would
  -- otherwise be collected mid-check, and its finalizer's DELETE join the methods it asserts
  local conn = mcp.connect(options)
  self.held = self.held or {}
  self.held[#self.held + 1] = conn
  return conn
end

--- The tool an import makes of one discovered listing entry, over `conn`.
--- The whole entry is handed over (annotations included), exactly as the
--- server sent it: what the tool declares must still come from the record.
function Harness:tool(conn, entry)
  return tool.new {
    server = self.server,
    local_name = names.local_name(self.id, entry.name),
    remote_name = entry.name,
    description = entry.description,
    parameters = entry.inputSchema and core.normalise_schema(entry.inputSchema) or nil,
    annotations = entry.annotations,
    connection = function() return conn end,
  }
end

function Harness:methods() return self.fake:methods() end

--- The methods the era opens a connection with, followed by `rest`.
function Harness:opening(rest)
  local list = self.modern and { "server/discover" } or { "initialize", "notifications/initialized" }
  for _, m in ipairs(rest or {}) do list[#list + 1] = m end
  return list
end

--- Leg durations (see Fake:take) for the opening's legs, then the rest: the
--- 2025 opening has two legs (initialize, initialized), the modern one a
--- single server/discover, which takes `first` and skips `second`.
function Harness:take_opening(first, second, ...)
  if self.modern then return self:take(first, ...) end
  return self:take(first, second, ...)
end

--- `legacy` in the 2025 era, `modern` in the 2026-07-28 era.
function Harness:per_era(legacy, modern_value)
  return self.modern and modern_value or legacy
end

--- `rest`, after the subscriptions/listen a connection that listens opens first where the
--- listen stands open (the 2026-07-28 era over stdio; over HTTP it runs beside each request
--- only on a channel carrying several at once, which the scripted leg is not).
function Harness:listened(rest)
  local list = self.standing and { "subscriptions/listen" } or {}
  for _, m in ipairs(rest or {}) do list[#list + 1] = m end
  return list
end

--- The position of the first leg after the opening.
function Harness:first_leg()
  return #self:opening() + 1
end

--- The revision a connection settles on when the server's opening answer names `version`.
function Harness:revision(version)
  return self.modern and modern.VERSION or version
end
function Harness:requests() return self.fake.requests end
function Harness:probes() return self.fake.probes end

-- Requests whose JSON-RPC method (or HTTP method, for GET/DELETE) is `method`.
function Harness:count(method)
  local n = 0
  for _, m in ipairs(self:methods()) do if m == method then n = n + 1 end end
  return n
end

---------------------------------------------------------------------------
-- Small scripting and assertion helpers
---------------------------------------------------------------------------

local function page(list, cursor)
  local tools = json.array {}
  for i, name in ipairs(list) do
    tools[i] = { name = name, inputSchema = { type = "object", properties = {} } }
  end
  return { tools = tools, nextCursor = cursor }
end

local function text_answer(text, is_error)
  return { content = json.array { { type = "text", text = text } }, isError = is_error }
end

local function contains(haystack, needle, label)
  assert(type(haystack) == "string", (label or "value") .. " is not a string")
  assert(haystack:find(needle, 1, true), string.format("%s lacks %q: %s", label or "text", needle, haystack))
end

local function lacks(haystack, needle, label)
  assert(not haystack:find(needle, 1, true), string.format("%s contains %q: %s", label or "text", needle, haystack))
end

-- A tool result is a ToolResult and nothing more: { text, is_error [, err] },
-- where err (a failed call only) is the failure value whose message is the text.
local function is_result(result, is_error)
  local keys = {}
  for k in pairs(result) do keys[#keys + 1] = k end
  table.sort(keys)
  if result.err ~= nil then
    assert.same({ "err", "is_error", "text" }, keys)
    assert.is_true(result.is_error)
    assert.equal(result.text, result.err.message)
  else
    assert.same({ "is_error", "text" }, keys)
  end
  assert.equal(is_error, result.is_error)
end

-- Every string inside `value` (recursively), for "never in a message" checks.
local function strings_in(value, out)
  out = out or {}
  if type(value) == "string" then out[#out + 1] = value
  elseif type(value) == "table" then
    for k, v in pairs(value) do strings_in(k, out); strings_in(v, out) end
  end
  return out
end

-- `era` ("legacy" or "modern") limits a check to the profiles of that era; `channel` ("http") to
-- the profiles of that channel (a check of HTTP's own mechanics: statuses, headers, legs).
local function check(name, run, era, channel)
  checks.list[#checks.list + 1] = { name = name, run = run, era = era, channel = channel }
end

---------------------------------------------------------------------------
-- Connection, session, capabilities (items 1–3: sessions reused and recovered, protocol revisions, real ids)
---------------------------------------------------------------------------

-- fails if: initialize/initialized/tools/list are skipped or reordered, or an empty catalogue is not an empty array
-- proven red by the mutant(s): no-initialized
check("01 connect: the era's opening (initialize + initialized, or server/discover), tools/list", function(h)
  h:will_handshake():will_answer(page {})
  local tools = assert(h:connect():list_tools())
  assert.same(h:opening { "tools/list" }, h:methods())
  assert.equal(0, #tools)
  assert.is_true(json.is_array(tools))
end)

-- fails if: any leg after initialize drops or invents the session header, or initialize sends one
-- proven red by the mutant(s): session-header (mutation 1)
check("02 session carried: no session on initialize, the profile's session on every later leg", function(h)
  h:will_handshake():will_answer(page {}):will_answer(text_answer("x"))
  local conn = h:connect()
  assert(conn:list_tools())
  assert(conn:call_tool("t"))
  local requests = h:requests()
  assert.equal(#h:opening {} + 2, #requests)
  assert.equal("", requests[1].session)
  for i = 2, #requests do
    assert.equal(h.session, requests[i].session, "leg " .. i .. " (" .. tostring(requests[i].method) .. ")")
  end
end)

-- fails if: sessions are not reused: a handshake per operation makes a warm call 3 legs
-- proven red by the mutant(s): no-session-reuse
check("02b session reuse: a warm call is one round trip", function(h)
  h:will_handshake():will_answer(page {}):will_answer(text_answer("one")):will_answer(text_answer("two"))
  local conn = h:connect()
  assert(conn:list_tools())
  local before = #h:requests()
  assert.equal("one", assert(conn:call_tool("t")).text)
  assert.equal(before + 1, #h:requests())
  assert.equal("two", assert(conn:call_tool("t")).text)
  assert.same(h:opening { "tools/list", "tools/call", "tools/call" }, h:methods())
end)

-- fails if: the version header is missing, sent on initialize, or names the offered revision, not the chosen one
-- proven red by the mutant(s): offered-version-header
check("02c MCP-Protocol-Version: the negotiated revision on every leg after the handshake", function(h)
  h:will_handshake("2025-06-18"):will_answer(page {}):will_answer(text_answer("x"))
  local conn = h:connect()
  assert(conn:list_tools())
  assert(conn:call_tool("t"))
  local requests = h:requests()
  assert.is_nil(requests[1].protocol)
  assert.equal("2025-11-25", requests[1].body.params.protocolVersion)
  for i = 2, #requests do
    assert.equal("2025-06-18", requests[i].protocol, "leg " .. i)
  end
end, "legacy", "http")

-- fails if: a modern leg lacks the revision header, Mcp-Method, Mcp-Name on a call, or the _meta envelope
-- proven red by: the connection before the 2026-07-28 era (it sends initialize and no envelope)
check("02c-m 2026-07-28 request metadata: revision, Mcp-Method, Mcp-Name and the envelope on every leg", function(h)
  h:will_handshake():will_answer(page {}):will_answer(text_answer("x"))
  local conn = h:connect()
  assert(conn:list_tools())
  assert(conn:call_tool("t"))
  for i, r in ipairs(h:requests()) do
    assert.equal(modern.VERSION, r.body.params._meta["io.modelcontextprotocol/protocolVersion"], "leg " .. i)
    if h.http then  -- the headers are the HTTP binding's
      assert.equal(modern.VERSION, r.protocol, "leg " .. i)
      assert.equal(r.method, Fake.header(r, "Mcp-Method"), "leg " .. i)
    end
  end
  if h.http then assert.equal("t", Fake.header(h:requests()[3], "Mcp-Name")) end
end, "modern")

-- fails if: a 404 on a carried session is not followed by one re-initialization, or a sessionless 404 is retried
-- proven red by the mutant(s): no-reinit
check("02d re-initialization after a lost session (404)", function(h)
  local gone = '{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}'
  h:will_handshake():will_answer(page {}):will_raw(gone, 404):will_handshake():will_answer(text_answer("after"))
  local conn = h:connect()
  assert(conn:list_tools())
  local out, message, err = conn:call_tool("t")
  if h.profile.session_id then
    assert(out, message)
    assert.equal("after", out.text)
    assert.same({ "initialize", "notifications/initialized", "tools/list", "tools/call",
      "initialize", "notifications/initialized", "tools/call" }, h:methods())
    local requests = h:requests()
    assert.equal(h.session, requests[4].session)
    assert.equal("", requests[5].session)        -- the lost session is forgotten, not offered again
    assert.equal(h.session, requests[7].session)
    assert.equal(2, #h.contacts)
  else
    assert.is_nil(out)
    assert.equal("http_status", err.kind)
    contains(message, h.quoted, "message")
    contains(message, "404", "message")
    assert.same(h:opening { "tools/list", "tools/call" }, h:methods())
    assert.equal(1, #h.contacts)
  end
end, nil, "http")

-- fails if: close() leaves the server's session open (no DELETE carrying it) or DELETEs a session never issued
-- proven red by the mutant(s): no-delete
check("02e close ends the session the server issued, and only that", function(h)
  h:will_handshake():will_answer(page {})
  local conn = h:connect()
  assert(conn:list_tools())
  conn:close()
  local last = h:requests()[#h:requests()]
  if h.profile.session_id then
    assert.equal(4, #h:requests())
    assert.equal("DELETE", last.http_method)
    assert.equal(h.session, last.session)
  else
    assert.equal(#h:opening { "tools/list" }, #h:requests())
    assert.equal("tools/list", last.method)
  end
  assert.is_true(h.fake.closed)
end)

-- fails if: request ids repeat on a connection, or an answer carrying another request's id is taken
-- (over a long-lived pipe, stdio, such an answer is no answer to this request: it is passed over and
-- counted, and this one fails as its child ends without answering)
-- proven red by the mutant(s): constant-ids
check("02f matched ids: unique per connection, a response for another id is refused", function(h)
  h:will_handshake():will_answer(page {}):will_answer(text_answer("x"))
    :will_raw('{"jsonrpc":"2.0","id":999,"result":{"content":[{"type":"text","text":"not yours"}]}}')
  local conn = h:connect()
  assert(conn:list_tools())
  assert(conn:call_tool("t"))
  local out, message, err = conn:call_tool("t")
  assert.is_nil(out)
  if h.profile.channel == "stdio" then
    assert.equal("interrupted", err.kind)
    assert.equal(1, conn.session.channel.dropped)
  else
    assert.equal("malformed", err.kind)
  end
  contains(message, h.quoted, "message")
  lacks(message, "not yours", "message")
  local seen = {}
  for _, r in ipairs(h:requests()) do
    if r.id ~= nil then
      assert.is_nil(seen[r.id], "id " .. tostring(r.id) .. " used twice")
      seen[r.id] = true
    end
  end
  assert.equal(2, #h.contacts)
end)

-- fails if: the client declares a capability, or ping does not report what the server said about itself
-- proven red by the mutant(s): declares-capability
check("03 capabilities both ways: none declared, the server's read and reported", function(h)
  h:will_handshake("2025-03-26", { name = "Conformance MCP", version = "9.9" }, { tools = { listChanged = true } })
  local conn = h:connect()
  local report = assert(conn:ping())
  local declared = h.modern and '"io.modelcontextprotocol/clientCapabilities":{}' or '"capabilities":{}'
  assert.truthy(h:requests()[1].raw:find(declared, 1, true))
  assert.is_true(report.reachable)
  assert.equal(h:revision("2025-03-26"), report.protocol_version)
  assert.equal("Conformance MCP", report.server_name)
  assert.equal("9.9", report.server_version)
  assert.is_true(conn:server().capabilities.tools.listChanged)
  assert.same(h:opening(), h:methods())
  assert.equal(1, #h.contacts)
end)

-- fails if: roots or sampling are declared without the host giving them, not declared when given (the
-- opening's capabilities; in the 2026-07-28 era the envelope of every request), or the roots answer more
-- than the roots given
-- proven red by the mutant(s): declares-roots-always, sampling-undeclared
check("03c roots and sampling declared exactly when given", function(h)
  h:will_handshake():will_answer(text_answer("a")):will_handshake():will_answer(text_answer("b"))
  local plain = h:connect()
  assert(plain:call_tool("t", {}))
  local given = h:connect { roots = { { uri = "file:///srv/notes", name = "notes" } },
    on_sampling = function() return nil, "no" end }
  assert(given:call_tool("t", {}))
  -- what each opening (and, 2026-07-28, each request) declared
  local declared = {}
  for _, r in ipairs(h:requests()) do
    local params = r.body and r.body.params
    if params and (r.body.method == "initialize" or h.modern and r.body.method) then
      declared[#declared + 1] = h.modern and params._meta["io.modelcontextprotocol/clientCapabilities"]
        or params.capabilities
    end
  end
  local none = h.modern and '"io.modelcontextprotocol/clientCapabilities":{}' or '"capabilities":{}'
  assert.truthy(h:requests()[1].raw:find(none, 1, true), h:requests()[1].raw)
  local want = h.modern and { roots = {}, sampling = {} } or { roots = { listChanged = true }, sampling = {} }
  local half = #declared // 2
  for i, caps in ipairs(declared) do
    if i <= half then
      assert.is_nil(caps.roots)
      assert.is_nil(caps.sampling)
    else
      assert.same(want, caps)
    end
  end
  assert.is_true(half >= 1)
end)

-- fails if: the log level or the client's identity the host set does not reach the server as its era
-- carries them (2025: initialize's clientInfo, logging/setLevel after initialized, only for a server
-- declaring logging; 2026-07-28: the envelope of every request), or a level is sent without being set
-- proven red by the mutant(s): settings-dropped, level-always
check("03d log level and client identity as the era carries them", function(h)
  local LOGGING = { tools = {}, logging = {} }
  h:will_handshake(nil, nil, LOGGING)
  if not h.modern then h:will_answer({}) end  -- logging/setLevel
  -- the second server declares logging too: a connection that set no level asks for none
  h:will_answer(text_answer("a")):will_handshake(nil, nil, LOGGING):will_answer(text_answer("b"))
  local got = {}
  local set = h:connect { log_level = "warning", client_info = { name = "agent", version = "1.2" },
    on_log = function(level) got[#got + 1] = level end }
  assert(set:call_tool("t", {}))
  local plain = h:connect()
  assert(plain:call_tool("t", {}))
  local LEVEL, INFO = "io.modelcontextprotocol/logLevel", "io.modelcontextprotocol/clientInfo"
  local requests, seen = h:requests(), {}
  for _, r in ipairs(requests) do
    if r.body and r.body.method then seen[#seen + 1] = r.body end
  end
  if h.modern then
    -- server/discover and tools/call of each connection: the first two name the level and the client
    for i, body in ipairs(seen) do
      if i <= 2 then
        assert.equal("warning", body.params._meta[LEVEL], body.method)
        assert.same({ name = "agent", version = "1.2" }, body.params._meta[INFO])
      else
        assert.is_nil(body.params._meta[LEVEL], body.method)
        assert.equal("mcpclient", body.params._meta[INFO].name)
      end
    end
    assert.equal(4, #seen)
  else
    assert.same({ "initialize", "notifications/initialized", "logging/setLevel", "tools/call", "initialize",
      "notifications/initialized", "tools/call" }, (function()
        local list = {}
        for i, body in ipairs(seen) do list[i] = body.method end
        return list
      end)())
    assert.same({ name = "agent", version = "1.2" }, seen[1].params.clientInfo)
    assert.same({ level = "warning" }, seen[3].params)
    assert.equal("mcpclient", seen[5].params.clientInfo.name)
  end
end)

-- fails if: a revision outside the four spoken is accepted, or the refusal does not name it and the server
-- proven red by the mutant(s): any-revision
check("03b protocol revision: an unknown choice fails the handshake, naming it", function(h)
  h:will_handshake("2099-01-01"):will_answer(page {})
  local out, message, err = h:connect():list_tools()
  assert.is_nil(out)
  assert.equal("protocol_version", err.kind)
  contains(message, '"2099-01-01"', "message")
  contains(message, h.quoted, "message")
  assert.same({ "initialize" }, h:methods())
  assert.equal(0, #h.contacts)
end, "legacy")

-- fails if: a discovery naming no revision in common is accepted, retried, or taken for a 2025 server
-- proven red by: the connection before the 2026-07-28 era (it sends initialize)
check("03b-m protocol revision: discovery naming no revision in common fails, naming both sides", function(h)
  h:will_handshake("2099-01-01"):will_answer(page {})
  local out, message, err = h:connect():list_tools()
  assert.is_nil(out)
  assert.equal("protocol_version", err.kind)
  contains(message, "2099-01-01", "message")
  contains(message, '"' .. modern.VERSION .. '"', "message")
  contains(message, h.quoted, "message")
  assert.same({ "server/discover" }, h:methods())
  assert.equal(0, #h.contacts)
end, "modern")

---------------------------------------------------------------------------
-- Discovery and schemas (items 4–15)
---------------------------------------------------------------------------

-- fails if: the walk stops after one page, sends a cursor on page 1, or does not resume from nextCursor
-- proven red by the mutant(s): one-page
check("04 paged discovery: resumed from the cursor", function(h)
  h:will_handshake():will_answer(page({ "alpha" }, "p2")):will_answer(page { "beta" })
  local tools = assert(h:connect():list_tools())
  assert.same({ "alpha", "beta" }, { tools[1].name, tools[2].name })
  assert.equal(2, #tools)
  assert.is_nil(h:requests()[h:first_leg()].body.params.cursor)
  assert.equal("p2", h:requests()[h:first_leg() + 1].body.params.cursor)
end)

-- fails if: a cursor that never resolves is followed past 50 pages, or half a walk is stamped as a contact
-- proven red by the mutant(s): no-page-ceiling
check("05 page ceiling: a cursor that never resolves ends at 50 pages", function(h)
  h:will_handshake()
  for _ = 1, 60 do h:will_answer(page({ "x" }, "forever")) end
  local out, message, err = h:connect():list_tools()
  assert.is_nil(out)
  assert.equal("malformed", err.kind)
  contains(message, "did not end within 50 pages", "message")
  contains(message, h.quoted, "message")
  assert.equal(50, h:count("tools/list"))
  assert.equal(0, #h.contacts)
end)

-- A listing whose only tool carries `schema_text` (JSON) as its inputSchema.
local function listing_with_schema(schema_text)
  return '{"tools":[{"name":"probe","inputSchema":' .. schema_text .. "}]}"
end

-- The import's reading of the listed schema (schemas = "kept", judged as the page is read) must be
-- what the era's rule makes of the value list_tools gave: its text, or the same refusal.
local function kept_alike(conn, value)
  local kept, listing = assert(conn:list_tools { schemas = "kept" })
  local schema, why = eras.schema_for(listing.era)(value)
  if schema then
    assert.equal(json.encode(schema), kept[1].inputSchema)
  else
    assert.same({ refused = why }, kept[1].inputSchema)
  end
end

-- fails if: annotations survive, the retained keys lose their order, or properties/required are rewritten
-- proven red by the mutant(s): schema-keeps-annotations, listing-unordered
check("06 schema normalisation on a schema that came off the connection", function(h)
  local listing = listing_with_schema('{"required":["uid"],"title":"Read page",'
    .. '"$id":"https://example.com/read-page","examples":[{"uid":3}],"x-vendor-hint":"fast",'
    .. '"additionalProperties":false,"properties":{"uid":{"type":"integer","description":"Page id"},'
    .. '"alias":{"type":"string"}},"description":"Reads one page","type":"object"}')
  h:will_handshake():will_answer(listing):will_answer(listing)
  local conn = h:connect()
  local tools = assert(conn:list_tools())
  local schema, why = core.normalise_schema(tools[1].inputSchema)
  assert(schema, why)
  kept_alike(conn, tools[1].inputSchema)
  assert.same({ "type", "description", "properties", "required", "additionalProperties" }, json.key_order(schema))
  assert.equal('{"uid":{"type":"integer","description":"Page id"},"alias":{"type":"string"}}',
    json.encode(schema.properties))
  assert.equal('["uid"]', json.encode(schema.required))
  for _, k in ipairs { "title", "$id", "examples", "x-vendor-hint" } do assert.is_nil(schema[k]) end
end)

local function keyword(kw)
  return 'it uses "' .. kw .. '", which this import does not carry: dropping the keyword would widen what '
    .. "the tool accepts, letting a model produce arguments the server then rejects"
end

local function nested_objects_json(n)
  local s = '{"type":"string"}'
  for _ = 1, n do s = '{"type":"object","properties":{"child":' .. s .. "}}" end
  return s
end

local invalid_schemas = {
  { "07", "a nested $ref to a definition it does not hold", '{"type":"object","properties":{"page":{"$ref":'
    .. '"#/$defs/page"}}}',
    'its "$ref" at #/properties/page points to #/$defs/page, which the schema does not define' },
  { "08", "a nested dependentRequired", '{"type":"object","properties":{"card":{"type":"object",'
    .. '"dependentRequired":{"number":["expiry"]}}}}', keyword("dependentRequired") },
  { "09", "a top-level if/then", '{"type":"object","if":{"required":["a"]},"then":{"required":["b"]}}',
    keyword("if") },
  { "10", 'type ["object","null"]', '{"type":["object","null"],"properties":{}}',
    'its top-level type is not "object"' },
  { "11", 'type "string"', '{"type":"string"}', 'its top-level type is not "object"' },
  { "12", "a value that is not a schema", '"not a schema"', "the server advertised no parameter schema" },
  { "13", "14 nested object levels", nested_objects_json(14), "it nests deeper than 12 levels" },
  { "14", "a 16385-byte description", '{"type":"object","description":"' .. string.rep("d", 16385) .. '"}',
    "it exceeds 16384 bytes once stored" },
}

for _, case in ipairs(invalid_schemas) do
  local number, label, text, reason = case[1], case[2], case[3], case[4]
  -- fails if: the normaliser repairs the schema (drops the keyword, clamps depth, clips text) instead of refusing it
  -- proven red by the mutant(s): schema-repaired
  check(number .. " invalid schema refused whole: " .. label, function(h)
    h:will_handshake():will_answer(listing_with_schema(text)):will_answer(listing_with_schema(text))
    local conn = h:connect()
    local tools = assert(conn:list_tools())
    assert.equal(1, #tools)
    local schema, why = core.normalise_schema(tools[1].inputSchema)
    assert.is_nil(schema)
    assert.equal(reason, why)
    kept_alike(conn, tools[1].inputSchema)
  end)
end

-- fails if: a stored non-object decodes to a schema, {} does not come back an object, or storage alters a schema
-- proven red by the mutant(s): stored-list-is-schema
check("15 stored schema decode: only a JSON object is a schema", function(h)
  h:will_handshake():will_answer(listing_with_schema(
    '{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"object","properties":{}}},"required":[]}'))
  local tools = assert(h:connect():list_tools())
  local stored = json.encode(assert(core.normalise_schema(tools[1].inputSchema)))
  assert.equal('{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"object","properties":{}}},'
    .. '"required":[]}', stored)
  assert.equal(stored, json.encode(assert(core.decode_stored_schema(stored))))
  assert.is_nil(core.decode_stored_schema("[]"))
  assert.is_nil(core.decode_stored_schema("null"))
  assert.is_nil(core.decode_stored_schema("{ broken"))
  local empty = core.decode_stored_schema("{}")
  assert.same({}, empty)
  assert.is_false(json.is_array(empty))
end)

---------------------------------------------------------------------------
-- Execution (items 16–19)
---------------------------------------------------------------------------

local READ_PAGE = { name = "read_page", description = "Reads a page.",
  inputSchema = { type = "object", properties = { uid = { type = "integer" } } } }

-- fails if: the local name goes on the wire, the arguments change, or the model is offered the remote name
-- proven red by the mutant(s): local-name-on-wire
check("16 execute under the remote name; the local name is what the gate and the model see", function(h)
  h:will_handshake():will_answer(text_answer("page 3 reads: hello"))
  local t = h:tool(h:connect(), READ_PAGE)
  local result = t:execute({ uid = 3 })
  assert.same({ text = "page 3 reads: hello", is_error = false }, result)
  local call = h:requests()[h:first_leg()]
  assert.equal("tools/call", call.method)
  assert.equal("read_page", call.body.params.name)
  assert.truthy(call.raw:find('"arguments":{"uid":3}', 1, true))
  assert.equal("mcp_" .. h.id .. "_read_page", t:spec().name)
  assert.equal(t.name, t:spec().name)
end)

-- fails if: an event-stream answer is not unframed, or the comment/notification before the answer is taken for it
-- proven red by the mutant(s): sse-first-event-only, sse-as-json
check("17 SSE-framed answer", function(h)
  h:will_handshake():will_raw(": keep-alive\n\n"
    .. 'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n'
    .. 'event: message\ndata: {"jsonrpc":"2.0","id":%ID%,"result":{"content":[{"type":"text","text":"framed: hello"}]}}'
    .. "\n\n", 200, "text/event-stream")
  local result = h:tool(h:connect(), READ_PAGE):execute({ uid = 3 })
  assert.same({ text = "framed: hello", is_error = false }, result)
end)

-- fails if: the protocol's isError is folded into a success, or the answered call is not a contact
-- proven red by the mutant(s): isError-dropped
check("18 tool-level isError is an error result, and the server was reached", function(h)
  h:will_handshake():will_answer(text_answer("page 3 does not exist", true))
  local result = h:tool(h:connect(), READ_PAGE):execute({ uid = 3 })
  is_result(result, true)
  contains(result.text, "page 3 does not exist", "result")
  assert.equal(1, #h.contacts)
  assert.equal(h.id, h.contacts[1].identifier)
end)

-- fails if: dropped blocks go unmentioned, the note trails (the 50 000-byte cut removes it) or names wrong types,
-- or the text is not bounded
-- proven red by the mutant(s): note-trails, note-dropped
check("19 dropped blocks named, note first, survives the cut", function(h)
  local big = string.rep("a", 78000)
  h:will_handshake():will_answer { content = json.array {
    { type = "text", text = big }, { type = "image", data = "AAAA", mimeType = "image/png" },
    { type = "resource", resource = { uri = "file:///x", text = "inner" } },
    { type = "image", data = "BBBB", mimeType = "image/png" } } }
  local result = h:tool(h:connect(), READ_PAGE):execute({ uid = 3 })
  is_result(result, false)
  assert.equal(1, result.text:find("[mcpclient reads text only", 1, true))
  contains(result.text, "dropped 3 non-text content blocks", "result")
  contains(result.text, "image, resource", "result")
  lacks(result.text, "inner", "result")
  -- the result is bounded as it is made, the note kept before the answer the cut shortens
  local marker = "\n\u{2026}[tool result truncated at 50000 bytes]"
  assert.equal(marker, result.text:sub(-#marker))
  assert.is_true(#result.text <= 50000)
  assert.truthy(result.text:find("\n" .. string.rep("a", 40000), 1, true))
end)

---------------------------------------------------------------------------
-- Time (items 20–24: one budget per operation, millisecond leg timeouts)
---------------------------------------------------------------------------

-- fails if: a leg lacks a finite integer timeout, connect outlives what is left, or a silent server raises
-- proven red by the mutant(s): float-timeout, connect-timeout-unbounded
check("20 finite timeout on every leg; a silent server is an error result", function(h)
  h:will_handshake():will_hang(0.5):take(12, 0)
  -- held in a local to the end: a collected connection would end its session (DELETE) mid-check
  local conn = h:connect()
  local result = h:tool(conn, READ_PAGE):execute({ uid = 3 })
  is_result(result, true)
  contains(result.text, h.quoted, "result")
  contains(result.text, "20-second operation budget", "result")
  for i, r in ipairs(h:requests()) do
    assert.equal("integer", math.type(r.timeout_ms), "leg " .. i)
    assert.is_true(r.timeout_ms > 0 and r.timeout_ms <= 20000, "leg " .. i)
    assert.equal("integer", math.type(r.connect_timeout_ms), "leg " .. i)
    assert.is_true(r.connect_timeout_ms > 0 and r.connect_timeout_ms <= r.timeout_ms, "leg " .. i)
  end
  -- the call whose budget ran out is abandoned on the wire at once: in the 2025 era a
  -- notifications/cancelled for its id, bounded to 250 ms (the modern era closes the stream)
  assert.same(h:per_era({ 20000, 8000, 8000, 250 }, { 20000, 8000 }), h.fake:granted_timeouts())
  if not h.modern then
    local requests = h:requests()
    local notice = requests[#requests]
    assert.equal("notifications/cancelled", notice.method)
    assert.equal(requests[#requests - 1].id, notice.body.params.requestId)
  end
  assert.equal(0, #h.contacts)
end, nil, "http")

-- fails if: each leg gets a fresh budget instead of what the operation has left
-- proven red by the mutant(s): fresh-budget-per-leg
check("21 one budget across legs: 5, 1, 2 s -> 20000, 15000, 14000 ms", function(h)
  h:will_handshake():will_answer(text_answer("x")):take_opening(5, 1, 2)
  assert(h:connect():call_tool("t"))
  assert.same(h:per_era({ 20000, 15000, 14000 }, { 20000, 15000 }), h.fake:granted_timeouts())
end, nil, "http")

-- fails if: a leg is sent on a spent budget, or the outcome is a timeout/cancellation or blames the server
-- proven red by the mutant(s): no-deadline-check
check("22 an exhausted budget is its own outcome: 11, 10 s", function(h)
  h:will_handshake():will_answer(text_answer("x"))
  h:take(table.unpack(h:per_era({ 11, 10 }, { 21 })))
  local conn = h:connect()
  local out, message, err = conn:call_tool("t")
  assert.is_nil(out)
  assert.equal("deadline", err.kind)
  contains(message, "operation budget", "message")
  contains(message, h.quoted, "message")
  contains(message, "not a server that did not answer", "message")
  lacks(message:lower(), "cancel", "message")
  assert.same(h:opening(), h:methods())
  assert.same(h:per_era({ 20000, 9000 }, { 20000 }), h.fake:granted_timeouts())
  assert.equal(0, #h.contacts)
end, nil, "http")

-- fails if: a remainder under a second is rounded to 0 or to whole seconds (whole seconds would give 20000, 2000, 1000)
-- proven red by the mutant(s): whole-second-floor
check("23 never a zero timeout: 18.5, 1.2 s -> 20000, 1500, 300 ms", function(h)
  h:will_handshake():will_answer(text_answer("x"))
  h:take(table.unpack(h:per_era({ 18.5, 1.2 }, { 19.7 })))
  assert(h:connect():call_tool("t"))
  local granted = h.fake:granted_timeouts()
  assert.same(h:per_era({ 20000, 1500, 300 }, { 20000, 300 }), granted)
  for _, t in ipairs(granted) do assert.is_true(t > 0) end
end, nil, "http")

-- fails if: a transport failure escapes as a raise, is stamped as a contact, or does not name the server
-- proven red by the mutant(s): failure-raises, contact-on-failure
check("24 dead connection: a transport failure names the server", function(h)
  h:will_handshake():will_fail("transport", "cURL error 28: Operation timed out")
  local result = h:tool(h:connect(), READ_PAGE):execute({ uid = 3 })
  is_result(result, true)
  contains(result.text, h.quoted, "result")
  -- a child that died before reading the request says nothing of why; a leg names its error
  contains(result.text, h.profile.channel == "stdio" and "could not be reached: the server process"
    or "could not be reached: cURL error 28", "result")
  assert.equal(1, h:count("tools/call"))
  assert.equal(0, #h.contacts)
end)

---------------------------------------------------------------------------
-- Cancellation (item 25: a cancel hook stops a call in flight, tells the server, retries nothing)
---------------------------------------------------------------------------

-- A hook that reports up after `at` polls, remembering the fake time it rose.
local function flag_after(h, at)
  local hook = { polls = 0 }
  hook.fn = function()
    hook.polls = hook.polls + 1
    if hook.polls == at then hook.raised_at = h.fake.now end
    return hook.polls >= at
  end
  return hook
end

-- fails if: the hook never reaches the leg (the call waits out 20 s), or anything polls after the flag
-- proven red by the mutant(s): cancel-not-passed, retry-after-cancel
check("25a cancellation: flag to return, inside the transfer", function(h)
  h:will_handshake():will_hang(0.01)
  local hook = flag_after(h, 10)
  local result = h:tool(h:connect(), READ_PAGE):execute({ uid = 3 }, { cancel = hook.fn })
  is_result(result, true)
  contains(result.text, "cancelled in flight", "result")
  contains(result.text, "may already have acted", "result")
  contains(result.text, h.quoted, "result")
  assert.equal(10, hook.polls)
  assert.is_true(h.fake.now - hook.raised_at <= 0.05)
end)

-- fails if: the server is not told, is told about another request, or the notice misses the session
-- proven red by the mutant(s): no-cancel-notice
check("25b cancellation: notifications/cancelled on the wire for that request id", function(h)
  h:will_handshake():will_hang(0.01)
  local hook = flag_after(h, 6)
  local out, _, err = h:connect():call_tool("slow", { n = 1 }, { cancel = hook.fn })
  assert.is_nil(out)
  assert.equal("cancelled", err.kind)
  local requests = h:requests()
  local call, notice = requests[3], requests[4]
  assert.equal(4, #requests)
  assert.equal("tools/call", call.method)
  assert.equal("notifications/cancelled", notice.method)
  assert.is_nil(notice.id)
  assert.equal(call.id, notice.body.params.requestId)
  assert.equal("string", type(notice.body.params.reason))
  if h.http then
    assert.equal(h.session, notice.session)
    assert.equal("2025-11-25", notice.protocol)
  end
end, "legacy")

-- fails if: a modern cancellation sends a notice (closing the stream is the signal) or is not reported in flight
-- proven red by: the connection before the 2026-07-28 era (it posts notifications/cancelled)
check("25b-m cancellation: closing the stream is the signal, no notice is sent", function(h)
  h:will_handshake():will_hang(0.01)
  local hook = flag_after(h, 6)
  local out, _, err = h:connect():call_tool("slow", { n = 1 }, { cancel = hook.fn })
  assert.is_nil(out)
  assert.equal("cancelled", err.kind)
  assert.is_true(err.in_flight)
  assert.same({ "server/discover", "tools/call" }, h:methods())
end, "modern", "http")

-- fails if: a cancelled initialize is announced (the protocol forbids it), or a raised flag still sends
-- proven red by the mutant(s): cancel-for-initialize
check("25c cancellation: never announced for initialize; a raised flag sends nothing", function(h)
  h:will_hang(0.01)
  local hook = flag_after(h, 3)
  local out, message, err = h:connect():call_tool("t", nil, { cancel = hook.fn })
  assert.is_nil(out)
  assert.equal("cancelled", err.kind)
  contains(message, h.quoted, "message")
  assert.same({ h:opening()[1] }, h:methods())

  local fresh = checks.harness(h.profile)
  fresh:will_handshake():will_answer(text_answer("x"))
  local result = fresh:tool(fresh:connect(), READ_PAGE):execute({}, { cancel = function() return true end })
  is_result(result, true)
  assert.same({}, fresh:requests())
end)

-- fails if: a cancelled write is sent again, the cancel is stamped as a contact, or the connection stops serving
-- proven red by the mutant(s): retry-after-cancel, no-cancel-notice
check("25d cancellation: nothing retried, no contact, the connection still serves", function(h)
  h:will_handshake():will_hang(0.01):will_answer(text_answer("next"))
  local conn = h:connect()
  local hook = flag_after(h, 5)
  assert.is_nil((conn:call_tool("write", { n = 1 }, { cancel = hook.fn })))
  -- a notice, except in the 2026-07-28 era over HTTP, where the closed stream is the signal
  local notice = (h.modern and h.http) and {} or { "notifications/cancelled" }
  assert.same(h:opening { "tools/call", table.unpack(notice) }, h:methods())
  assert.equal(0, #h.contacts)
  assert.equal("next", assert(conn:call_tool("write", { n = 2 })).text)
  assert.equal(2, h:count("tools/call"))
  assert.equal(1, h:count(h:opening()[1]))
  assert.equal(1, #h.contacts)
end)

---------------------------------------------------------------------------
-- Server failures (items 26–35)
---------------------------------------------------------------------------

local failure_shapes = {
  { "26", "(a) 500 with a JSON body", function(h) h:will_raw("{}", 500) end, "HTTP status 500" },
  { "27", "(b) 302 with a JSON body", function(h) h:will_raw("{}", 302) end, "HTTP status 302" },
  { "28", "(c) 401 with a JSON body", function(h) h:will_raw("{}", 401) end, "HTTP status 401" },
  { "29", "(d) a JSON-RPC error object", function(h) h:will_refuse(-32601, "Method not found") end,
    "JSON-RPC error -32601: Method not found" },
  { "30", "(e) a maintenance page", function(h) h:will_raw("<html>maintenance</html>", 200, "text/html") end,
    '"text/html"' },
  { "31", "(f) an event stream with no message", function(h) h:will_raw(": ping\n\n", 200, "text/event-stream") end,
    "carried no message" },
  { "32", "(g) an event stream carrying only a notification", function(h)
      h:will_raw('event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\n\n',
        200, "text/event-stream")
    end, "carried no response" },
  { "33", "(h) neither result nor error", function(h) h:will_raw('{"jsonrpc":"2.0","id":%ID%}') end,
    "neither a result nor an error" },
  { "34", "(i) an empty body", function(h) h:will_raw("") end, "empty body with status 200" },
}

-- The shapes that exist only over HTTP (a status, a media type, a body beside the message); the
-- JSON-RPC ones (29, 33) hold for every channel.
local HTTP_SHAPES = { ["26"] = true, ["27"] = true, ["28"] = true, ["30"] = true, ["31"] = true, ["32"] = true,
  ["34"] = true }

for _, shape in ipairs(failure_shapes) do
  local number, label, script, fragment = shape[1], shape[2], shape[3], shape[4]
  -- fails if: the shape reads as success, raises, is misclassified, retried, unnamed, or stamped as a contact
  -- proven red by the mutant(s): status-ignored (26-28), rpc-error-as-text (29), content-type-ignored (30), sse-as-json
  --   (31-32), neither-as-empty-result (33), empty-body-unchecked (34), failure-raises and contact-on-failure (all)
  check(number .. " server failure " .. label .. " -> error result naming the server, no contact", function(h)
    h:will_handshake()
    script(h)
    local result = h:tool(h:connect(), READ_PAGE):execute({ uid = 3 })
    is_result(result, true)
    contains(result.text, h.quoted, "result")
    contains(result.text, fragment, "result")
    assert.equal(1, h:count("tools/call"))
    assert.equal(0, #h.contacts)
  end, nil, HTTP_SHAPES[number] and "http" or nil)
end

-- fails if: the 2 MiB read cap is not applied, or the far side's bytes become the message we repeat
-- proven red by the mutant(s): no-read-cap
check("35 oversized response: a 3 MiB answer is refused with a short message", function(h)
  h:will_handshake():will_answer('{"content":[{"type":"text","text":"' .. string.rep("x", 3 * 1024 * 1024) .. '"}]}')
  local result = h:tool(h:connect(), READ_PAGE):execute({ uid = 3 })
  is_result(result, true)
  contains(result.text, h.quoted, "result")
  assert.is_true(#result.text < 1000, "message of " .. #result.text .. " bytes")
  lacks(result.text, string.rep("x", 64), "result")
  assert.equal(0, #h.contacts)
end, nil, "http")

---------------------------------------------------------------------------
-- What the tool declares to the gate and the audit (items 36–38)
---------------------------------------------------------------------------

-- A catalogue of two tools whose annotations claim opposite things about
-- themselves, so every profile has a claim that differs from its own record.
local CLAIMING = json.array {
  { name = "read", description = "Reads.", inputSchema = { type = "object", properties = {} },
    annotations = { readOnlyHint = true, destructiveHint = false, idempotentHint = true,
      dataClass = "publicContent", requiresApproval = false, effect = "read_only" } },
  { name = "peek", description = "Peeks.", inputSchema = { type = "object", properties = {} },
    annotations = { readOnlyHint = true, dataClass = "internalConfiguration", requiresApproval = true,
      effect = "read_only" } },
}

-- The tools an import makes of CLAIMING, discovered over the connection.
local function claiming_tools(h)
  h:will_handshake():will_answer { tools = CLAIMING }
  local conn = h:connect()
  local list = {}
  for i, entry in ipairs(assert(conn:list_tools())) do list[i] = h:tool(conn, entry) end
  return list
end

local function registry_of(list)
  local by_name, order = {}, {}
  for _, t in ipairs(list) do by_name[t.name] = t; order[#order + 1] = t.name end
  return { get = function(name) return by_name[name] end, names = function() return order end }
end

-- fails if: a remote tool declares any effect but non_idempotent_write (a readOnlyHint believed skips the fence)
-- proven red by the mutant(s): effect-from-hint
check("36 audit by declaration: every remote tool is a non-idempotent write", function(h)
  local list = claiming_tools(h)
  local registry = registry_of(list)
  for _, t in ipairs(list) do
    assert.equal("non_idempotent_write", t.effect)
    assert.equal("non_idempotent_write", registry.get(t.name).effect)
    assert.are_not.equal("read_only", registry.get(t.name).effect)
  end
end)

-- fails if: the data class or approval flag comes from the server's annotations instead of the operator's record
-- proven red by the mutant(s): data-class (mutation 3), approval-from-annotation
check("37 data class and approval are the operator's, whatever the annotations claim", function(h)
  local approval = h.profile.requires_approval ~= "0"
  for _, t in ipairs(claiming_tools(h)) do
    assert.equal(h.profile.data_class, t.data_class, t.name)
    assert.equal(h.profile.data_class, policy.class_of(t), t.name)
    assert.equal(approval, t.requires_approval, t.name)
  end
end)

-- fails if: a remote tool is not marked remote, is usable by a non-admin, is on by default, or leaves mcp_<id>
-- proven red by the mutant(s): enabled-by-default, not-admin-only, data-class
check("38 presents to the gate as a remote, admin-only, default-off tool in mcp_<id>", function(h)
  local list = claiming_tools(h)
  local t = list[1]
  assert.is_true(t.remote)
  assert.is_true(t.requires_admin)
  assert.is_false(t.enabled_by_default)
  assert.equal("mcp_" .. h.id, t.group)
  local configuration = { identifier = "conf", provider = "p" }
  local providers = { p = { zone = "local" } }
  local off = policy.new { registry = registry_of(list), providers = providers }
  assert.equal("toolDisabled", off:decide(t.name, configuration, { admin = true }).reason)
  local on = policy.new { registry = registry_of(list), providers = providers,
    state = { tool_enabled = function() return true end } }
  assert.equal("requiresAdmin", on:decide(t.name, configuration, { admin = false }).reason)
  local allowed = on:decide(t.name, configuration, { admin = true })
  assert.is_true(allowed.allowed)
  assert.equal(h.profile.data_class, allowed.data_class)
end)

---------------------------------------------------------------------------
-- Health (item 39)
---------------------------------------------------------------------------

-- fails if: a completed operation is not stamped, is stamped per leg or page, with another leg's latency, or on failure
-- proven red by the mutant(s): health (mutation 2), contact-on-failure
check("39 health: one contact per completed operation, none for a failed one", function(h)
  h:will_handshake():will_answer(page({ "a" }, "p2")):will_answer(page { "b" })
    :will_answer { ["no tools key"] = true }:will_answer(text_answer("ok")):will_raw("{}", 500)
  h:take_opening(0.010, 0.001, 0.030, 0.042, 0.005, 0.017)
  local conn = h:connect()
  assert.equal(2, #assert(conn:list_tools()))
  assert.same({ { identifier = h.id, latency_ms = 42 } }, { table.unpack(h.contacts) })
  assert.is_nil(conn:list_tools())
  assert.equal(1, #h.contacts)
  assert(conn:call_tool("t"))
  assert.equal(2, #h.contacts)
  assert.same({ identifier = h.id, latency_ms = 17 }, h.contacts[2])
  assert.is_nil(conn:call_tool("t"))
  assert.equal(2, #h.contacts)
end)

---------------------------------------------------------------------------
-- What this client adds (exact JSON, event streams read completely, credential references, the host gate)
---------------------------------------------------------------------------

local BIG = 1234567890123456789

-- fails if: the codec goes through doubles or folds [] and {} together, outbound (arguments) or inbound (structured)
-- proven red by the mutant(s): cjson-like-arrays
check("E1 exact JSON through a call", function(h)
  h:will_handshake():will_answer(text_answer("ok"))
    :will_answer('{"content":[],"structuredContent":{"n":' .. BIG .. ',"list":[],"obj":{}}}')
  local conn = h:connect()
  local result = h:tool(conn, READ_PAGE):execute({ big = BIG, list = json.array {}, obj = {} })
  assert.is_false(result.is_error)
  local raw = h:requests()[h:first_leg()].raw
  contains(raw, '"big":1234567890123456789', "wire")
  contains(raw, '"list":[]', "wire")
  contains(raw, '"obj":{}', "wire")
  local out = assert(conn:call_tool("t"))
  assert.equal("integer", math.type(out.structured.n))
  assert.equal(BIG, out.structured.n)
  assert.is_true(json.is_array(out.structured.list))
  assert.is_false(json.is_array(out.structured.obj))
  -- a call's answer is decoded without key order, so it encodes with sorted keys
  assert.equal('{"list":[],"n":1234567890123456789,"obj":{}}', json.encode(out.structured))
end)

local SECRET = "s3cr3t-conformance-token"

-- fails if: the secret is not sent at all, travels outside the secret header, or any failure's message/err repeats it
-- proven red by the mutant(s): secret-in-reason, credential-before-gate
check("E2 credentials are never in a message", function(h)
  local resolved = 0
  local auth = { auth = { credential = "vault:conformance" },
    resolver = function(ref)
      resolved = resolved + 1
      return ref == "vault:conformance" and SECRET or nil
    end }
  h:will_handshake():will_answer(text_answer("ok"))
  assert(h:connect(auth):call_tool("t"))
  assert.equal(#h:opening() + 1 + h:probes(), resolved) -- once per leg, the era probe included
  for _, r in ipairs(h:requests()) do
    assert.equal("Authorization: Bearer " .. SECRET, r.secret_header)
    for _, line in ipairs(r.headers) do lacks(line, SECRET, "header") end
    lacks(r.raw or "", SECRET, "body")
  end

  local failures = {
    function(f) f:will_raw("{}", 500) end,
    function(f) f:will_raw("{}", 401) end,
    function(f) f:will_refuse(-32001, "unauthorized") end,
    function(f) f:will_raw("<html>denied</html>", 200, "text/html") end,
    function(f) f:will_raw("") end,
    function(f) f:will_fail("transport", "connection reset by peer") end,
    function(f) f:will_fail("timeout", "Operation timed out after 20000 milliseconds") end,
    function(f) f:take(0, 25) end,
  }
  for i, script in ipairs(failures) do
    local f = checks.harness(h.profile)
    f:will_handshake()
    script(f)
    local out, message, err = f:connect(auth):call_tool("t")
    assert.is_nil(out, "failure " .. i)
    contains(message, f.quoted, "failure " .. i)
    for _, s in ipairs(strings_in(err)) do lacks(s, SECRET, "failure " .. i) end
    lacks(message, SECRET, "failure " .. i)
    local result = f:tool(f:connect(auth), READ_PAGE):execute({})
    lacks(result.text, SECRET, "failure " .. i .. " as a tool result")
  end

  local bad = checks.harness(h.profile)
  local out, message, err = bad:connect {
    auth = { credential = "vault:conformance" }, resolver = function() return SECRET .. "\nInjected: 1" end,
  }:call_tool("t")
  assert.is_nil(out)
  assert.equal("credential", err.kind)
  lacks(message, SECRET, "credential failure")
  for _, s in ipairs(strings_in(err)) do lacks(s, SECRET, "credential failure") end
  assert.same({}, bad:requests())
end, nil, "http")

-- fails if: the credential is resolved before the host is judged, a refused host is sent anything, or the pin differs
-- proven red by the mutant(s): credential-before-gate
check("E3 the host gate runs before any credential", function(h)
  h.fake.addresses = { "169.254.169.254" }
  h:will_handshake():will_answer(text_answer("x"))
  local resolved = 0
  local options = { auth = { credential = "vault:conformance" },
    resolver = function() resolved = resolved + 1; return SECRET end }
  local result = h:tool(h:connect(options), READ_PAGE):execute({ uid = 3 })
  is_result(result, true)
  contains(result.text, h.quoted, "result")
  contains(result.text, "not allowed to reach", "result")
  assert.equal(0, resolved)
  assert.same({}, h:requests())
  assert.same({ "mcp.example.com" }, h.fake.resolved)
  assert.equal(0, #h.contacts)

  local ok = checks.harness(h.profile)
  ok:will_handshake():will_answer(text_answer("x"))
  assert(ok:connect(options):call_tool("t"))
  for _, r in ipairs(ok:requests()) do assert.equal("mcp.example.com:443:203.0.113.10", r.pin) end
end, nil, "http")

-- fails if: a stream ending after an event id is not resumed by GET + Last-Event-ID, or the GET drops session/revision
-- proven red by the mutant(s): no-resumption, resume-without-session
check("E4 SSE resumption: a priming-only stream is resumed with GET and Last-Event-ID", function(h)
  h:will_handshake()
    :will_stream { "id: ev-1\nretry: 1\ndata:\n\n" }
    :will_stream { Fake.sse_result(text_answer("resumed"), "ev-2") }
  local result = h:tool(h:connect(), READ_PAGE):execute({ uid = 3 })
  assert.same({ text = "resumed", is_error = false }, result)
  assert.same({ "initialize", "notifications/initialized", "tools/call", "GET" }, h:methods())
  local get = h:requests()[4]
  assert.equal("ev-1", get.last_event_id)
  assert.equal("text/event-stream", get.accept)
  assert.equal(h.session, get.session)
  assert.equal("2025-11-25", get.protocol)
  assert.is_nil(get.raw)
  assert.equal(1, #h.contacts)
end, "legacy", "http")

-- fails if: a modern stream that ends after an event id is resumed (this revision has no resumption) or sent again
-- proven red by: the connection before the 2026-07-28 era (it resumes with GET)
check("E4-m no resumption in the 2026-07-28 era: a priming-only stream is an interrupted call", function(h)
  h:will_handshake()
    :will_stream { "id: ev-1\nretry: 1\ndata:\n\n" }
    :will_stream { Fake.sse_result(text_answer("resumed"), "ev-2") }
  local result = h:tool(h:connect(), READ_PAGE):execute({ uid = 3 })
  is_result(result, true)
  assert.equal("interrupted", result.err.kind)
  contains(result.text, "may have acted", "result")
  assert.same({ "server/discover", "tools/call" }, h:methods())
  assert.equal(0, #h.contacts)
end, "modern", "http")

---------------------------------------------------------------------------
-- What a server offers beside tools: resources, templates, prompts, completion, notices (O1–O14)
---------------------------------------------------------------------------

local OFFERS = { tools = {}, resources = { subscribe = true, listChanged = true }, prompts = { listChanged = true },
  completions = {} }

-- A page of a listing in the era's form (a modern result carries its freshness hint).
local function offer_page(h, key, entries, cursor, ttl)
  local result = { [key] = json.array(entries), nextCursor = cursor }
  if h.modern then result.resultType, result.ttlMs, result.cacheScope = "complete", ttl or 0, "private" end
  return result
end

-- fails if: the walk stops at an empty-string cursor, drops the cursor, loses an entry, or lets far-side controls
-- into a display field or changes the uri
-- proven red by the mutant(s): empty-cursor-ends, display-raw
check("O1 list_resources: every page (an empty cursor is a cursor), display fields under the text rule", function(h)
  h:will_handshake(nil, nil, OFFERS)
    :will_answer(offer_page(h, "resources", { { uri = "file:///a\27[31m", name = "A\27[2Jname",
      description = "d\226\128\174esc" }, { name = "no uri" } }, ""))
    :will_answer(offer_page(h, "resources", { { uri = "file:///b", name = "B" } }, "c2"))
    :will_answer(offer_page(h, "resources", { { uri = "file:///c", name = "C", title = 7 } }))
  local list, listing = h:connect():list_resources()
  assert(list, listing)
  assert.equal(3, #list)
  assert.equal("file:///a\27[31m", list[1].uri)
  for _, v in ipairs(strings_in { list[1].name, list[1].description }) do
    assert.is_nil(v:find("[%c]"), v)
    assert.is_nil(v:find("\226\128\174", 1, true), v)
  end
  assert.is_nil(list[3].title)
  assert.same(h:opening { "resources/list", "resources/list", "resources/list" }, h:methods())
  local requests = h:requests()
  assert.equal("", requests[#requests - 1].body.params.cursor)
  assert.equal("c2", requests[#requests].body.params.cursor)
  assert.equal(h:per_era("legacy", "modern"), listing.era)
  assert.equal(1, #h.contacts)
end)

-- fails if: a page reaches fn unbounded, out of order, or uncleaned, or the walk ends at an empty cursor
-- proven red by the mutant(s): empty-cursor-ends, display-raw
check("O1b each_resource_page: each page to fn in order, cleaned as list_resources, one contact", function(h)
  h:will_handshake(nil, nil, OFFERS)
    :will_answer(offer_page(h, "resources", { { uri = "file:///a", name = "A\27[1m" }, { name = "no uri" } }, ""))
    :will_answer(offer_page(h, "resources", { { uri = "file:///b" } }))
  local pages = {}
  local listing = assert(h:connect():each_resource_page(function(entries) pages[#pages + 1] = entries end))
  assert.equal(2, #pages)
  assert.same({ "file:///a" }, { pages[1][1].uri })
  assert.equal(1, #pages[1])
  assert.is_nil(pages[1][1].name:find("%c"))
  assert.equal("file:///b", pages[2][1].uri)
  assert.equal(h:per_era("legacy", "modern"), listing.era)
  assert.equal(1, #h.contacts)
end)

-- fails if: a listing that never ends is followed past 50 pages
-- proven red by the mutant(s): no-walk-bound
check("O2 the 50-page ceiling holds for resource templates", function(h)
  h:will_handshake(nil, nil, OFFERS)
  for i = 1, 50 do
    h:will_answer(offer_page(h, "resourceTemplates", { { uriTemplate = "file:///{p}", name = "t" .. i } }, "n" .. i))
  end
  local list, message, err = h:connect():list_resource_templates()
  assert.is_nil(list)
  assert.equal("malformed", err.kind)
  contains(message, "50 pages")
  assert.equal(50, h:count("resources/templates/list"))
  assert.equal(0, #h.contacts)
end)

-- fails if: a request the server did not advertise is sent, or fails with anything but not_offered
-- proven red by the mutant(s): no-capability-check
check("O3 capabilities: nothing is asked that the server did not advertise", function(h)
  h:will_handshake(nil, nil, { tools = {} })
  local conn = h:connect()
  for _, call in ipairs {
    function() return conn:list_resources() end, function() return conn:read_resource("file:///a") end,
    function() return conn:list_prompts() end, function() return conn:get_prompt("p") end,
    function() return conn:complete({ type = "ref/prompt", name = "p" }, { name = "a", value = "" }) end,
    function() return conn:subscribe("file:///a") end,
  } do
    local ok, message, err = call()
    assert.is_nil(ok)
    assert.equal("not_offered", err.kind)
    contains(message, "nothing was sent")
    contains(message, h.quoted)
  end
  assert.same(h:opening(), h:methods())
end)

-- fails if: a read loses a content, lets a blob into the model's text without a note, or is not bounded
-- proven red by the mutant(s): read-unbounded
check("O4 read_resource: contents kept, texts joined, a blob named in the note, bounded as a tool result", function(h)
  local big = string.rep("x", 60000)
  h:will_handshake(nil, nil, OFFERS)
    :will_answer { contents = json.array { { uri = "file:///a", mimeType = "text/plain", text = "alpha" },
      { uri = "file:///a#2", mimeType = "image/png", blob = "AAAA" }, { uri = "file:///a#3", text = "omega" } } }
    :will_answer { contents = json.array { { uri = "file:///big", text = big } } }
  local conn = h:connect()
  local read = assert(conn:read_resource("file:///a"))
  assert.equal(3, #read.contents)
  assert.same({ uri = "file:///a#2", mime_type = "image/png", blob = "AAAA" }, read.contents[2])
  assert.equal("[mcpclient reads text only and dropped 1 non-text content block (image).]\nalpha\nomega", read.text)
  assert.equal("file:///a", h:requests()[#h:requests()].body.params.uri)
  local huge = assert(conn:read_resource("file:///big"))
  assert.equal(big, huge.contents[1].text)
  assert.is_true(#huge.text <= 50000)
  contains(huge.text, "truncated at 50000 bytes")
  assert.equal(2, #h.contacts)
end)

-- fails if: the prompt's arguments are not sent, or its text is not what a model reads, bounded
-- proven red by the mutant(s): prompt-args-dropped, display-raw
check("O5 get_prompt: arguments sent, messages kept, text as role: text", function(h)
  h:will_handshake(nil, nil, OFFERS)
    :will_answer { description = "Greets\27[0m.", messages = json.array {
      { role = "user", content = { type = "text", text = "Hello Ada" } },
      { role = "assistant", content = { type = "image", data = "AA", mimeType = "image/png" } } } }
  local prompt = assert(h:connect():get_prompt("greet", { who = "Ada" }))
  assert.equal("Greets [0m.", prompt.description)
  assert.equal(2, #prompt.messages)
  assert.equal("[mcpclient reads text only and dropped 1 non-text content block (image).]\nuser: Hello Ada",
    prompt.text)
  local sent = h:requests()[#h:requests()].body.params
  assert.equal("greet", sent.name)
  assert.same({ who = "Ada" }, sent.arguments)
end)

-- fails if: completion loses its numbers, sends the wrong ref/argument/context, or passes controls on
-- proven red by the mutant(s): completion-unclipped
check("O6 complete: ref, argument and context sent; values under the text rule, at most 100", function(h)
  local values = json.array {}
  for i = 1, 120 do values[i] = "v" .. i end
  values[1] = "py\27]0;x\7thon"
  h:will_handshake(nil, nil, OFFERS)
    :will_answer { completion = { values = values, total = 500, hasMore = true } }
  local out = assert(h:connect():complete({ type = "ref/prompt", name = "code" }, { name = "lang", value = "py" },
    { style = "short" }))
  assert.equal(100, #out.values)
  assert.is_nil(out.values[1]:find("%c"))
  assert.equal(500, out.total)
  assert.is_true(out.has_more)
  local sent = h:requests()[#h:requests()].body.params
  assert.same({ type = "ref/prompt", name = "code" }, sent.ref)
  assert.same({ name = "lang", value = "py" }, sent.argument)
  assert.same({ arguments = { style = "short" } }, sent.context)
end)

-- fails if: a tool result's resource_link or embedded resource is lost from content or not named to the model
-- proven red by the mutant(s): links-unnamed
check("O7 tool results: resource_link and embedded resource blocks kept and named in the note", function(h)
  h:will_handshake():will_answer { content = json.array { { type = "text", text = "see" },
    { type = "resource_link", uri = "file:///r\27[1m", name = "r" },
    { type = "resource", resource = { uri = "mem://e", text = "inline" } } } }
  local out = assert(h:connect():call_tool("t"))
  assert.equal(3, #out.content)
  assert.equal("resource_link", out.content[2].type)
  contains(out.note, '"file:///r [1m"')
  contains(out.note, '"mem://e"')
  contains(out.text, "see")
end)

-- fails if: a change notice on a response stream does not reach on_change, or a handler that raises fails the call
-- proven red by the mutant(s): notices-dropped
check("O8 change notices on a response stream reach on_change (a raising handler is only logged)", function(h)
  local seen, logged = {}, {}
  h:will_handshake(nil, nil, OFFERS):will_stream {
    'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/resources/list_changed"}\n\n',
    'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/resources/updated",'
      .. '"params":{"uri":"file:///a"}}\n\n',
    'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}\n\n',
    Fake.sse_result(offer_page(h, "prompts", { { name = "p" } })) }
  local conn = h:connect { on_change = function(kind, uri)
    seen[#seen + 1] = kind .. (uri and (" " .. uri) or "")
    if kind == "prompts" then error("host bug") end
  end, log = function(_, line) logged[#logged + 1] = line end }
  local list = assert(conn:list_prompts())
  assert.equal("p", list[1].name)
  assert.same({ "resources", "resource file:///a", "prompts" }, seen)
  assert.equal(1, #logged)
  contains(logged[1], "on_change")
end)

-- fails if: the cache is not used within the freshness, or survives the notice that makes it stale
-- proven red by the mutant(s): notices-dropped, cache-kept
check("O9 cache = true: a listing reused while fresh, fetched again after its list_changed notice", function(h)
  h:will_handshake(nil, nil, OFFERS)
    :will_answer(offer_page(h, "resources", { { uri = "file:///a", name = "A" } }, nil, 60000))
    :will_stream {
      'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/resources/list_changed"}\n\n',
      Fake.sse_result(offer_page(h, "prompts", { { name = "p" } }, nil, 60000)) }
    :will_answer(offer_page(h, "resources", { { uri = "file:///b", name = "B" } }, nil, 60000))
  local conn = h:connect { cache = true }
  local first = assert(conn:list_resources())
  first[1] = nil  -- a caller's change leaves the cache as it was
  local again, listing = conn:list_resources()
  assert.equal("file:///a", again[1].uri)
  assert.is_true(listing.cached)
  assert(conn:list_prompts())
  local fresh = assert(conn:list_resources())
  assert.equal("file:///b", fresh[1].uri)
  assert.same(h:opening(h:listened { "resources/list", "prompts/list", "resources/list" }), h:methods())
end)

-- fails if: subscribe sends nothing in the 2025 era, sends a method the 2026-07-28 era does not have, or
-- where a listen stands open (stdio) does not name the URI in a new one at once and end it on unsubscribe
-- proven red by the mutant(s): subscribe-not-sent, subscribe-not-listened
check("O10 subscribe: resources/subscribe in the 2025 era; in the 2026-07-28 era kept for the listen",
  function(h)
  h:will_handshake(nil, nil, OFFERS)
  if not h.modern then h:will_answer({}):will_answer({}) end
  local conn = h:connect()
  assert.is_true(conn:subscribe("file:///a"))
  assert.is_true(conn:unsubscribe("file:///a"))
  if h.standing then
    -- the listen names the URI at once; unsubscribing cancels it, and nothing else is listened for
    assert.same(h:opening { "subscriptions/listen", "notifications/cancelled" }, h:methods())
    local listen, notice = h:requests()[2], h:requests()[3]
    assert.same({ "file:///a" }, listen.body.params.notifications.resourceSubscriptions)
    assert.equal(modern.VERSION, listen.body.params._meta["io.modelcontextprotocol/protocolVersion"])
    assert.equal(listen.id, notice.body.params.requestId)
  elseif h.modern then
    assert.same(h:opening(), h:methods())
  else
    assert.same(h:opening { "resources/subscribe", "resources/unsubscribe" }, h:methods())
    assert.equal("file:///a", h:requests()[#h:requests()].body.params.uri)
  end
end)

-- fails if: a resource-not-found is not the server's rpc error, sent once, or misuse does not raise
-- proven red by the mutant(s): read-retried
check("O11 a read the server refuses is its rpc error, sent once; misuse raises", function(h)
  h:will_handshake(nil, nil, OFFERS):will_refuse(-32002, "Resource not found")
  local conn = h:connect()
  local read, _, err = conn:read_resource("file:///gone")
  assert.is_nil(read)
  assert.equal(-32002, err.rpc_code)
  assert.equal(1, h:count("resources/read"))
  assert.has_error(function() conn:read_resource(42) end)
  assert.has_error(function() conn:get_prompt("p", { n = 1 }) end)
  assert.has_error(function() conn:complete({ type = "ref/x" }, { name = "a", value = "" }) end)
end)

---------------------------------------------------------------------------
-- Input the server asks for (2026-07-28)
---------------------------------------------------------------------------

-- An input_required result asking to confirm, with `state` as its requestState.
local function asks_input(state)
  return { resultType = "input_required", requestState = state, inputRequests = { confirm = {
    method = "elicitation/create", params = { message = "Sure?\27[31m", requestedSchema = { type = "object",
      properties = { ok = { type = "boolean" } } } } } } }
end

-- fails if: an input request does not reach on_elicitation under the text rule, the retry reuses the id, loses
-- the call's arguments, does not send the answers or echo requestState exactly, or the rounds are unbounded
-- proven red by the mutant(s): mrtr-state-dropped, mrtr-arguments-dropped, mrtr-unbounded, elicitation-raw
check("M1 input_required: answered through on_elicitation, retried with a new id and the state echoed; "
  .. "rounds bounded", function(h)
  local seen = {}
  local STATE = '{"nonce":"a\\u00e9b","n":1.50}  '   -- JSON-looking, odd spacing: echoed, never parsed
  h:will_handshake():will_answer(asks_input(STATE)):will_answer(text_answer("done"))
    :will_answer(asks_input("r1")):will_answer(asks_input("r2")):will_answer(asks_input("r3"))
  local conn = h:connect { max_input_rounds = 2, on_elicitation = function(request)
    seen[#seen + 1] = request
    return { action = "accept", content = { ok = true } }
  end }
  assert.equal("done", assert(conn:call_tool("deploy", { env = "prod" })).text)
  assert.same(h:opening { "tools/call", "tools/call" }, h:methods())
  local first, retry = h:requests()[2], h:requests()[3]
  assert.are_not.equal(first.id, retry.id)
  assert.same({ "deploy", { env = "prod" } }, { retry.body.params.name, retry.body.params.arguments })
  assert.same({ confirm = { action = "accept", content = { ok = true } } }, retry.body.params.inputResponses)
  assert.equal(STATE, retry.body.params.requestState)
  assert.truthy(retry.raw:find('"requestState":"{\\"nonce\\":\\"a\\\\u00e9b\\",\\"n\\":1.50}  "', 1, true),
    retry.raw)
  assert.is_nil(first.body.params.inputResponses)
  assert.equal(1, #seen)
  assert.equal("Sure?", seen[1].message:sub(1, 5))
  assert.is_nil(seen[1].message:find("\27", 1, true))
  -- at most max_input_rounds answers per request, then input_required, nothing answered again
  local out, _, err = conn:call_tool("deploy", { env = "stage" })
  assert.is_nil(out)
  assert.same({ "input_required", 2 }, { err.kind, err.rounds })
  assert.equal(5, h:count("tools/call"))
  assert.equal("r2", h:requests()[#h:requests()].body.params.requestState)
  assert.equal(3, #seen)  -- asked for r1 and r2 only: never for an answer that would not be sent
end, "modern")

-- A 2026-07-28 answer about task "m-1" in `status`: the call's (`resultType` "task") or a tasks/get's
-- ("complete", with the outcome `result` once it has one).
local function task_answer(result_type, status, result)
  local now = os.date("!%Y-%m-%dT%H:%M:%SZ")
  return { resultType = result_type, taskId = "m-1", status = status, ttlMs = 60000, pollIntervalMs = 0,
    createdAt = now, lastUpdatedAt = now, result = result }
end

-- fails if: a call the host asked to run as a task is not followed with tasks/get to its outcome, is called
-- again, names another task, or the tasks extension is not declared in the envelope of each request
-- proven red by the mutant(s): task-not-followed, task-extension-undeclared
check("M2 a call as a task: declared in the envelope, followed with tasks/get to its outcome, called once",
  function(h)
  h:will_handshake(nil, nil, { tools = {}, extensions = { ["io.modelcontextprotocol/tasks"] = {} } })
    :will_answer(task_answer("task", "working")):will_answer(task_answer("complete", "working"))
    :will_answer(task_answer("complete", "completed", text_answer("built")))
  local conn = h:connect()
  assert.equal("built", assert(conn:call_tool("build", { target = "all" }, { task = true })).text)
  assert.same(h:opening { "tools/call", "tasks/get", "tasks/get" }, h:methods())
  for i = 2, 4 do
    local params = h:requests()[i].body.params
    local declared = params._meta["io.modelcontextprotocol/clientCapabilities"].extensions
    assert.same({}, declared["io.modelcontextprotocol/tasks"])
    if i > 2 then assert.equal("m-1", params.taskId) end
  end
  assert.equal(1, h:count("tools/call"))
  assert.equal(1, #h.contacts)
end, "modern")

-- The id of the last subscriptions/listen the client wrote, read when a scripted answer is built.
local function last_listen(h)
  for i = #h:requests(), 1, -1 do
    if h:requests()[i].method == "subscriptions/listen" then return h:requests()[i].id end
  end
  error("no subscriptions/listen was written")
end

-- One scripted event carrying `message`, naming the subscription `subscription()` returns, if any.
local function event_of(message, subscription)
  return function()
    if subscription then
      message.params = message.params or {}
      message.params._meta = { ["io.modelcontextprotocol/subscriptionId"] = subscription() }
    end
    return "event: message\ndata: " .. json.encode(message) .. "\n\n"
  end
end

-- fails if: what a stdio server writes after an answer is lost instead of reaching on_change (and the cache) by
-- the next operation, a notice of a subscription that is not open reaches it, or a listen the server ended, or
-- lost with its child, is not opened again (the stdio binding asks for it to be re-sent)
-- proven red by the mutant(s): stdio-notice-dropped, stdio-foreign-subscription, stdio-listen-not-renewed,
-- stdio-listen-not-on-new-child, cache-kept
check("O13 stdio: notices written between answers reach on_change and the cache by the next operation; a "
  .. "listen ended or lost with its child is opened again", function(h)
  local seen = {}
  local mine = h.modern and function() return last_listen(h) end or nil
  h:will_handshake(nil, nil, OFFERS):will_stream {
    Fake.sse_result(offer_page(h, "resources", { { uri = "file:///a", name = "A" } }, nil, 60000)),
    -- written after the answer: read by the next operation
    event_of({ jsonrpc = "2.0", method = "notifications/resources/updated", params = { uri = "file:///a" } }, mine),
    event_of({ jsonrpc = "2.0", method = "notifications/resources/list_changed" }, mine),
    -- a subscription this client does not hold (2026-07-28): passed over
    h.modern and event_of({ jsonrpc = "2.0", method = "notifications/resources/list_changed" },
      function() return 9999 end) or nil,
    -- the server ends the listen (its graceful end: the listen's own answer)
    h.modern and function()
      local id = last_listen(h)
      return "event: message\ndata: " .. json.encode { jsonrpc = "2.0", id = id, result = { resultType = "complete",
        _meta = { ["io.modelcontextprotocol/subscriptionId"] = id } } } .. "\n\n"
    end or nil,
  }
  h:will_answer(offer_page(h, "prompts", { { name = "p" } }))
    :will_answer(offer_page(h, "resources", { { uri = "file:///b", name = "B" } }, nil, 60000))
  local conn = h:connect { cache = true,
    on_change = function(kind, uri) seen[#seen + 1] = kind .. (uri and (" " .. uri) or "") end }
  assert.equal("file:///a", assert(conn:list_resources())[1].uri)
  assert.equal("p", assert(conn:list_prompts())[1].name)
  assert.same({ "resource file:///a", "resources" }, seen)
  -- the cached listing was dropped by the notice: asked again
  local fresh, listing = conn:list_resources()
  assert.equal("file:///b", fresh[1].uri)
  assert.is_nil(listing.cached)
  assert.same({ "resource file:///a", "resources" }, seen)
  if not h.modern then
    assert.same(h:opening { "resources/list", "prompts/list", "resources/list" }, h:methods())
    return
  end
  -- the ended listen is opened again, with the same filter, before the next request
  assert.same(h:opening { "subscriptions/listen", "resources/list", "prompts/list", "subscriptions/listen",
    "resources/list" }, h:methods())
  local first, again = h:requests()[2], h:requests()[5]
  assert.same({ promptsListChanged = true, resourcesListChanged = true }, first.body.params.notifications)
  assert.same(first.body.params.notifications, again.body.params.notifications)
  -- the child dies before it reads the next request: no byte of it went (the write found the pipe
  -- closed), so the same operation opens a new child, and its listen, and asks it there
  h:will_fail("transport"):will_handshake(nil, nil, OFFERS):will_answer(offer_page(h, "prompts", { { name = "r" } }))
  local before = #h:methods()
  assert.equal("r", assert(conn:list_prompts())[1].name)
  -- the script records the attempt the dead child never read, then the new child's messages
  assert.same({ "prompts/list", "server/discover", "subscriptions/listen", "prompts/list" },
    { table.unpack(h:methods(), before + 1) })
end, nil, "stdio")

-- fails if: a run reads past the gate (zone ceiling, approval), sends anything when refused, records no event,
-- or reads without the approval the operator asked for (instead of suspending the run until it is given)
-- proven red by the mutant(s): read-ungated, read-unapproved
check("O12 a run reads only through the gate: the data class against the zone, approval as the operator set it",
  function(h)
  local agent_store = require "mcpclient.agent.store"
  local agent_run = require "mcpclient.agent.run"
  local store = assert(agent_store.open(":memory:"))
  local row = profiles.server(h.profile)
  assert(store:add_server { identifier = row.identifier, name = row.name, url = row.url, data_class = row.data_class,
    requires_approval = row.requires_approval, enabled = true })
  h:will_handshake(nil, nil, OFFERS):will_answer { contents = json.array { { uri = "file:///a", text = "alpha" } } }
  local function start(zone)
    return assert(agent_run.start(store, { user = { name = "ops", uid = 1, admin = true },
      configuration = { identifier = "c-" .. zone, provider = zone }, providers = { [zone] = { zone = zone } },
      tools = {}, log = function() end, connect = function() return h:connect() end }))
  end
  -- the least trusted zone admits editorContent at most
  local global = start("externalGlobal")
  local outside = global:read_resource(h.id, "file:///a")
  local permitted = policy.permits("externalGlobal", row.data_class)
  if not permitted then
    assert.is_true(outside.is_error)
    contains(outside.text, "not permitted")
    assert.equal(0, #h:requests())
    local rows = store:governance_events()
    assert.equal("trustZone", rows[#rows].reason)
  end
  global:finish()
  local r = start("local")
  local before = #h:requests()
  local read = r:read_resource(h.id, "file:///a")
  if row.requires_approval ~= "0" then
    -- the operator asked for approval: the read waits for it, as a tool call does, with nothing sent
    assert.is_true(read.suspended)
    assert.equal("waiting_approval", r.status)
    assert.equal(before, #h:requests())
    -- one waiting step, the read, with its own id and why it waits
    local waiting = r:pending()
    assert.equal(1, #waiting)
    assert.same({ kind = "read", server = h.id, uri = "file:///a", needs_approval = true, reason = "approval" },
      { kind = waiting[1].kind, server = waiting[1].server, uri = waiting[1].uri,
        needs_approval = waiting[1].needs_approval, reason = waiting[1].reason })
    assert.is_string(waiting[1].id)
    r:approve()
    local results = r:resume()
    assert.is_false(results[1].is_error, results[1].text)
    assert.equal("alpha", results[1].text)
    local reads = 0
    for _, req in ipairs(h:requests()) do
      if req.method == "resources/read" then reads = reads + 1 end
    end
    assert.equal(1, reads)
    local events = assert(r:events())
    assert.same({ "approval_required", "approval", "resource" },
      { events[#events - 2].kind, events[#events - 1].kind, events[#events].kind })
  else
    assert.is_false(read.is_error, read.text)
    assert.equal("alpha", read.text)
    local events = assert(r:events())
    assert.equal("resource", events[#events].kind)
    assert.is_true(events[#events].data.durationMs >= 0)
  end
  r:finish()
  store:close()
end)

-- fails if: a change notice leaves the stored catalogue as it was, a run imports it again inside the turn that
-- heard it, past its gate (the data class against the zone), more than once per burst, or without its event and
-- its contact
-- proven red by the mutant(s): notice-unmarked, reimport-in-turn, reimport-ungated, reimport-every-safe-point
check("O14 a change notice marks the catalogue stale; a run imports it again at its safe point, through its gate, once",
  function(h)
  local agent_store = require "mcpclient.agent.store"
  local agent_run = require "mcpclient.agent.run"
  local catalogue = require "mcpclient.agent.catalogue"
  local store = assert(agent_store.open(":memory:"))
  local row = profiles.server(h.profile)
  local uid = assert(store:add_server { identifier = row.identifier, name = row.name, url = row.url,
    data_class = row.data_class, requires_approval = row.requires_approval, enabled = true, reimport = "auto" })
  local notice = 'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n\n'
  h:will_handshake():will_stream { notice, notice, Fake.sse_result(text_answer("done")) }
  -- the connection a host made itself, with the store's change-notice handler
  local conn = h:connect { on_change = catalogue.on_change(store, assert(store:server(uid))) }
  local t = h:tool(conn, { name = "t", inputSchema = { type = "object" } })
  assert(store:set_tool_enabled(t.name, true))
  local function start(zone)
    return assert(agent_run.start(store, { user = { name = "ops", uid = 1, admin = true },
      configuration = { identifier = "c-" .. zone, provider = zone }, providers = { [zone] = { zone = zone } },
      tools = { t }, log = function() end, connect = function() return h:connect() end }))
  end
  local r = start("local")
  local answer = r:invoke(t.name, {})
  if answer.suspended then
    r:approve()
    answer = r:resume()[1]
  end
  assert.equal("done", answer.text)
  -- the turn heard the burst: the catalogue is stale, and nothing was imported inside the turn
  local marked = assert(store:server(uid))
  assert.is_true(marked.catalogue_stale)
  assert.equal(1, marked.reimport_pending)
  assert.equal(0, h:count("tools/list"))
  local contacts = #h.contacts
  h:will_handshake():will_answer(page { "t", "u" })
  -- the least trusted zone admits editorContent at most: a run there does not reach the server
  local global = start("externalGlobal")
  global:tools()
  local by = global
  if not policy.permits("externalGlobal", row.data_class) then
    assert.equal(0, h:count("tools/list"))
    assert.equal(1, assert(store:server(uid)).reimport_pending)
    local refused = 0
    for _, g in ipairs(store:governance_events()) do
      if g.tool_name == string.format("mcp_%s:catalogue", h.id) then refused = refused + 1 end
    end
    assert.equal(1, refused)
    r:tools()
    by = r
  end
  assert.equal(1, h:count("tools/list"))
  local current = assert(store:server(uid))
  assert.is_false(current.catalogue_stale)
  assert.equal(2, current.tool_count)
  assert.is_true(#h.contacts > contacts)
  local events = assert(by:events())
  assert.equal("reimport", events[#events].kind)
  assert.equal(2, events[#events].data.imported)
  assert.is_true(events[#events].data.durationMs >= 0)
  -- once per burst: the next safe points list nothing
  r:tools()
  global:tools()
  assert.equal(1, h:count("tools/list"))
  global:finish()
  r:finish()
  store:close()
end)

return checks
