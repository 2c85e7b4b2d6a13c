--- A connection to one MCP server: the operations a caller uses.
--
-- A connection holds one protocol session (session.lua: ids, the era, the
-- opening, server requests, progress, cancellation) over one channel (for a
-- URL, channel/http.lua), and offers the documented operations: list_tools,
-- each_tool_page, call_tool, ping, server, close. Each operation opens one
-- deadline that every leg of it spends — a re-opening included — and records
-- at most one health contact, when it completes. A failure arrives as `nil,
-- message, err` and is handed to the caller unchanged. Everything else here
-- is local.
local answers = require "mcpclient.answers"
local command = require "mcpclient.command"
local engine = require "mcpclient.engine"
local core = require "mcpclient.core"
local credentials = require "mcpclient.credentials"
local Deadline = require "mcpclient.deadline"
local era = require "mcpclient.era"
local errors = require "mcpclient.errors"
local hostgate = require "mcpclient.hostgate"
local proxy = require "mcpclient.proxy"
local http = require "mcpclient.channel.http"
local log = require "mcpclient.log"
local offers = require "mcpclient.offers"
local session = require "mcpclient.session"
local skills = require "mcpclient.skills"
local suggest = require "mcpclient.suggest"
local task = require "mcpclient.task"
local stdio = require "mcpclient.channel.stdio"
local trace = require "mcpclient.trace"
local settings = require "mcpclient.settings"

local json = core.json
local fail = errors.fail

local client = {}

client.PROTOCOL_VERSION = session.PROTOCOL_VERSION
client.SUPPORTED_VERSIONS = session.SUPPORTED_VERSIONS
-- The `protocol` option: find the era (era.negotiate), or pin the revision of one of them.
client.PROTOCOLS = { auto = true }
for _, revision in ipairs(era.revisions()) do client.PROTOCOLS[revision] = true end
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

local Connection = {}
Connection.__index = Connection

-- What mcp.engine.step does for a connection after its turn of the engine:
-- what the server wrote meanwhile and nothing has read (over stdio: its
-- lines, its stderr) is handed out now (Session:drain), as during an
-- operation, so change notices, log notices and on_notification reach the
-- host between operations. A handler that raises is told through the log.
-- With `until_s` (seconds on core.now()), a channel that only hears the
-- server while it holds a stream open (a 2025 session's GET stream) holds
-- it until then when anything listens for what comes (on_log,
-- on_notification, on_change, the cache, a subscription).
local function between_operations(self, until_s)
  if self.closed then return end
  local op = { deadline = Deadline.open(1, self.hooks.clock) }
  local own = self.session
  if until_s and (own.on_log or own.host.on_notification or self.hooks.on_change or self.cache
      or next(self.subscribed)) then
    op.hold_until = until_s
  end
  local ok, why = pcall(own.drain, own, op)
  if not ok then self.hooks.warn("a handler raised while notices were read: " .. core.clip(tostring(why))) end
end

---------------------------------------------------------------------------
-- Options
---------------------------------------------------------------------------

-- Every key connect() accepts, with the type it must have.
local option_types = {
  url = "string", identifier = "string", name = "string", auth = "table", oauth = "table", resolver = "function",
  budget = "number", connect_timeout = "number", health = "recorder", host_gate = "function", on_log = "function",
  refuse_private = "boolean", ca_file = "string", client_cert = "string", client_key = "string", proxy = "proxy",
  proxy_auth = "table",
  transport = "table", channel = "table", clock = "function", log = "function", trace = "boolean", protocol = "string",
  on_elicitation = "function", max_input_rounds = "number", tasks = "boolean", on_change = "function",
  on_sampling = "function", roots = "table",
  cache = "boolean", listen = "boolean", command = "table", env = "table",
  cwd = "string", validate_output = "boolean",
  log_level = "string", headers = "table", client_info = "table", on_stderr = "function", on_notification = "function",
}

-- Options that mean something only for a server reached by URL; with
-- `command` they raise rather than be silently ignored.
local HTTP_ONLY = { "auth", "oauth", "host_gate", "refuse_private", "ca_file", "client_cert", "client_key", "proxy",
  "proxy_auth", "connect_timeout", "channel" }

local function check_type(key, value, expected)
  if expected == "recorder" then
    local ok = type(value) == "function" or (type(value) == "table" and type(value.record) == "function")
    if not ok then
      error("health must be a recorder (a function or a table with :record), or mcp.health.discard", 4)
    end
  elseif expected == "proxy" then
    if value ~= false and type(value) ~= "string" then
      error("proxy must be a proxy URL (http://, https:// or socks5h://) or false, not a " .. type(value), 4)
    end
    local ok, why = true, nil
    if value ~= false then ok, why = proxy.parse(value) end
    if not ok then error("connect: proxy is not usable: " .. why, 4) end
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
    if not expected then error(suggest.unknown_option("connect", key, option_types), 3) end
    if key == "command" and type(value) == "string" then
      -- never split on blanks: the argv the server gets is the one written
      error('connect: command must be an argv table, e.g. { "npx", "-y", "…" }, never a string', 3)
    end
    check_type(key, value, expected)
  end
  if options.url ~= nil and options.command ~= nil then error("connect: give either url or command, not both", 3) end
  if options.url == nil and options.command == nil then error("connect: url or command is required", 3) end
  if options.command == nil and (options.env ~= nil or options.cwd ~= nil) then
    error("connect: env and cwd go with command (a server started over stdio)", 3)
  end
  if options.identifier == nil then error("connect: identifier is required", 3) end
  if options.health == nil then
    error("connect: health is required (a recorder, or mcp.health.discard to say none)", 3)
  end
  if options.protocol ~= nil and not client.PROTOCOLS[options.protocol] then
    local revisions = era.revisions()
    error(string.format('connect: protocol must be "auto", "%s" or "%s"',
      table.concat(revisions, '", "', 1, #revisions - 1), revisions[#revisions]), 3)
  end
  local rounds = options.max_input_rounds
  if rounds ~= nil and (math.type(rounds) ~= "integer" or rounds < 0 or rounds > 64) then
    error("connect: max_input_rounds must be an integer from 0 to 64", 3)
  end
  if not client.valid_identifier(options.identifier) then
    error("connect: identifier must be " .. client.IDENTIFIER_RULE, 3)
  end
  local unsettled = settings.problem(options)
  if unsettled then error("connect: " .. unsettled, 3) end
  if options.command then
    for _, key in ipairs(HTTP_ONLY) do
      if options[key] ~= nil then error(string.format("connect: %s is for a server reached by url", key), 3) end
    end
    local problem = command.problem(options.command, options.env, options.cwd)
    if problem then error("connect: " .. problem, 3) end
    return nil
  end
  local target, why = hostgate.parse_url(options.url)
  if not target then error(string.format("connect: url is not usable: %s", why), 3) end
  for _, method in ipairs(options.channel and http.CONTRACT or {}) do
    if type(options.channel[method]) ~= "function" then
      error(string.format("connect: channel must offer the channel contract (it lacks %s)", method), 3)
    end
  end
  if options.channel and options.transport then error("connect: give either channel or transport, not both", 3) end
  return target
end

---------------------------------------------------------------------------
-- Connecting
---------------------------------------------------------------------------

-- The revisions a connection may name to a server that refuses its own:
-- those of every era, newest first, or of the pinned era alone when it is
-- opened by discovery (a pinned handshake may still be told of the others).
local function versions_for(protocol)
  local pinned = era.speaking(protocol)
  local list = {}
  for _, e in ipairs(pinned and pinned.discovered and { pinned } or era.ERAS) do
    for _, v in ipairs(e.versions) do list[#list + 1] = v end
  end
  return list
end

-- The HTTP channel of a connection; `checked` holds the options connect()
-- has already validated. The config is also what the OAuth provider reads.
local function http_channel(options, checked)
  -- The leg exists before the connection is given its finalizer: Lua runs
  -- finalizers in the reverse order objects were marked, so a collected
  -- connection still finds its leg open and can end its session (DELETE).
  local pool = not options.transport and core.http_pool() or nil
  return http.new {
    identifier = options.identifier,
    url = options.url,
    target = checked.target,
    leg = options.transport or core.http_leg(pool),
    pool = pool,
    -- more legs on the same pool: several requests in flight at once
    spawn_leg = pool and function() return core.http_leg(pool) end or nil,
    auth = checked.auth,
    resolver = options.resolver,
    host_gate = options.host_gate or hostgate.default,
    refuse_private = options.refuse_private or false,
    proxy = options.proxy,  -- nil: the environment decides (mcpclient.proxy)
    proxy_auth = checked.proxy_auth,
    connect_timeout = checked.connect_timeout,
    tls = { ca_file = options.ca_file, client_cert = options.client_cert, client_key = options.client_key },
    clock = checked.clock,
    versions = versions_for(options.protocol or "auto"),
    -- the host's own header lines, on every request to the server (never on OAuth's)
    headers = settings.header_lines(options.headers),
  }
end

-- The stdio channel of a connection: the channel owns the child. The argv
-- and env are copied, so the caller's tables may change afterwards.
local function stdio_channel(options, clock)
  local argv = table.move(options.command, 1, #options.command, 1, {})
  local env = {}
  for k, v in pairs(options.env or {}) do env[k] = v end
  return stdio.new { identifier = options.identifier, command = argv, env = env, cwd = options.cwd,
    resolver = options.resolver, log = options.log or log.default, clock = clock,
    spawn = options.transport and options.transport.spawn or nil, on_stderr = options.on_stderr }, argv
end

--- Open a connection. No network traffic happens (and no process is
-- started) until the first operation. With `command` (an argv list, never a
-- shell line) the server is a local program spoken to over stdio, with
-- `env` (NAME = value or "env:VAR") and `cwd`; `url` and `command` are
-- exclusive. Misuse (unknown keys, wrong types, a missing required option) raises.
function client.connect(options)
  local over_stdio = type(options) == "table" and options.command ~= nil
  local checked, channel, argv
  if over_stdio then
    validate(options)
    checked = { clock = options.clock or core.now }
    channel, argv = stdio_channel(options, checked.clock)
  else
    checked = { target = validate(options), auth = credentials.validate(options.auth),
      clock = options.clock or core.now,
      connect_timeout = positive_seconds("connect_timeout", options.connect_timeout or client.DEFAULT_CONNECT_TIMEOUT) }
    if options.oauth and options.auth then error("connect: give either auth or oauth, not both", 2) end
    if options.proxy_auth ~= nil then
      if options.proxy == false then error("connect: proxy_auth goes with a proxy, and proxy is false", 2) end
      checked.proxy_auth = proxy.validate_auth(options.proxy_auth, 2)
    end
    channel = options.channel or http_channel(options, checked)
  end
  local health = options.health
  local cache = options.cache and {} or nil
  if trace.enabled(options.trace) then trace.wrap(channel, options.identifier, checked.clock) end
  if options.oauth then
    if options.channel then error("connect: oauth is for the HTTP channel, not an injected one", 2) end
    channel.oauth = require("mcpclient.oauth").provider(options.oauth, channel.config, 2)
  end
  local subscribed = {}  -- uri -> true, the resources this connection subscribed to
  local self
  self = setmetatable({
    identifier = options.identifier,
    name = options.name or options.identifier,
    url = options.url,
    command = argv,  -- over stdio: the server's argv
    budget = positive_seconds("budget", options.budget or client.DEFAULT_BUDGET),
    -- the host's functions, kept apart so none reads as a method of the connection
    hooks = {
      clock = checked.clock,
      record = type(health) == "function" and health or function(...) return health:record(...) end,
      log = options.log or log.default,
      on_change = options.on_change,
    },
    session = session.new(channel, { identifier = options.identifier, protocol = options.protocol or "auto",
      on_elicitation = options.on_elicitation, max_input_rounds = options.max_input_rounds,
      -- roots and sampling: declared only when given; the roots checked (file:// URIs) before anything is sent
      on_sampling = options.on_sampling, roots = options.roots and answers.roots(options.roots, "connect", 2),
      on_log = options.on_log,
      on_notice = function(kind, uri) self.hooks.notice(kind, uri) end,
      on_notification = options.on_notification,
      warn = function(text) self.hooks.warn(text) end,
      settings = { log_level = options.log_level, client_info = settings.client_info(options.client_info) },
      -- Notices are listened for while the host has a handler, a cache or a subscription, unless
      -- the host said listen = false (then only the notices on the response streams are seen):
      -- handed over as data, read by the session as it is when it asks
      listening = { off = options.listen == false, always = options.on_change ~= nil or cache ~= nil,
        subscribed = subscribed },
      -- the HTTP channel over a pool carries several requests at once (an injected one says nothing)
      -- (a child's pipes carry one request at a time here)
      concurrent = not over_stdio and options.channel == nil and options.transport == nil,
      -- a child's pipes are one long-lived line both ways: a listen stands open on them
      standing = over_stdio }),
    closed = false,
    mirrored = {},  -- tool name -> its x-mcp-header markings, from the last modern listing
    tasks = options.tasks == true,  -- the host asked for tasks on every call that may be one
    task_support = {},  -- tool name -> its execution.taskSupport, from the last listing
    listed = false,     -- a listing has completed (task_support is known)
    validate_output = options.validate_output ~= false,  -- check structuredContent against outputSchema
    output_schemas = {},  -- tool name -> { schema, text }, its outputSchema from the last listing
    cache = cache,  -- listing name -> { items, listing, expires }, with the cache option
    subscribed = subscribed, -- uri -> true, the resources this connection subscribed to
  }, Connection)
  -- A change notice drops the listings it makes stale, then reaches the host's
  -- handler; a handler that raises is logged, never fails the operation that
  -- was reading the stream.
  self.hooks.warn = function(text)
    pcall(self.hooks.log, "warning", string.format('MCP server "%s": %s', self.identifier, text))
  end
  -- mcp.engine.step hands what arrived between operations to this connection
  engine.after_step(self, between_operations)
  self.hooks.notice = function(kind, uri)
    offers.notice(self.cache, kind)
    if not self.hooks.on_change then return end
    local ok, why = pcall(self.hooks.on_change, kind, uri)
    if not ok then
      pcall(self.hooks.log, "warning", string.format('The on_change handler of "%s" raised: %s', self.identifier,
        core.clip(tostring(why))))
    end
  end
  return self
end

---------------------------------------------------------------------------
-- Operations: one deadline each
---------------------------------------------------------------------------

local op_keys = { budget = "number", cancel = "function", on_progress = "function", on_input = "function",
  task = "boolean", detach = "boolean", on_task = "function" }

local function open_operation(self, opts)
  if self.closed then error("the connection is closed", 3) end
  -- as_task: whether a tools/call goes as a task (send_call decides; a field from the start, so
  -- setting it does not grow the table)
  if opts == nil then return { deadline = Deadline.open(self.budget, self.hooks.clock), as_task = false } end
  if type(opts) ~= "table" then error("options must be a table", 3) end
  for key, value in pairs(opts) do
    local expected = op_keys[key]
    if not expected then error(suggest.unknown_option(nil, key, op_keys), 3) end
    if type(value) ~= expected then error(string.format("%s must be a %s", key, expected), 3) end
  end
  local budget = opts.budget and positive_seconds("budget", opts.budget) or self.budget
  return { deadline = Deadline.open(budget, self.hooks.clock), cancel = opts.cancel, on_progress = opts.on_progress,
    on_input = opts.on_input, task = opts.task, detach = opts.detach, on_task = opts.on_task, as_task = false }
end

-- One health contact (latency in whole milliseconds); a recorder that fails
-- never fails the operation.
local function contact(self, latency_ms)
  local ok, why = pcall(self.hooks.record, self.identifier, latency_ms)
  if not ok then
    pcall(self.hooks.log, "warning", string.format('An MCP liveness observation for "%s" could not be stored: %s',
      self.identifier, tostring(why)))
  end
end

---------------------------------------------------------------------------
-- Listing tools
---------------------------------------------------------------------------

-- One page of the walk: its tool entries (objects only), or a failure once
-- the walk is over its bounds. `walk` counts { entries, bytes, containers }.
local function take_page(self, walk, reply)
  local page = reply.result.tools
  if type(page) ~= "table" or not json.is_array(page) then
    return fail("malformed", { server = self.identifier, detail = 'the tool listing carries no "tools" array' })
  end
  walk.entries = walk.entries + #page
  walk.bytes = walk.bytes + (reply.bytes or 0)
  walk.containers = walk.containers + (reply.containers or 0)
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
local function merge_hint(walk, hint)
  local seen = walk.listing
  seen.ttl_ms = seen.ttl_ms and math.min(seen.ttl_ms, hint.ttl_ms) or hint.ttl_ms
  if seen.cache_scope ~= "private" then seen.cache_scope = hint.cache_scope or seen.cache_scope end
end

-- The forms a listing hands a tool's inputSchema and outputSchema in, and
-- how a page is read for each (rpc_classify's decoding). Tables are read
-- as text too and handed over lazy (core.lazy_schemas): each schema is
-- built as a table only when it is first read. A kept listing of the
-- 2026-07-28 era is read as text: its rule is applied by the era's keep_page.
local DECODING = { tables = "text", text = "text", kept = "kept" }

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
--   default): Lua tables, as the server sent them (key order recorded),
--   each built on its first read (index, pairs, #, json.encode,
--   core.normalise_schema, which judges an unread one from its text):
--   until then it is an empty table holding the text, so raw access
--   (next, rawget) sees nothing before a first read. "text": the compact JSON
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
local walk_tools

function Connection:list_tools(opts)
  local rest, form = listing_options(opts)
  local tools = json.array {}
  local listing, message, err = walk_tools(self, open_operation(self, rest), form, function(page)
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
  return walk_tools(self, open_operation(self, rest), form, fn)
end

-- Keep each listed tool's schema for the headers its calls mirror. The map
-- is replaced whole when a walk ends, so a tool that left the listing is
-- forgotten; a schema is read only when its tool is called.
local function learn_headers(map, page)
  for _, tool in ipairs(page) do
    if type(tool.name) == "string" then map[tool.name] = { schema = tool.inputSchema } end
  end
end

-- A listed tool's markings under era `e`, read once: { params } or { refused = reason }.
-- A schema listed as text is decoded here, for the tools that are called.
local function markings(entry, e)
  if entry and entry.schema ~= nil then
    local schema = entry.schema
    if type(schema) == "string" then schema = json.decode(schema, true) end
    entry.params, entry.refused = e.header_params(schema)
    entry.schema = nil
  end
  return entry
end

-- Keep each listed tool's execution.taskSupport (forbidden, optional,
-- required): whether a call may, or must, run as a task.
local SUPPORT = { forbidden = true, optional = true, required = true }
local function learn_task_support(map, page)
  for _, tool in ipairs(page) do
    local execution = tool.execution
    if type(tool.name) == "string" and type(execution) == "table" and SUPPORT[execution.taskSupport] then
      map[tool.name] = execution.taskSupport
    end
  end
end

-- Keep each listed tool's outputSchema as the listing gave it: { schema, text }, text when
-- the form was "text" or "kept" (the schema is then JSON text, decoded only when the tool's
-- result is first checked); with "tables" it is the value itself (a string there is a string).
local function learn_output_schemas(map, page, form)
  for _, tool in ipairs(page) do
    if type(tool.name) == "string" and tool.outputSchema ~= nil then
      map[tool.name] = { schema = tool.outputSchema, text = form ~= "tables" }
    end
  end
end

-- A call's outcome checked against the tool's outputSchema (core.validate_output): the one the
-- caller handed (`given`, { schema }) or else the one this connection's listing gave; passed on
-- as it is when it is a failure, an error result, or the tool has no schema (or validate_output
-- = false); else a missing or mismatched structuredContent is invalid_output.
local function checked_output(self, name, given, outcome, ...)
  local kept = given or self.output_schemas[name]
  if not (self.validate_output and outcome) or outcome.is_error or kept == nil then return outcome, ... end
  if kept.text then -- the decoder's own text: it decodes; kept decoded for the next call
    kept.schema, kept.text = json.decode(kept.schema, true), false
  end
  local schema = kept.schema
  local fields = { server = self.identifier, tool = name, path = "$" }
  if outcome.structured == nil then
    fields.detail = "the result carries no structuredContent, and the tool has an outputSchema"
    return fail("invalid_output", fields)
  end
  local ok, path, reason, unchecked = core.validate_output(schema, outcome.structured)
  if ok then return outcome end
  fields.path, fields.detail, fields.unchecked = path, reason, unchecked
  return fail("invalid_output", fields)
end

-- call_tool's output_schema taken out of its options (no other operation has it): a table or a
-- boolean is the schema, a string its JSON text, decoded here, so a schema that cannot be one
-- raises before anything is sent. → the other options, { schema } | nil
local function given_output_schema(opts)
  if type(opts) ~= "table" or opts.output_schema == nil then return opts, nil end
  local schema = opts.output_schema
  if type(schema) == "string" then
    local decoded, reason = json.decode(schema, true)
    if decoded == nil then error("call_tool: output_schema is not JSON text: " .. tostring(reason), 3) end
    schema = decoded
  end
  if type(schema) ~= "boolean" and not json.is_object(schema) then
    error("call_tool: output_schema must be a JSON Schema: an object, a boolean, or its JSON text", 3)
  end
  local rest = {}
  for key, value in pairs(opts) do
    if key ~= "output_schema" then rest[key] = value end
  end
  return rest, { schema = schema }
end

-- One page read with `decoding`: its entries, after the era's bookkeeping
-- (the freshness hint, the header markings, the era's kept rule on a page
-- read as text: e.keep_page).
-- @return entries | nil, message, err
local function read_page(self, walk, form, decoding, reply)
  local page, message, err = take_page(self, walk, reply)
  if not page then return nil, message, err end
  local e = era.of(self.session.state)
  local hint = e.freshness(reply.result)
  if hint then merge_hint(walk, hint) end
  if e.mirrors then learn_headers(walk.headers, page) end
  local kept, why = e.keep_page(page, form, decoding)
  if not kept then return fail("malformed", { server = self.identifier, detail = why }) end
  return page
end

-- Walk every page, handing each to on_page(entries), its schemas in
-- `form` (see list_tools). The era is settled first: it decides how a kept
-- listing is read.
-- @return listing | nil, message, err
function walk_tools(self, op, form, on_page)
  local walk = { entries = 0, bytes = 0, containers = 0, listing = {}, headers = {}, task_support = {},
    output_schemas = {} }
  local params = {}
  local ok, message, err = self.session:open(op)
  if not ok then return nil, message, err end
  for _ = 1, client.MAX_PAGES do
    local state = self.session.state
    local decoding = state and era.of(state).listing_decoding(form) or DECODING[form]
    local reply, page
    reply, message, err = self.session:request(op, "tools/list", params, { decoding = decoding })
    if not reply then return nil, message, err end
    page, message, err = read_page(self, walk, form, decoding, reply)
    if not page then return nil, message, err end
    if form == "tables" then core.lazy_schemas(page) end
    learn_task_support(walk.task_support, page)
    learn_output_schemas(walk.output_schemas, page, form)
    on_page(page)
    local cursor = reply.result.nextCursor
    if type(cursor) ~= "string" or cursor == "" then
      contact(self, reply.duration_ms)
      local e = era.of(self.session.state)
      walk.listing.era = e.name
      walk.listing.schemas = form
      if e.mirrors then self.mirrored = walk.headers end
      self.task_support = walk.task_support
      self.output_schemas = walk.output_schemas
      self.listed = true
      return walk.listing
    end
    params = { cursor = cursor }
  end
  return fail("malformed",
    { server = self.identifier, detail = "the tool listing did not end within " .. client.MAX_PAGES .. " pages" })
end

-- What a model reads of a tools/call result: the text blocks, flattened,
-- with a note naming the blocks that were dropped, made inert (controls and
-- escape sequences out, lines kept) and bounded. `content` and `structured`
-- stay the server's own.
local function outcome_of(result, latency_ms)
  local flat, note = core.flatten(result.content)
  -- a link or an embedded resource is a block flatten drops, and notes: content of text blocks
  -- alone (a note of nil) names no resource
  local links = note and offers.links_note(result.content)
  if links then note = note and (note .. " " .. links) or links end
  local is_error = result.isError == true
  local answer
  if is_error then
    answer = "The remote tool reported an error: " .. (flat == "" and "no detail given." or flat)
  else
    answer = flat == "" and "The remote tool returned no textual content." or flat
  end
  return {
    text = core.inert(note and (note .. "\n" .. answer) or answer),
    is_error = is_error,
    note = note,
    content = result.content,
    structured = result.structuredContent,
    latency_ms = latency_ms,
  }
end

-- The parameters a tool mirrors, as a comparable text ("" when none).
local function mirror_key(entry, e)
  entry = markings(entry, e)
  if not entry then return "" end
  if entry.refused then return "!" .. entry.refused end
  local parts = {}
  for i, p in ipairs(entry.params or {}) do parts[i] = p.name .. "=" .. table.concat(p.path, "\0") end
  return table.concat(parts, "\n")
end

-- One tools/call. In the 2026-07-28 era the arguments its listed schema
-- marks with x-mcp-header travel in Mcp-Param-<Name> headers too (the
-- channel mirrors them); a tool whose markings were refused fails here with
-- nothing sent.
-- Whether this call goes as a task: only when the host asked (tasks = true
-- on connect, or task = true on the call); then a tool listed as "required"
-- always, one listed "optional" (or not listed) when the call asks, one
-- listed "forbidden" never. A 2025 server must offer tasks for tools/call,
-- or the call is not augmented.
local function as_task(self, op, name)
  if not (self.tasks or op.task) then return false end
  local support = self.task_support[name]
  if support == "forbidden" then return false end
  if support ~= "required" and not op.task then return false end
  local state = self.session.state
  return era.of(state).task_offered(state.capabilities)
end

local function send_call(self, op, params)
  if not self.session.state then
    -- the one opening of the operation: the session's request finds the era open
    local ok, message, err = self.session:open(op)
    if not ok then return nil, message, err end
  end
  local how = nil  -- what the request carries besides its params, made only when there is something
  local e = self.session.state.era
  if (self.tasks or op.task) and e.task_listed_first and self.task_support[params.name] == nil
    and not self.listed then
    -- a task is asked for only for a tool the listing allows: learn it once
    walk_tools(self, op, "text", function() end)
  end
  op.as_task = (self.tasks or op.task) and as_task(self, op, params.name) or false
  if e.mirrors then
    local marked = markings(self.mirrored[params.name], e)
    if marked and marked.refused then
      return fail("malformed", { server = self.identifier,
        detail = "the tool call was not sent: the server's definition of the tool is refused: " .. marked.refused })
    end
    how = { mirror = marked and marked.params }
  end
  if op.as_task then
    how = how or {}
    params = e.ask_task(params, how)
  end
  return self.session:request(op, "tools/call", params, how)
end

-- Refused with HeaderMismatch (-32020): the server checked the mirrored
-- headers against the body before acting and found them wrong or missing,
-- most often because this connection has not listed the tool (or its schema
-- changed). List once more; true when the tool's markings changed, so the
-- call may go out once more. Otherwise the refusal stands.
local function relist_for(self, op, err, name)
  local state = self.session.state
  local e = state and era.of(state)
  if op.relisted or err.kind ~= "http_status" or err.rpc_code ~= era.HEADER_MISMATCH or not (e and e.mirrors) then
    return false
  end
  op.relisted = true
  local before = mirror_key(self.mirrored[name], e)
  if not walk_tools(self, op, "text", function() end) then return false end
  return mirror_key(self.mirrored[name], era.of(self.session.state)) ~= before
end

-- What a task's follower needs of its connection (no method of it).
local function task_host(self)
  local host = self.task_host_table
  if host then return host end
  host = {
    identifier = self.identifier,
    session = self.session,
    wall = os.time,
    outcome_of = outcome_of,
    contact = function(latency_ms) contact(self, latency_ms) end,
    open = function(opts) return open_operation(self, opts) end,
  }
  self.task_host_table = host
  return host
end

-- The task a tools/call answer started, told to on_task before anything
-- else happens (a host stores it there). → handle | nil (answered at once)
-- | nil, message, err (a task answer of the wrong shape)
local function started_task(self, op, result)
  local state = self.session.state
  local e = state.era
  if e.task_of(result) == nil then return nil end
  local handle, why, named = task.created(result, e, { now = os.time(), server = self.identifier,
    session = state.id, version = state.version })
  if not handle then
    -- a task the server started and named is refused by its id, and asked to be cancelled
    local _, message, err = fail("malformed", { server = self.identifier, detail = why })
    return task.refused(task_host(self), op, named, message, err)
  end
  if op.on_task then op.on_task(task.copy(handle)) end
  return handle
end

--- Call a tool by its name on the server.
-- @param name the server's name for the tool
-- @param arguments a table of named arguments (encoded as a JSON object; nil
--   means {}); a list (json.array, even empty, a Lua sequence, a key that is
--   not a string) raises: it is never sent
-- @param opts { budget = seconds, cancel = function -> truthy to stop,
--   on_progress = function(progress, total, message) (asks the server for progress),
--   task = true (run it as a task where the tool and the server allow: see README "Tasks"),
--   detach = true (with task: return the task's handle at once instead of its outcome),
--   on_task = function(handle) (the task's handle when it starts and at each change of status),
--   output_schema = the tool's outputSchema the caller keeps (see below) }
-- In the 2026-07-28 era the arguments the tool's schema marks with
-- x-mcp-header also travel in Mcp-Param-&lt;Name&gt; headers. The markings come
-- from this connection's last list_tools; called before any listing, the
-- call goes without them, and a server that insists refuses it (-32020)
-- before acting: then the tools are listed once and the call is sent once
-- more if that tool's markings turned out different.
-- A tool this connection's last listing gave an outputSchema has its structuredContent checked
-- against it (core.validate_output, in C and bounded): a mismatch, or none at all, is
-- invalid_output and the result is not handed over (validate_output = false on connect takes
-- results unchecked). An error result (isError) is not checked; a tool never listed has no schema,
-- unless the call hands one: opts.output_schema (a table, a boolean, or its JSON text) is checked
-- instead of the listing's, for a caller that keeps the tool's definition itself (the agent host's
-- imported catalogue, whose connections never list).
-- @return outcome { text, is_error, note, content, structured, latency_ms } | nil, message, err
function Connection:call_tool(name, arguments, opts)
  if type(name) ~= "string" then error("call_tool: name must be a string", 2) end
  -- arguments are a JSON object on the wire: a list (array-marked, even empty, or a Lua sequence) is never sent
  if arguments ~= nil and type(arguments) ~= "table" then
    error(string.format("call_tool: arguments must be a table (an object) of named arguments, not a %s",
      type(arguments)), 2)
  end
  if arguments ~= nil and not json.is_object(arguments) then
    error("call_tool: arguments must be a table of named arguments (a JSON object), not a list", 2)
  end
  local given
  if opts ~= nil then opts, given = given_output_schema(opts) end
  local op = open_operation(self, opts)
  local params = { name = name, arguments = arguments or {} }
  if op.detach and not (op.task or self.tasks) then error("call_tool: detach needs task = true", 2) end
  local reply, message, err = send_call(self, op, params)
  if not reply and relist_for(self, op, err, name) then reply, message, err = send_call(self, op, params) end
  if not reply then
    -- a refusal naming another capability (elicitation) stays what it is: missing_capability
    local for_tasks = err.capability == nil or (err.capabilities or ""):find(era.TASKS, 1, true) ~= nil
    if err.rpc_code == era.MISSING_CAPABILITY and not op.as_task and for_tasks then
      return fail("rpc_error", { server = self.identifier, rpc_code = err.rpc_code, detail = "the server runs "
        .. "this tool only as a task, and the call did not ask for one (task = true, or tasks = true on connect)" })
    end
    -- a 2025 server refuses a tool its listing marks task-required with an error of its own: name the option
    if err.kind == "rpc_error" and not op.as_task and not (op.task or self.tasks)
      and self.task_support[name] == "required" then
      return fail("rpc_error", { server = self.identifier, rpc_code = err.rpc_code, detail = "the server lists "
        .. "this tool as task-required, and the call did not ask for a task: call it with task = true (or "
        .. "tasks = true on connect); the server said: " .. tostring(err.detail) })
    end
    return nil, message, err
  end
  contact(self, reply.duration_ms)
  local handle
  if op.as_task then
    handle, message, err = started_task(self, op, reply.result)
    if err then return nil, message, err end
  end
  if not handle then return checked_output(self, name, given, outcome_of(reply.result, reply.duration_ms)) end
  if op.detach then return task.copy(handle) end
  return checked_output(self, name, given, task.follow(task.new(task_host(self), handle), op))
end

--- A task of this server, by its handle (as call_tool's detach or on_task
--- gave it, possibly stored by another process) or its id alone (then it is
--- asked for under this connection's session).
-- @return a Task: :status(opts), :result(opts), :cancel(opts), :update(input_responses, opts)
function Connection:task(handle)
  if self.closed then error("the connection is closed", 2) end
  if type(handle) == "string" then
    handle = { id = handle }
  elseif type(handle) ~= "table" or type(handle.id) ~= "string" then
    error("task: give a task id (a string) or a handle { id, ... }", 2)
  end
  if handle.server ~= nil and handle.server ~= self.identifier then
    error(string.format('task: the handle is of server "%s", not of "%s"', tostring(handle.server),
      self.identifier), 2)
  end
  local copy = task.copy(handle)
  copy.status = nil  -- asked of the server, never taken on trust
  -- a task id is unique only per server: the handle this gives (status, on_task) is this server's
  copy.server = self.identifier
  return task.new(task_host(self), copy)
end

---------------------------------------------------------------------------
-- Skills (the io.modelcontextprotocol/skills extension)
---------------------------------------------------------------------------

-- The skills listing under `op` (Connection:skills; read_skill lists under its own operation).
local function list_skills(self, op)
  local list, by_name, cursor, latency = json.array {}, {}, nil, 0
  for page = 1, skills.MAX_PAGES + 1 do
    if page > skills.MAX_PAGES then
      return fail("malformed", { server = self.identifier,
        detail = "the skills listing goes on past " .. skills.MAX_PAGES .. " pages" })
    end
    local reply, message, err = self.session:request(op, skills.METHOD, cursor and { cursor = cursor } or {})
    if not reply then return nil, message, err end
    latency = reply.duration_ms
    local result = reply.result
    for _, value in ipairs(type(result.skills) == "table" and result.skills or {}) do
      local entry = skills.entry(value)
      if entry and #list < skills.MAX_SKILLS then
        list[#list + 1] = entry
        if entry.name and not by_name[entry.name] then by_name[entry.name] = entry end
      end
    end
    cursor = type(result.nextCursor) == "string" and result.nextCursor ~= "" and result.nextCursor or nil
    if not cursor then break end
  end
  self.skill_entries = by_name
  contact(self, latency)
  return list
end

--- The skills the server lists, every page: { { name, description, uri,
--- frontmatter, resources = { { uri, digest, size } } } }. Nothing of any
--- skill is read: its files are fetched only by read_skill. An entry that
--- could never be verified (no size and digest for its SKILL.md) is left out.
-- @param opts { budget, cancel }
-- @return array of entries | nil, message, err
function Connection:skills(opts)
  return list_skills(self, open_operation(self, opts))
end

--- Load one skill: its SKILL.md, read now (the listing is read first when
--- none is held) and verified against the listing's entry (size, SHA-256
--- digest, then the frontmatter field by field) before anything of it is
--- returned. Content that fails is refused whole: kind integrity.
-- @param name the skill's frontmatter name
-- @return { name, uri, text (the whole SKILL.md), frontmatter, resources } | nil, message, err
function Connection:read_skill(name, opts)
  if type(name) ~= "string" then error("read_skill: name must be a string", 2) end
  -- one operation, one budget: the listing read first and the file's read share its deadline
  local op = open_operation(self, opts)
  if not (self.skill_entries and self.skill_entries[name]) then
    local listed, message, err = list_skills(self, op)
    if not listed then return nil, message, err end
  end
  local entry = self.skill_entries[name]
  if not entry then
    return fail("unknown_skill", { server = self.identifier, name = name })
  end
  local reply, message, err = self.session:request(op, "resources/read", { uri = entry.uri })
  if not reply then return nil, message, err end
  local text = skills.text_of(reply.result, entry.uri)
  if not text then
    return fail("malformed", { server = self.identifier, detail = "the read of a SKILL.md returned no text for it" })
  end
  local own
  for _, resource in ipairs(entry.resources) do
    if resource.uri == entry.uri then own = resource end
  end
  local frontmatter
  frontmatter, message, err = skills.verify(self.identifier, entry, own, text)
  if not frontmatter then return nil, message, err end
  contact(self, reply.duration_ms)
  return { name = entry.name, uri = entry.uri, text = text, frontmatter = frontmatter, resources = entry.resources }
end

--- Is the server there? Finding the era if it is not known yet, else an MCP
--- ping (2025 era) or server/discover (2026-07-28 era).
-- @return report { reachable, latency_ms, era ("modern" | "legacy"), protocol_version, server_name,
--   server_version } | nil, message, err
function Connection:ping(opts)
  local op = open_operation(self, opts)
  local reply, message, err = self.session:ping(op)
  if not reply then return nil, message, err end
  contact(self, reply.duration_ms)
  local state = self.session.state
  local server = state.server_info
  return {
    reachable = true,
    latency_ms = reply.duration_ms,
    era = era.of(state).name,
    protocol_version = core.label(state.version),
    server_name = core.label(server.name),
    server_version = core.label(server.version),
  }
end

--- Replace the roots the client answers a server's roots/list with (`roots`:
--- as the connect option, file:// URIs only; raises on a bad one, and when
--- the connection was made without roots: the capability was not declared).
--- Where the era announces a change (2025-11-25) and the era is open, the
--- server is sent notifications/roots/list_changed; in the 2026-07-28 era,
--- which has none, the server's next roots/list input request gets them.
--- The new roots are kept even when the notice could not be sent.
-- @return true | nil, message, err
function Connection:set_roots(roots, opts)
  if self.session.answers.roots == nil then
    error("set_roots: this connection was made without roots (the capability was not declared); "
      .. "give roots = {} to connect to set them later", 2)
  end
  local kept = answers.roots(roots, "set_roots", 2)
  local op = open_operation(self, opts)
  return self.session:set_roots(op, kept)
end

--- What the handshake (or discovery) learned: { era, protocol_version,
--- server_info, capabilities, instructions, transport ("http" | "stdio"),
--- pid (over stdio: the running server process, nil when none runs) }, or
--- nil before the first operation.
function Connection:server()
  local s = self.session.state
  if not s then return nil end
  local over_stdio = self.command ~= nil
  return { era = era.of(s).name, protocol_version = s.version, server_info = s.server_info,
    capabilities = s.capabilities, instructions = s.instructions, transport = over_stdio and "stdio" or "http",
    pid = over_stdio and self.session.channel.pid or nil }
end

--- End the session (DELETE, bounded by 2 s) and release the connection.
-- Idempotent; also runs from &lt;close&gt; and the garbage collector.
function Connection:close()
  if self.closed then return true end
  self.closed = true
  engine.after_step(self, nil)
  self.session:close({ deadline = Deadline.open(client.CLOSE_BUDGET, self.hooks.clock) })
  return true
end

Connection.__close = Connection.close
Connection.__gc = Connection.close

function Connection:__tostring()
  local target = self.command and command.describe(self.command) or self.url
  return string.format('mcp connection "%s" (%s)%s', self.identifier, target, self.closed and " closed" or "")
end

---------------------------------------------------------------------------
-- What a server offers beside its tools (offers.lua)
---------------------------------------------------------------------------

-- What the operations of offers.lua read of a connection (none of it a method).
local function view(self)
  return { session = self.session, identifier = self.identifier, cache = self.cache, MAX_PAGES = client.MAX_PAGES,
    clock = self.hooks.clock, contact = function(ms) contact(self, ms) end }
end

-- A string argument, or misuse.
local function check_string(value, what)
  if type(value) ~= "string" then error(what .. " must be a string", 3) end
end

--- Every resource the server lists: every page, in order, within the
--- walk's bounds (50 pages, 10 000 entries, 8 MiB, each page under the read
--- cap). Entries are the server's tables; one without a string `uri` is left
--- out, and the display fields (name, title, mimeType, description) are
--- under the text rule; `uri` is kept exactly. The server must advertise
--- `resources` (else "not_offered", nothing sent).
-- @param opts { budget, cancel }
-- @return array of resources, listing { era, ttl_ms, cache_scope, cached } | nil, message, err
function Connection:list_resources(opts)
  return offers.list(view(self), open_operation(self, opts), "resources")
end

--- The resources page by page, never held whole: fn(resources) is called
--- with each page's entries, in order, as list_resources would give them,
--- and may keep what it needs of them; memory stays at about one page
--- however many the server lists. The bounds and opts are list_resources';
--- the cache is not used; what fn raises ends the walk and reaches the caller.
-- @return listing (as list_resources' second value) | nil, message, err
function Connection:each_resource_page(fn, opts)
  if type(fn) ~= "function" then error("each_resource_page: fn must be a function", 2) end
  return offers.each_page(view(self), open_operation(self, opts), "resources", fn)
end

--- Every resource template (`uriTemplate` kept exactly), as list_resources.
-- @return array of templates, listing | nil, message, err
function Connection:list_resource_templates(opts)
  return offers.list(view(self), open_operation(self, opts), "templates")
end

--- Every prompt (`name` kept exactly; title, description and the
--- arguments' titles and descriptions under the text rule), as list_resources.
-- @return array of prompts, listing | nil, message, err
function Connection:list_prompts(opts)
  return offers.list(view(self), open_operation(self, opts), "prompts")
end

--- Read one resource.
-- @return read { contents = { { uri, mime_type, text | blob } ... }, text (what a model reads: the
--   texts joined, the non-text contents named in the note, inert and bounded as a tool result), note,
--   latency_ms } | nil, message, err
function Connection:read_resource(uri, opts)
  check_string(uri, "read_resource: uri")
  return offers.read_resource(view(self), open_operation(self, opts), uri)
end

--- Get one prompt with its arguments (a table of string values, or nil).
-- @return prompt { description, messages (as the server sent them), turns ({ role, text, note } each,
--   inert), text (what a model reads: a turn's further lines indented, inert, bounded), note,
--   latency_ms } | nil, message, err
function Connection:get_prompt(name, arguments, opts)
  check_string(name, "get_prompt: name")
  if arguments ~= nil then
    if type(arguments) ~= "table" or json.is_array(arguments) then
      error("get_prompt: arguments must be a table of named string values", 2)
    end
    for k, v in pairs(arguments) do
      if type(k) ~= "string" or type(v) ~= "string" then
        error("get_prompt: arguments must be a table of named string values", 2)
      end
    end
  end
  return offers.get_prompt(view(self), open_operation(self, opts), name, arguments)
end

local REF_TYPES = { ["ref/prompt"] = "name", ["ref/resource"] = "uri" }

--- Ask the server to complete an argument.
-- @param ref { type = "ref/prompt", name } | { type = "ref/resource", uri }
-- @param argument { name, value } (strings)
-- @param context nil or the arguments already chosen (a table of strings)
-- @return completion { values (at most 100, under the text rule), total, has_more } | nil, message, err
function Connection:complete(ref, argument, context, opts)
  local key = type(ref) == "table" and REF_TYPES[ref.type]
  if not key or type(ref[key]) ~= "string" then
    error('complete: ref must be { type = "ref/prompt", name } or { type = "ref/resource", uri }', 2)
  end
  if type(argument) ~= "table" or type(argument.name) ~= "string" or type(argument.value) ~= "string" then
    error("complete: argument must be { name = string, value = string }", 2)
  end
  if context ~= nil and (type(context) ~= "table" or json.is_array(context)) then
    error("complete: context must be a table of the arguments already chosen", 2)
  end
  return offers.complete(view(self), open_operation(self, opts),
    { type = ref.type, [key] = ref[key] }, { name = argument.name, value = argument.value }, context)
end

--- Ask for notifications/resources/updated about `uri` (the server must
--- advertise resources.subscribe). While anything is subscribed the 2025
--- session's GET stream is open during every operation, and each notice
--- reaches the on_change handler as ("resource", uri). In the 2026-07-28
--- era the URI is named by the subscriptions/listen requests: over HTTP the
--- one beside each request; over stdio the standing one, opened again at once
--- naming it (the old one cancelled).
-- @return true | nil, message, err
function Connection:subscribe(uri, opts)
  check_string(uri, "subscribe: uri")
  local op = open_operation(self, opts)
  local ok, message, err = offers.subscription(view(self), op, "resources/subscribe", uri)
  if not ok then return nil, message, err end
  local had = self.subscribed[uri]
  self.subscribed[uri] = true
  ok, message, err = self.session:listen(op)
  if not ok and not had then self.subscribed[uri] = nil end
  return ok, message, err
end

--- Stop the notices about `uri` (over stdio in the 2026-07-28 era, the
--- standing listen naming it is cancelled at once, and one without it opened
--- when anything else is listened for).
-- @return true | nil, message, err
function Connection:unsubscribe(uri, opts)
  check_string(uri, "unsubscribe: uri")
  local op = open_operation(self, opts)
  local ok, message, err = offers.subscription(view(self), op, "resources/unsubscribe", uri)
  if not ok then return nil, message, err end
  self.subscribed[uri] = nil
  self.session:listen(op)  -- the old listen is cancelled whatever becomes of a new one
  return true
end

---------------------------------------------------------------------------
-- The log level, raw requests and notifications, listings page by page
---------------------------------------------------------------------------

--- Ask the server for log notices (on_log) at `level` and above from now on:
--- in the 2025 era logging/setLevel at once when the era is open (a server
--- that does not declare logging: not_offered), at the opening otherwise; in
--- the 2026-07-28 era every request names the level and nothing is sent.
-- @param level one of "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"
-- @return true | nil, message, err
function Connection:set_log_level(level, opts)
  if not settings.log_level_ok(level) then error("set_log_level: " .. settings.LEVEL_RULE, 2) end
  local op = open_operation(self, opts)
  return self.session:set_log_level(op, level)
end

-- The methods the library sends itself, and what to use instead: a raw
-- request or notification of one of them is refused, nothing sent.
local OWNED = {
  initialize = "the handshake is the library's own",
  ["notifications/initialized"] = "the handshake is the library's own",
  ["server/discover"] = "discovery is the library's own (conn:ping, conn:server)",
  ["tools/call"] = "use conn:call_tool, which the agent host's gate and write fence see",
  ["logging/setLevel"] = "use conn:set_log_level (or log_level on connect)",
  ["subscriptions/listen"] = "notices are listened for by the library (subscribe, on_change)",
  ["notifications/cancelled"] = "a request is cancelled through its operation's cancel hook or budget",
  ["notifications/roots/list_changed"] = "the library announces a change of the roots itself",
}
local METHOD_LIMIT = 256

-- Why `method` cannot be sent raw, or nil. A method name is 1 to 256
-- bytes of visible ASCII; "rpc." names are JSON-RPC's own.
local function raw_refusal(method)
  if #method == 0 or #method > METHOD_LIMIT or method:find("[^\33-\126]") then
    return string.format("a method name is 1 to %d characters of visible ASCII", METHOD_LIMIT)
  end
  if method:sub(1, 4) == "rpc." then return 'method names starting with "rpc." are reserved by JSON-RPC' end
  local owned = OWNED[method]
  if owned then return string.format('%s is sent by the client itself: %s', method, owned) end
  return nil
end

-- A raw request's params: nil (then {}) or a table of named values, or misuse.
local function raw_params(params, what)
  if params == nil then return {} end
  if type(params) ~= "table" or params[1] ~= nil or (next(params) ~= nil and json.is_array(params)) then
    error(what .. ": params must be a table of named values (or nil)", 3)
  end
  return params
end

--- Any request the server offers, by its method: through the same session,
--- budget, cancel hook, progress and failure value as the typed operations
--- (in the 2026-07-28 era with the envelope, and input_required answered by
--- on_elicitation). The result is the server's own table: nothing in it is
--- under the text rule. The methods the client sends itself are refused
--- (kind "invalid", nothing sent): initialize, notifications/initialized,
--- server/discover, tools/call (use call_tool), logging/setLevel,
--- subscriptions/listen.
-- @param opts { budget, cancel, on_progress }
-- @return result | nil, message, err
function Connection:request(method, params, opts)
  if type(method) ~= "string" then error("request: method must be a string", 2) end
  params = raw_params(params, "request")
  local op = open_operation(self, opts)
  local why = raw_refusal(method)
  if why then return fail("invalid", { server = self.identifier, field = "method", detail = why }) end
  local reply, message, err = self.session:request(op, method, params)
  if not reply then return nil, message, err end
  contact(self, reply.duration_ms)
  return reply.result
end

--- Any notification, by its method, to the server (the era opened first;
--- over HTTP the status is read, so a refusal is seen). The methods the
--- client sends itself are refused as for request (notifications/cancelled:
--- cancel an operation with its cancel hook).
-- @param opts { budget, cancel }
-- @return true | nil, message, err
function Connection:notify(method, params, opts)
  if type(method) ~= "string" then error("notify: method must be a string", 2) end
  params = raw_params(params, "notify")
  local op = open_operation(self, opts)
  local why = raw_refusal(method)
  if why then return fail("invalid", { server = self.identifier, field = "method", detail = why }) end
  local body, reason = json.try_encode { jsonrpc = "2.0", method = method, params = params }
  if not body then
    return fail("malformed", { server = self.identifier, detail = "the notification could not be encoded: " .. reason })
  end
  local ok, message, err = self.session:open(op)
  if not ok then return nil, message, err end
  return self.session.channel:notify(op, self.session.state, { method = method, body = body })
end

-- A cursor is the server's own text, sent back verbatim: nil for the first page, else a string.
local function check_cursor(cursor, what)
  if cursor ~= nil and type(cursor) ~= "string" then
    error(what .. ": cursor must be nil (the first page) or the string a page gave as next_cursor", 3)
  end
end

--- One page of the tool listing: one tools/list request with `cursor` as
--- it is (nil: the first page). The tools are the tables list_tools gives
--- (opts.schemas as there), and what the connection learns from a listing
--- (task support, output schemas, header markings) is learned for them.
-- @return page { items, next_cursor (nil on the last page), era, ttl_ms, cache_scope } | nil, message, err
function Connection:tools_page(cursor, opts)
  check_cursor(cursor, "tools_page")
  local rest, form = listing_options(opts)
  local op = open_operation(self, rest)
  local ok, message, err = self.session:open(op)
  if not ok then return nil, message, err end
  local decoding = era.of(self.session.state).listing_decoding(form)
  local reply
  reply, message, err = self.session:request(op, "tools/list", cursor ~= nil and { cursor = cursor } or {},
    { decoding = decoding })
  if not reply then return nil, message, err end
  local walk = { entries = 0, bytes = 0, containers = 0, listing = {}, headers = {} }
  local page
  page, message, err = read_page(self, walk, form, decoding, reply)
  if not page then return nil, message, err end
  if form == "tables" then core.lazy_schemas(page) end
  learn_task_support(self.task_support, page)
  learn_output_schemas(self.output_schemas, page, form)
  local e = era.of(self.session.state)
  if e.mirrors then
    for name, entry in pairs(walk.headers) do self.mirrored[name] = entry end
  end
  contact(self, reply.duration_ms)
  local next_cursor = reply.result.nextCursor
  return { items = page, next_cursor = type(next_cursor) == "string" and next_cursor ~= "" and next_cursor or nil,
    era = e.name, ttl_ms = walk.listing.ttl_ms, cache_scope = walk.listing.cache_scope }
end

--- One page of the resources (as list_resources shapes them): one
--- resources/list request with `cursor` as it is.
-- @return page { items, next_cursor, era, ttl_ms, cache_scope } | nil, message, err
function Connection:resources_page(cursor, opts)
  check_cursor(cursor, "resources_page")
  return offers.page(view(self), open_operation(self, opts), "resources", cursor)
end

--- One page of the resource templates, as resources_page.
function Connection:resource_templates_page(cursor, opts)
  check_cursor(cursor, "resource_templates_page")
  return offers.page(view(self), open_operation(self, opts), "templates", cursor)
end

--- One page of the prompts, as resources_page.
function Connection:prompts_page(cursor, opts)
  check_cursor(cursor, "prompts_page")
  return offers.page(view(self), open_operation(self, opts), "prompts", cursor)
end

--- The methods a connection offers (README, "Operations"); a spec holds the
--- object to this list.
client.METHODS = { "list_tools", "each_tool_page", "call_tool", "task", "skills", "read_skill", "ping", "server",
  "close", "list_resources", "each_resource_page", "list_resource_templates", "read_resource", "list_prompts",
  "get_prompt", "complete", "subscribe", "unsubscribe", "set_log_level", "request", "notify", "tools_page",
  "resources_page", "resource_templates_page", "prompts_page", "set_roots" }

client.Connection = Connection
return client
