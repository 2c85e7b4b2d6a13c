--- A connection to one MCP server: the era, handshake, session, operations.
--
-- The first operation finds the server's protocol era once (option
-- `protocol`, "auto" by default): a 2026-07-28 server/discover first; a
-- result or a recognised modern error means the modern era (no handshake, no
-- session: every request carries its own metadata, see modern.lua); any
-- other refusal means a 2025-era server, which gets initialize. In the 2025
-- era the connection initializes once and reuses its session. Each public
-- operation (list_tools, call_tool, ping) opens one deadline that every leg
-- of it spends — a re-initialization included — and records at most one
-- health contact, when it completes. A failure of any leg arrives from the
-- transport as `nil, message, err` and is handed to the caller unchanged.
local core = require "mcpclient.core"
local credentials = require "mcpclient.credentials"
local Deadline = require "mcpclient.deadline"
local engine = require "mcpclient.engine"
local errors = require "mcpclient.errors"
local hostgate = require "mcpclient.hostgate"
local log = require "mcpclient.log"
local modern = require "mcpclient.modern"
local trace = require "mcpclient.trace"
local Transport = require "mcpclient.transport"

local json = core.json
local fail = errors.fail

local client = {}

client.PROTOCOL_VERSION = "2025-11-25"
client.SUPPORTED_VERSIONS = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" }
-- The `protocol` option: find the era (server/discover, then initialize if
-- the server is not modern), or pin one of them.
client.PROTOCOLS = { auto = true, [modern.VERSION] = true, [client.PROTOCOL_VERSION] = true }
client.MAX_PAGES = 50
-- The whole tools/list walk, all pages together: entries as the server sent
-- them, response bytes, and objects and arrays decoded (each a Lua table).
-- A page is bounded by the read cap; these bound what a server can make the
-- client hold across pages.
client.MAX_LISTED_TOOLS = 10000
client.MAX_LISTED_BYTES = 8 * 1024 * 1024
client.MAX_LISTED_CONTAINERS = 131072
client.DEFAULT_BUDGET = 20            -- seconds, one operation
client.DEFAULT_CONNECT_TIMEOUT = 10   -- seconds, never more than the budget left
client.CLOSE_BUDGET = 2               -- seconds for the DELETE that ends a session

--- The one rule for a server identifier: it prefixes every local tool name.
client.IDENTIFIER_RULE = "1 to 32 characters of A-Z, a-z, 0-9, _ and -"
function client.valid_identifier(text)
  return type(text) == "string" and #text <= 32 and text:match("^[A-Za-z0-9_-]+$") ~= nil
end

local supported = {}
for _, v in ipairs(client.SUPPORTED_VERSIONS) do supported[v] = true end

local Connection = {}
Connection.__index = Connection

---------------------------------------------------------------------------
-- Options
---------------------------------------------------------------------------

-- Every key connect() accepts, with the type it must have.
local option_types = {
  url = "string", identifier = "string", name = "string", auth = "table", oauth = "table", resolver = "function",
  budget = "number", connect_timeout = "number", health = "recorder", host_gate = "function",
  refuse_private = "boolean", ca_file = "string", client_cert = "string", client_key = "string",
  transport = "table", clock = "function", log = "function", trace = "boolean", protocol = "string",
  on_elicitation = "function",
}

local function check_type(key, value, expected)
  if expected == "recorder" then
    local ok = type(value) == "function" or (type(value) == "table" and type(value.record) == "function")
    if not ok then
      error("health must be a recorder (a function or a table with :record), or mcp.health.discard", 4)
    end
  elseif type(value) ~= expected then
    error(string.format("%s must be a %s, not a %s", key, expected, type(value)), 4)
  end
end

local function positive_seconds(key, value)
  if value ~= value or value <= 0 or value == math.huge then
    error(string.format("%s must be a positive number of seconds", key), 4)
  end
  return value
end

local function validate(options)
  if type(options) ~= "table" then error("connect expects an options table", 3) end
  for key, value in pairs(options) do
    local expected = option_types[key]
    if not expected then error(string.format("connect: unknown option %q", tostring(key)), 3) end
    check_type(key, value, expected)
  end
  if options.url == nil then error("connect: url is required", 3) end
  if options.identifier == nil then error("connect: identifier is required", 3) end
  if options.health == nil then
    error("connect: health is required (a recorder, or mcp.health.discard to say none)", 3)
  end
  if options.protocol ~= nil and not client.PROTOCOLS[options.protocol] then
    error(string.format('connect: protocol must be "auto", "%s" or "%s"', modern.VERSION, client.PROTOCOL_VERSION), 3)
  end
  if not client.valid_identifier(options.identifier) then
    error("connect: identifier must be " .. client.IDENTIFIER_RULE, 3)
  end
  local target, why = hostgate.parse_url(options.url)
  if not target then error(string.format("connect: url is not usable: %s", why), 3) end
  return target
end

---------------------------------------------------------------------------
-- Connecting
---------------------------------------------------------------------------

-- What the transport of a connection is built from; `checked` holds the
-- options connect() has already validated.
local function transport_config(options, checked)
  return {
    identifier = options.identifier,
    url = options.url,
    target = checked.target,
    leg = checked.leg,
    pool = checked.pool,
    -- more legs on the same pool: several requests in flight at once
    spawn_leg = checked.pool and function() return core.http_leg(checked.pool) end or nil,
    on_elicitation = options.on_elicitation,
    auth = checked.auth,
    resolver = options.resolver,
    host_gate = options.host_gate or hostgate.default,
    refuse_private = options.refuse_private or false,
    connect_timeout = checked.connect_timeout,
    tls = { ca_file = options.ca_file, client_cert = options.client_cert, client_key = options.client_key },
    clock = checked.clock,
  }
end

--- Open a connection. No network traffic happens until the first operation.
-- Misuse (unknown keys, wrong types, a missing required option) raises.
function client.connect(options)
  local checked = { target = validate(options), auth = credentials.validate(options.auth),
    clock = options.clock or core.now,
    connect_timeout = positive_seconds("connect_timeout", options.connect_timeout or client.DEFAULT_CONNECT_TIMEOUT) }
  local health = options.health
  local record = type(health) == "function" and health or function(...) return health:record(...) end
  -- The leg exists before the connection is given its finalizer: Lua runs
  -- finalizers in the reverse order objects were marked, so a collected
  -- connection still finds its leg open and can end its session (DELETE).
  checked.pool = not options.transport and core.http_pool() or nil
  checked.leg = options.transport or core.http_leg(checked.pool)
  local self = setmetatable({
    identifier = options.identifier,
    name = options.name or options.identifier,
    url = options.url,
    budget = positive_seconds("budget", options.budget or client.DEFAULT_BUDGET),
    clock = checked.clock,
    record_contact = record,
    log = options.log or log.default,
    protocol = options.protocol or "auto",
    session = nil,
    closed = false,
    mirrored = {},  -- tool name -> its x-mcp-header markings, from the last modern listing
  }, Connection)
  self.transport = Transport.new(transport_config(options, checked))
  self.transport.legacy_versions = self.protocol ~= modern.VERSION and client.SUPPORTED_VERSIONS or {}
  if trace.enabled(options.trace) then trace.wrap(self.transport, self.identifier, self.clock) end
  if options.oauth then
    if options.auth then error("connect: give either auth or oauth, not both", 2) end
    self.transport.oauth = require("mcpclient.oauth").provider(options.oauth, self.transport, 2)
  end
  return self
end

---------------------------------------------------------------------------
-- Operations: one deadline each
---------------------------------------------------------------------------

local op_keys = { budget = "number", cancel = "function", on_progress = "function" }

function Connection:open_operation(opts)
  if self.closed then error("the connection is closed", 3) end
  if opts == nil then return { deadline = Deadline.open(self.budget, self.clock) } end
  if type(opts) ~= "table" then error("options must be a table", 3) end
  for key, value in pairs(opts) do
    local expected = op_keys[key]
    if not expected then error(string.format("unknown option %q", tostring(key)), 3) end
    if type(value) ~= expected then error(string.format("%s must be a %s", key, expected), 3) end
  end
  local budget = opts.budget and positive_seconds("budget", opts.budget) or self.budget
  return { deadline = Deadline.open(budget, self.clock), cancel = opts.cancel, on_progress = opts.on_progress }
end

-- One health contact (latency in whole milliseconds); a recorder that fails
-- never fails the operation.
function Connection:contact(latency_ms)
  local ok, why = pcall(self.record_contact, self.identifier, latency_ms)
  if not ok then
    pcall(self.log, "warning", string.format('An MCP liveness observation for "%s" could not be stored: %s',
      self.identifier, tostring(why)))
  end
end

-- A session id goes back to the server in a header on every request, so it
-- may hold only visible ASCII (0x21-0x7E), as the protocol requires; anything
-- else is refused here rather than break every later request.
local function valid_session_id(id)
  return id == nil or not id:find("[^\33-\126]")
end

-- What the initialize result must hold: a revision this client speaks, and a
-- session id it can send back.
function Connection:check_initialize(result, info)
  local version = result.protocolVersion
  if type(version) ~= "string" then
    return fail("malformed",
      { server = self.identifier, detail = "the initialize result names no protocol version" })
  end
  if not supported[version] then
    return fail("protocol_version",
      { server = self.identifier, version = version, supported = table.concat(client.SUPPORTED_VERSIONS, ", ") })
  end
  if not valid_session_id(info.session_id) then
    return fail("malformed", { server = self.identifier,
      detail = "the session id holds characters other than visible ASCII" })
  end
  return version
end

-- The handshake: initialize, check the revision, initialized.
-- @return session, info (of the initialize leg) | nil, message, err
function Connection:handshake(op)
  local params = {
    protocolVersion = client.PROTOCOL_VERSION,
    -- a capability only for a handler the host gave
    capabilities = self.transport.on_elicitation and { elicitation = {} } or {},
    clientInfo = { name = "mcpclient", version = core.version },
  }
  local result, info, err = self.transport:request(op, nil, "initialize", params)
  if not result then return errors.pass(err) end
  local version, message
  version, message, err = self:check_initialize(result, info)
  if not version then return nil, message, err end
  local session = {
    id = info.session_id,
    version = version,
    server_info = type(result.serverInfo) == "table" and result.serverInfo or {},
    capabilities = type(result.capabilities) == "table" and result.capabilities or {},
    instructions = type(result.instructions) == "string" and result.instructions or nil,
  }
  local ok
  ok, message, err = self.transport:notify(op, session, "notifications/initialized", {})
  if not ok then return nil, message, err end
  self.session = session
  return session, info
end

---------------------------------------------------------------------------
-- The era: found once per connection
---------------------------------------------------------------------------

-- Does this failure of the server/discover probe say the server is of the
-- 2025 era? A refusal with a 4xx status whose body is no recognised modern
-- error, or a JSON-RPC error that is none, says so. A credential refusal
-- (401, 403), a rate limit and every failure of the network, the budget or
-- the cancel hook says nothing about the era: it is returned as it is.
local NOT_ERA_EVIDENCE = { [401] = true, [403] = true, [407] = true, [408] = true, [429] = true }
local function legacy_evidence(err)
  if modern.recognised(err.code) then return false end
  if err.kind == "rpc_error" then return true end
  return err.kind == "http_status" and err.status >= 400 and err.status < 500 and not NOT_ERA_EVIDENCE[err.status]
end

local NO_VERSIONS = "the server/discover result names no supportedVersions"

-- The modern "session": no id, no handshake, only what discovery learned.
local function modern_session(version, found)
  return { modern = true, version = version, server_info = found.server_info, capabilities = found.capabilities,
    instructions = found.instructions, hint = found.hint }
end

-- server/discover with `version` in the envelope.
-- @return found (modern.discovery) , info | nil, message, err | false (not a discover result)
function Connection:probe(op, version)
  local result, info, err = self.transport:request(op, { modern = true, version = version }, "server/discover", {})
  if not result then return errors.pass(err) end
  local ok, message
  ok, message, err = modern.complete(result, self.identifier, "server/discover")
  if not ok then return nil, message, err end
  local found = modern.discovery(result)
  if not found then return false end
  return found, info
end

-- What the server names in common with what this client speaks: a modern
-- revision (discover again with it), a 2025 one (initialize, when allowed),
-- or a failure naming both sides.
function Connection:common_version(offered, err)
  local version = modern.common(modern.VERSIONS, offered)
  if version then return version, "modern" end
  if self.protocol == "auto" then
    version = modern.common(client.SUPPORTED_VERSIONS, offered)
    if version then return version, "legacy" end
  end
  return errors.pass(err)
end

-- The failure when the server's discovery names no revision of ours.
function Connection:no_common_version(version, offered)
  return fail("protocol_version", { server = self.identifier, requested = version,
    offered = table.concat(offered, ", "), offered_list = offered, supported = table.concat(modern.VERSIONS, ", ") })
end

-- Discovery: the modern probe, its one retry with a version the server
-- names, and the verdict. Returns session, info | nil, message, err |
-- false, err (or false, nil) when the answer says the server is of the
-- 2025 era.
function Connection:discover(op)
  local version = modern.VERSION
  for _ = 1, 2 do
    local found, info, err = self:probe(op, version)
    if found and modern.common({ version }, found.supported) then return modern_session(version, found), info end
    if found == false then return false, nil end
    local offered = found and found.supported or (err.kind == "protocol_version" and err.offered_list)
    if not offered then
      if legacy_evidence(err) then return false, err end
      return errors.pass(err)
    end
    if found then _, _, err = self:no_common_version(version, offered) end
    local next_version, era = self:common_version(offered, err)
    if not next_version or next_version == version then return errors.pass(err) end
    if era == "legacy" then return false, err end
    version = next_version
  end
  return fail("malformed", { server = self.identifier, detail = "server/discover named a revision, then refused it" })
end

-- Find the era and open it: the modern probe first (unless the 2025 era is
-- pinned), initialize when the server turned out to be of the 2025 era.
-- Once found, the era holds for the connection.
function Connection:establish(op)
  if self.protocol == client.PROTOCOL_VERSION then return self:handshake(op) end
  local session, info, err = self:discover(op)
  if session then
    self.session = session
    return session, info
  end
  if session == nil then return nil, info, err end
  if self.protocol == modern.VERSION then
    if info then return errors.pass(info) end
    return fail("malformed", { server = self.identifier, detail = NO_VERSIONS })
  end
  return self:handshake(op)
end

-- The era and its session, found once per connection even when several
-- tasks of gather need a session at once: the first establishes it, the
-- others wait for it and use its session (or, if it failed, try their own).
-- `open` is how: establish (find the era) by default, or handshake when the
-- era is known and only the 2025 session was lost.
-- → true [, info of the first leg when this call ran it] | nil, message, err
function Connection:ensure_session(op, open)
  engine.wait_until(function() return not self.handshaking end)
  if self.session then return true end
  self.handshaking = true
  local ok, session, message, err = pcall(open or self.establish, self, op)
  self.handshaking = nil
  if not ok then error(session, 0) end
  if not session then return nil, message, err end
  return true, message
end

-- A request inside an operation, establishing the era first when there is no session.
-- When the server refused the POST itself because the session is gone (404,
-- or 400 naming the session), it never ran the request: initialize again and
-- send it once more. Any other failure — above all one after the server
-- accepted the request — is returned as it is, never sent again.
function Connection:request(op, method, params, ordered)
  if not self.session then
    local ok, message, err = self:ensure_session(op)
    if not ok then return nil, message, err end
  end
  local session = self.session
  local result, info, err = self.transport:request(op, session, method, params, ordered)
  if result and session.modern then
    local ok, message
    ok, message, err = modern.complete(result, self.identifier, method)
    if not ok then return nil, message, err end
  end
  if not result and err.session_lost and not op.reinitialized then
    op.reinitialized = true
    if self.session == session then self.session = nil end  -- another task may have renewed it already
    local ok, message, handshake_err = self:ensure_session(op, self.handshake)
    if not ok then return nil, message, handshake_err end
    return self.transport:request(op, self.session, method, params, ordered)
  end
  return result, info, err
end

-- One page of the walk: its tool entries (objects only), or a failure once
-- the walk is over its bounds. `walk` counts { entries, bytes, containers }.
function Connection:take_page(walk, result, info)
  local page = result.tools
  if type(page) ~= "table" or not json.is_array(page) then
    return fail("malformed", { server = self.identifier, detail = 'the tool listing carries no "tools" array' })
  end
  walk.entries = walk.entries + #page
  walk.bytes = walk.bytes + (info.bytes or 0)
  walk.containers = walk.containers + (info.containers or 0)
  if walk.entries > client.MAX_LISTED_TOOLS or walk.bytes > client.MAX_LISTED_BYTES
    or walk.containers > client.MAX_LISTED_CONTAINERS then
    return fail("malformed", { server = self.identifier, detail = string.format(
      "the tool listing exceeds %d tools, %d bytes or %d objects and arrays across its pages",
      client.MAX_LISTED_TOOLS, client.MAX_LISTED_BYTES, client.MAX_LISTED_CONTAINERS) })
  end
  local entries = json.array {}
  for _, entry in ipairs(page) do
    if type(entry) == "table" and not json.is_array(entry) then entries[#entries + 1] = entry end
  end
  return entries
end

-- The freshness of a walk is that of its stalest page: the smallest ttlMs,
-- and "private" if any page is private.
local function merge_hint(walk, result)
  local hint = modern.cache_hint(result)
  local seen = walk.listing
  seen.ttl_ms = seen.ttl_ms and math.min(seen.ttl_ms, hint.ttl_ms) or hint.ttl_ms
  if seen.cache_scope ~= "private" then seen.cache_scope = hint.cache_scope or seen.cache_scope end
end

-- The forms a listing hands a tool's inputSchema and outputSchema in, and
-- how a page is read for each (rpc_classify's decoding). A kept listing of
-- the 2026-07-28 era is read as text: its rule is applied by keep_modern.
local DECODING = { tables = true, text = "text", kept = "kept" }

-- A listing's options: the operation's, and the schema form.
local function listing_options(opts)
  if type(opts) ~= "table" or opts.schemas == nil then return opts, "tables" end
  if not DECODING[opts.schemas] then error('schemas must be "tables", "text" or "kept"', 3) end
  local rest = {}
  for k, v in pairs(opts) do
    if k ~= "schemas" then rest[k] = v end
  end
  return rest, opts.schemas
end

--- The whole catalogue: every page, in order, within the walk's bounds.
-- @param opts { budget, cancel, on_progress, schemas = "tables" | "text" | "kept" }:
--   the form of each tool's inputSchema and outputSchema. "tables" (the
--   default): Lua tables, as the server sent them. "text": the compact JSON
--   text of what the server sent (key order kept), written in the pass that
--   reads the page and never built as Lua tables, several times cheaper on
--   a large catalogue; core.normalise_schema_text takes it and
--   core.json.decode(text, true) gives the table. "kept": as "text", with
--   each inputSchema replaced by what an import keeps of it under the
--   listing era's rule, judged in the same pass: the kept schema's text
--   (what the store keeps), or a table { refused = reason } when the rule
--   refuses it (an absent inputSchema stays absent).
-- @return array of tool tables (as the server sent them), listing
--   { era, schemas, ttl_ms, cache_scope } (era "modern" or "legacy"; schemas
--   the form given; ttl_ms and cache_scope the freshness hint of the
--   2026-07-28 era: how many milliseconds the listing may be taken as fresh,
--   nil in the 2025 era) | nil, message, err
function Connection:list_tools(opts)
  local rest, form = listing_options(opts)
  local tools = json.array {}
  local listing, message, err = self:walk_tools(self:open_operation(rest), form, function(page)
    table.move(page, 1, #page, #tools + 1, tools)
  end)
  if not listing then return nil, message, err end
  return tools, listing
end

--- The catalogue page by page, never held whole: fn(tools) is called with
--- each page's tools, in order, as list_tools would give them, and may
--- keep what it needs of them. For a catalogue too large to hold, or work
--- done tool by tool (an import's judging, a count): memory stays at about
--- one page. The walk's bounds and options are list_tools'; what fn raises
--- ends the walk and reaches the caller.
-- @return listing (as list_tools' second value) | nil, message, err
function Connection:each_tool_page(fn, opts)
  if type(fn) ~= "function" then error("each_tool_page: fn must be a function", 2) end
  local rest, form = listing_options(opts)
  return self:walk_tools(self:open_operation(rest), form, fn)
end

-- Keep each listed tool's schema for the headers its calls mirror. The map
-- is replaced whole when a walk ends, so a tool that left the listing is
-- forgotten; a schema is read only when its tool is called.
local function learn_headers(map, page)
  for _, tool in ipairs(page) do
    if type(tool.name) == "string" then map[tool.name] = { schema = tool.inputSchema } end
  end
end

-- A listed tool's markings, read once: { params } or { refused = reason }.
-- A schema listed as text is decoded here, for the tools that are called.
local function markings(entry)
  if entry and entry.schema ~= nil then
    local schema = entry.schema
    if type(schema) == "string" then schema = json.decode(schema, true) end
    entry.params, entry.refused = modern.header_params(schema)
    entry.schema = nil
  end
  return entry
end

-- In the 2026-07-28 era the kept form is the modern rule's, applied here
-- to the text the page was read in (the C decoder judges by the 2025 rule).
local function keep_modern(page)
  for _, tool in ipairs(page) do
    if tool.inputSchema ~= nil then
      local kept, why = modern.normalise_schema_text(tool.inputSchema)
      tool.inputSchema = kept or { refused = why }
    end
  end
end

-- How a page of a walk in `form` is read in the session's era.
local function decoding_of(form, modern_era)
  if form == "kept" and modern_era then return "text" end
  return DECODING[form]
end

-- One page read with `decoding`: its entries, after the era's bookkeeping
-- (the freshness hint, the header markings, the modern kept rule).
-- @return entries | nil, message, err
function Connection:read_page(walk, form, decoding, result, info)
  local page, message, err = self:take_page(walk, result, info)
  if not page or not self.session.modern then return page, message, err end
  merge_hint(walk, result)
  learn_headers(walk.headers, page)
  if form == "kept" then
    if decoding ~= "text" then -- read by the 2025 rule: the session's era changed under the walk
      return fail("malformed",
        { server = self.identifier, detail = "the server changed protocol era during the tool listing" })
    end
    keep_modern(page)
  end
  return page
end

-- Walk every page, handing each to on_page(entries), its schemas in
-- `form` (see list_tools). The era is settled first: it decides how a kept
-- listing is read.
-- @return listing | nil, message, err
function Connection:walk_tools(op, form, on_page)
  local walk = { entries = 0, bytes = 0, containers = 0, listing = {}, headers = {} }
  local params = {}
  if not self.session then
    local ok, message, err = self:ensure_session(op)
    if not ok then return nil, message, err end
  end
  for _ = 1, client.MAX_PAGES do
    local decoding = decoding_of(form, self.session and self.session.modern)
    local result, info, err = self:request(op, "tools/list", params, decoding)
    if not result then return errors.pass(err) end
    local page, message
    page, message, err = self:read_page(walk, form, decoding, result, info)
    if not page then return nil, message, err end
    on_page(page)
    local cursor = result.nextCursor
    if type(cursor) ~= "string" or cursor == "" then
      self:contact(info.duration_ms)
      walk.listing.era = self.session.modern and "modern" or "legacy"
      walk.listing.schemas = form
      if self.session.modern then self.mirrored = walk.headers end
      return walk.listing
    end
    params = { cursor = cursor }
  end
  return fail("malformed",
    { server = self.identifier, detail = "the tool listing did not end within " .. client.MAX_PAGES .. " pages" })
end

-- What a model reads of a tools/call result: the text blocks, flattened,
-- with a note naming the blocks that were dropped.
local function outcome_of(result, latency_ms)
  local flat, note = core.flatten(result.content)
  local is_error = result.isError == true
  local answer
  if is_error then
    answer = "The remote tool reported an error: " .. (flat == "" and "no detail given." or flat)
  else
    answer = flat == "" and "The remote tool returned no textual content." or flat
  end
  return {
    text = note and (note .. "\n" .. answer) or answer,
    is_error = is_error,
    note = note,
    content = result.content,
    structured = result.structuredContent,
    latency_ms = latency_ms,
  }
end

-- The parameters a tool mirrors, as a comparable text ("" when none).
local function mirror_key(entry)
  entry = markings(entry)
  if not entry then return "" end
  if entry.refused then return "!" .. entry.refused end
  local parts = {}
  for i, p in ipairs(entry.params or {}) do parts[i] = p.name .. "=" .. table.concat(p.path, "\0") end
  return table.concat(parts, "\n")
end

-- One tools/call. In the 2026-07-28 era the arguments its listed schema
-- marks with x-mcp-header travel in Mcp-Param-<Name> headers too; a tool
-- whose markings were refused, or a value no header can carry, fails here
-- with nothing sent.
function Connection:send_call(op, params)
  if not self.session then
    local ok, message, err = self:ensure_session(op)
    if not ok then return nil, message, err end
  end
  op.mirrored = nil
  if self.session.modern then
    local marked = markings(self.mirrored[params.name])
    local lines, why
    if marked and marked.refused then
      why = "the server's definition of the tool is refused: " .. marked.refused
    else
      lines, why = modern.param_headers({}, marked and marked.params, params.arguments)
    end
    if not lines then
      return fail("malformed", { server = self.identifier, detail = "the tool call was not sent: " .. why })
    end
    op.mirrored = lines
  end
  return self:request(op, "tools/call", params)
end

-- Refused with HeaderMismatch (-32020): the server checked the mirrored
-- headers against the body before acting and found them wrong or missing,
-- most often because this connection has not listed the tool (or its schema
-- changed). List once more; true when the tool's markings changed, so the
-- call may go out once more. Otherwise the refusal stands.
function Connection:relist_for(op, err, name)
  if op.relisted or err.kind ~= "http_status" or err.code ~= modern.HEADER_MISMATCH
    or not (self.session and self.session.modern) then
    return false
  end
  op.relisted = true
  local before = mirror_key(self.mirrored[name])
  if not self:walk_tools(op, "text", function() end) then return false end
  return mirror_key(self.mirrored[name]) ~= before
end

--- Call a tool by its name on the server.
-- @param name the server's name for the tool
-- @param arguments a table (encoded as a JSON object; nil means {})
-- @param opts { budget = seconds, cancel = function -> truthy to stop,
--   on_progress = function(progress, total, message) (asks the server for progress) }
-- In the 2026-07-28 era the arguments the tool's schema marks with
-- x-mcp-header also travel in Mcp-Param-<Name> headers. The markings come
-- from this connection's last list_tools; called before any listing, the
-- call goes without them, and a server that insists refuses it (-32020)
-- before acting: then the tools are listed once and the call is sent once
-- more if that tool's markings turned out different.
-- @return outcome { text, is_error, note, content, structured, latency_ms } | nil, message, err
function Connection:call_tool(name, arguments, opts)
  if type(name) ~= "string" then error("call_tool: name must be a string", 2) end
  if arguments ~= nil and (type(arguments) ~= "table" or json.is_array(arguments)) then
    error("call_tool: arguments must be a table of named arguments", 2)
  end
  local op = self:open_operation(opts)
  local params = { name = name, arguments = arguments or {} }
  local result, info, err = self:send_call(op, params)
  if not result and self:relist_for(op, err, name) then result, info, err = self:send_call(op, params) end
  if not result then return errors.pass(err) end
  self:contact(info.duration_ms)
  return outcome_of(result, info.duration_ms)
end

-- The 2026-07-28 era has no ping: server/discover is the cheapest request a
-- modern server must answer, and it refreshes what the connection knows.
function Connection:rediscover(op)
  local result, info, err = self:request(op, "server/discover", {})
  if not result then return errors.pass(err) end
  local found = modern.discovery(result)
  if not found then
    return fail("malformed", { server = self.identifier, detail = NO_VERSIONS })
  end
  self.session = modern_session(self.session.version, found)
  return true, info
end

--- Is the server there? Finding the era if it is not known yet, else an MCP
--- ping (2025 era) or server/discover (2026-07-28 era).
-- @return report { reachable, latency_ms, era ("modern" | "legacy"), protocol_version, server_name,
--   server_version } | nil, message, err
function Connection:ping(opts)
  local op = self:open_operation(opts)
  local answered, info, err
  if not self.session then answered, info, err = self:ensure_session(op) end
  if self.session and not info then
    -- the 2026-07-28 revision has no ping: discovery answers instead
    if self.session.modern then
      answered, info, err = self:rediscover(op)
    else
      answered, info, err = self:request(op, "ping", {})
    end
  end
  if not answered then return errors.pass(err) end
  self:contact(info.duration_ms)
  local server = self.session.server_info
  return {
    reachable = true,
    latency_ms = info.duration_ms,
    era = self.session.modern and "modern" or "legacy",
    protocol_version = core.label(self.session.version),
    server_name = core.label(server.name),
    server_version = core.label(server.version),
  }
end

--- What the handshake (or discovery) learned: { era, protocol_version,
--- server_info, capabilities, instructions }, or nil before the first operation.
function Connection:server()
  local s = self.session
  if not s then return nil end
  return { era = s.modern and "modern" or "legacy", protocol_version = s.version, server_info = s.server_info,
    capabilities = s.capabilities, instructions = s.instructions }
end

--- End the session (DELETE, bounded by 2 s) and release the connection.
-- Idempotent; also runs from <close> and the garbage collector.
function Connection:close()
  if self.closed then return true end
  self.closed = true
  if self.session and self.session.id then
    local op = { deadline = Deadline.open(client.CLOSE_BUDGET, self.clock) }
    pcall(self.transport.delete, self.transport, op, self.session)
  end
  self.session = nil
  self.transport:close()
  return true
end

Connection.__close = Connection.close
Connection.__gc = Connection.close

function Connection:__tostring()
  return string.format('mcp connection "%s" (%s)%s', self.identifier, self.url, self.closed and " closed" or "")
end

client.Connection = Connection
return client
