--- Catalogue import and the tool provider.
--
--   local catalogue = require "mcpclient.agent.catalogue"
--   local report = catalogue.import(store, store:server(uid), { builtin_names = { ... } })
--   local provider = catalogue.provider(store)
--   for _, t in ipairs(assert(provider.tools())) do ... end
--   provider.close()
--
-- The import asks the server for its catalogue once, decides tool by tool what
-- can be carried, and writes the outcome to the store. It always answers with
-- a report: a refusal is a report with refused = true (and `err`, the failure
-- value that caused it, as the connection or the store returned it), recorded
-- as the server's import error, and it leaves the stored catalogue as it was.
-- The provider turns stored rows into tools without touching the network;
-- each keeps its imported outputSchema, which its calls' results are checked
-- against (the run's connections never list the tools themselves).
local client = require "mcpclient.connection"
local core = require "mcpclient.core"
local era = require "mcpclient.era"
local credentials = require "mcpclient.credentials"
local grants = require "mcpclient.agent.grants"
local errors = require "mcpclient.errors"
local health_recorders = require "mcpclient.health"
local default_log = require("mcpclient.log").default
local names = require "mcpclient.agent.names"
local policy = require "mcpclient.agent.policy"
local server_options = require "mcpclient.agent.server_options"
local tool = require "mcpclient.agent.tool"

local json = core.json

local catalogue = {}

catalogue.MAX_TOOLS = 500
-- What an import keeps of a server's other offers, by kind; the rest is
-- named in the import's skip reasons. An identifier (URI, template, prompt
-- name) longer than MAX_IDENT bytes is not kept.
catalogue.MAX_OFFERS = { resource = 1000, template = 500, prompt = 500 }
catalogue.MAX_IDENT = 2048

--- The six data classes, least sensitive first: the gate's list.
catalogue.DATA_CLASSES = policy.DATA_CLASSES
local known_class = policy.DATA_CLASS_RANK

--- The row's declared data class, or nil when it is undeclared or unknown
--- (exact match only: a server without one is inert).
function catalogue.data_class(row)
  local c = row.data_class
  if type(c) == "string" and known_class[c] then return c end
  return nil
end

-- A connect() raise without the "file:line:" prefix Lua puts on it.
local function raised(message)
  return (tostring(message):gsub("^[^:\n]*:%d+: ", ""))
end

-- The row's placement, "bearer" when none is stored.
local function placement_of(row)
  local placement = row.auth_placement
  if placement == nil or placement == "" then return "bearer" end
  return placement
end

-- The `auth` option for a server row: nil when it has no credential.
local function auth_of(row)
  local credential = row.auth_credential
  if type(credential) ~= "string" or credential == "" then return nil end
  return { placement = placement_of(row), credential = credential, header_name = row.auth_header_name }
end

-- The kinds of change notice that make a stored catalogue stale: the
-- listings an import keeps (a resource's own update is not one).
local STALE_KINDS = { tools = true, resources = true, prompts = true }

-- The change-notice hook of a store-backed connection: a notice that a
-- listing the import keeps changed marks the stored catalogue stale, and a
-- re-import due (see store:set_catalogue_stale). The notice is taken from the
-- streams the connection reads anyway; no stream is held open for it. One
-- heard on an import's own connection (`importing`) leaves the catalogue
-- stale but makes nothing due: the import under way is the answer to the
-- burst, so a server that answers every listing with a notice cannot keep
-- its host importing.
local function on_change_of(row, options, importing)
  if not (options.store and row.uid) then return nil end
  local store = options.store
  return function(kind)
    if STALE_KINDS[kind] then store:set_catalogue_stale(row.uid, true, not importing) end
  end
end

--- The `on_change` handler a store-backed connection to `row`'s server gets
--- (catalogue.connect gives it when options.store is set): a tools, resources
--- or prompts list_changed marks the stored catalogue stale and a re-import
--- due. For a host that makes its own connections (run.start's `connect`).
-- @return function(kind, uri)
function catalogue.on_change(store, row)
  if type(store) ~= "table" then error("on_change: store must be a store", 2) end
  if type(row) ~= "table" or math.type(row.uid) ~= "integer" then error("on_change: row must be a server row", 2) end
  return on_change_of(row, { store = store }, false)
end

-- A connection to a server the row starts over stdio: its command, env and
-- cwd come from the operator's row only. Options that concern HTTP are not
-- passed on.
local function connect_stdio(row, options, importing)
  if type(row.url) == "string" and row.url ~= "" then
    return errors.fail("configuration", { server = row.identifier, detail = "it has both a URL and a command." })
  end
  local health = options.health
  if health == nil and options.store then health = options.store:health_recorder(row.uid) end
  local spec = {
    command = row.command, env = next(row.env or {}) and row.env or nil,
    cwd = (type(row.cwd) == "string" and row.cwd ~= "") and row.cwd or nil, identifier = row.identifier,
    name = (type(row.name) == "string" and row.name ~= "") and row.name or nil,
    health = health or health_recorders.discard,
    clock = options.clock, resolver = options.resolver, budget = options.budget, log = options.log,
    -- a child's pipes stay open anyway: in the 2026-07-28 era a listen stands open on them, so a
    -- server that tells its subscribers only is heard too
    on_change = on_change_of(row, options, importing),
    on_sampling = options.on_sampling_for and options.on_sampling_for(row) or nil,
    validate_output = options.validate_output,
  }
  server_options.apply(row, spec, options.resolver) -- (a stdio row: only its roots)
  local ok, conn = pcall(client.connect, spec)
  if ok then return conn end
  return errors.fail("configuration", { server = row.identifier, detail = raised(conn) })
end

--- A connection to the server a row describes: over stdio when the row has
--- a command, else over HTTP to its URL.
-- options: health (default: the store's recorder for the row, when options.store is given),
-- transport, clock, resolver, budget, log, host_gate, refuse_private, on_elicitation,
-- max_input_rounds, validate_output (false: results are not checked against the tools' output
-- schemas) — passed through; on_sampling_for = function(row) -> on_sampling handler (a run's
-- judge of that server's sampling requests).
-- Rows an operator can save but a connection cannot use (an unknown placement,
-- a malformed URL or identifier) come back as nil, message, err, never raised.
-- With options.store, a change notice the connection hears marks the stored
-- catalogue stale (and a re-import due).
-- @return connection | nil, message, err
local function connect_row(row, options, importing)
  if type(row.command) == "table" then return connect_stdio(row, options, importing) end
  if type(row.url) ~= "string" or row.url == "" then
    return errors.fail("configuration", { server = row.identifier, detail = "it has no URL and no command." })
  end
  local auth = auth_of(row)
  if auth and not credentials.placements[auth.placement] then
    return errors.fail("credential", { server = row.identifier,
      detail = string.format('its stored placement "%s" is not one this client offers', auth.placement) })
  end
  local health = options.health
  if health == nil and options.store then health = options.store:health_recorder(row.uid) end
  -- a grant `mcpclient login` stored for this server's URL is shared with every connection to it;
  -- a grant table that cannot be read fails the connection (it is not "no grant")
  local oauth
  if options.store then
    local message, err
    oauth, message, err = grants.oauth_option(options.store, row)
    if err then return nil, message, err end
  end
  local spec = {
    url = row.url, identifier = row.identifier, auth = auth,
    name = (type(row.name) == "string" and row.name ~= "") and row.name or nil,
    health = health or health_recorders.discard,
    transport = options.transport, clock = options.clock, resolver = options.resolver, budget = options.budget,
    log = options.log, host_gate = options.host_gate, refuse_private = options.refuse_private,
    oauth = oauth,
    -- the host's handler for input a server asks for (what a person answers reaches the model only
    -- through the tool's result, as the server chooses to use it)
    on_elicitation = options.on_elicitation, max_input_rounds = options.max_input_rounds,
    -- a server's sampling requests: the run's judge for this row (declared only when there is one)
    on_sampling = options.on_sampling_for and options.on_sampling_for(row) or nil,
    on_change = on_change_of(row, options, importing),
    listen = false,
    -- results are checked against each tool's outputSchema unless the host opts out (false)
    validate_output = options.validate_output,
  }
  -- the row's proxy, TLS files, plain headers and roots
  local applied, message, err = server_options.apply(row, spec, options.resolver)
  if not applied then return nil, message, err end
  local ok, conn = pcall(client.connect, spec)
  if ok then return conn end
  return errors.fail("configuration", { server = row.identifier, detail = raised(conn) })
end

function catalogue.connect(row, options)
  return connect_row(row, options or {}, false)
end

---------------------------------------------------------------------------
-- Import
---------------------------------------------------------------------------

-- The remote name as it may appear in a reason: one line, bounded, inert.
local function shown(remote)
  return core.clip(remote, 100)
end

-- The skip reason for an entry whose name cannot be carried (no name, an
-- invalid local name, a name taken here, by a builtin or by another server).
-- @return reason | nil (the name is free) | nil, message, err (the store failed)
local function name_refusal(remote, local_name, ctx)
  if not local_name then
    return string.format('"%s" cannot be given a valid local tool name and was skipped.', shown(remote))
  end
  if ctx.seen[local_name] then
    return string.format('"%s" maps to a name this server already used and was skipped.', shown(remote))
  end
  if ctx.builtin[local_name] then
    return string.format('"%s" would collide with a builtin tool of the same name and was skipped.', shown(remote))
  end
  -- A name another server's rows hold (a removed server's included: the
  -- name is a unique key, and its audit still names that server).
  local owner, message, err = ctx.store:tool_owner(local_name)
  if message then return nil, message, err end
  if owner == nil or owner == ctx.row.uid then return nil end
  local other = ctx.store:server(owner)
  local whose = other and string.format('server "%s"', other.identifier)
    or string.format("a removed server (uid %d)", owner)
  return string.format('"%s" maps to the name %s, which %s already owns, and was skipped.',
    shown(remote), local_name, whose)
end

-- The schema an import keeps of an entry, under its era's rule: a
-- 2026-07-28 listing may carry any JSON Schema 2020-12 keyword (never a
-- network $ref), a 2025 one the retained keys only. The import lists in the
-- kept form, judged as the pages were read; a connection that hands tables
-- instead (a stand-in) is judged here.
-- @return schema (text, or a table to encode) | nil, reason
local function kept_schema(entry, listing)
  local schema = entry.inputSchema
  -- an absent schema is never judged while the page is read: the rule words its refusal
  if listing.schemas ~= "kept" or schema == nil then return era.schema_for(listing.era)(schema) end
  if type(schema) == "string" then return schema end
  return nil, schema.refused
end

-- The outputSchema an import keeps of an entry, as JSON text ("" when the
-- tool declares none): the kept listing hands it as the server's text; a
-- stand-in that hands tables has it encoded. It is kept as given: a result
-- is checked against exactly what the server declared. One that is not a
-- JSON object (nor a boolean schema) could never be checked: every result
-- of the tool would be refused after the server acted, so it is not kept.
-- @return text | nil, reason
local function kept_output_schema(entry, listing)
  local schema = entry.outputSchema
  if schema == nil then return "" end
  local text = schema
  if not (listing.schemas == "kept" and type(schema) == "string") then text = json.try_encode(schema) end
  if not text then return nil, "has an output schema that could not be stored" end
  if not (text:find("^%s*{") or text:find("^%s*true%s*$") or text:find("^%s*false%s*$")) then
    return nil, "has an output schema that is not a JSON object"
  end
  return text
end

-- The tool row for an entry whose name is free | { skip = reason }.
local function tool_row(entry, remote, local_name, listing)
  local schema, reason = kept_schema(entry, listing)
  if not schema then
    if reason then return { skip = string.format('"%s" was skipped: %s.', shown(remote), reason) } end
    return { skip = string.format('"%s" has no usable parameter schema and was skipped.', shown(remote)) }
  end
  local encoded = type(schema) == "string" and schema or json.try_encode(schema)
  if not encoded then
    return { skip = string.format('"%s" has a parameter schema that could not be stored and was skipped.',
      shown(remote)) }
  end
  local output, why = kept_output_schema(entry, listing)
  if not output then return { skip = string.format('"%s" %s and was skipped.', shown(remote), why) } end
  local annotations = ""
  if type(entry.annotations) == "table" then annotations = json.try_encode(entry.annotations) or "" end
  return { tool = { tool_name = local_name, remote_name = remote,
    description = type(entry.description) == "string" and entry.description or "",
    input_schema = encoded, remote_annotations = annotations, output_schema = output } }
end

-- What to do with one advertised entry.
-- @return { tool = row } | { skip = reason } | nil, message, err (the store failed)
local function verdict(entry, ctx)
  local remote = entry.name
  if type(remote) ~= "string" or remote == "" then
    return { skip = "An advertised tool has no name and was skipped." }
  end
  local local_name = names.local_name(ctx.row.identifier, remote)
  local reason, message, err = name_refusal(remote, local_name, ctx)
  if reason then return { skip = reason } end
  if message then return nil, message, err end
  return tool_row(entry, remote, local_name, ctx.listing)
end

local function as_set(list)
  local set = {}
  if list == nil then return set end
  for k, v in pairs(list) do
    if type(k) == "number" then set[v] = true else set[k] = v and true or nil end
  end
  return set
end

--- Whether `identifier` is free among the enabled servers other than `uid`:
--- identifiers name the imported tools, so two enabled servers cannot share one.
-- @return true | nil, message, err (kind "conflict", or "store")
function catalogue.identifier_free(store, uid, identifier)
  local enabled, message, err = store:enabled_servers()
  if not enabled then return nil, message, err end
  for _, other in ipairs(enabled) do
    if other.uid ~= uid and other.identifier == identifier then
      return errors.fail("conflict", { field = "identifier", identifier = identifier, other = other.name })
    end
  end
  return true
end

-- What refuses an import before the network is asked: no data class (its
-- tools could not be classified), no URL, an enabled twin.
-- @return nil | { reason [, err] }
local function precondition(store, row)
  if not catalogue.data_class(row) then
    return { reason = "The server has no declared data class, so its tools cannot be classified." }
  end
  if (type(row.url) ~= "string" or row.url == "") and type(row.command) ~= "table" then
    return { reason = "The server has no URL and no command." }
  end
  local free, message, err = catalogue.identifier_free(store, row.uid, row.identifier)
  if not free then return { reason = message, err = err } end
  return nil
end

-- The catalogue, one operation on a connection of its own.
-- @return tools, listing { era, ttl_ms, cache_scope } | nil, message, err
local fetch_offers

local function fetch(row, options, offers)
  local connect = options.connect or function(r) return connect_row(r, options, true) end
  -- the import answers every notice heard so far; one heard from here on keeps the catalogue stale
  options.store:begin_import(row.uid, false)
  local conn, message, err = connect(row)
  if not conn then return nil, message, err end
  local listed
  local listing
  listed, listing, err = conn:list_tools { schemas = "kept" }
  if listed and offers then fetch_offers(conn, offers) end
  conn:close()
  return listed, listing, err
end

-- Record a refusal and report it; `err` is the failure value behind it, when there is one.
local function refuse(store, row, reason, now, err)
  local current = store:server(row.uid)
  local count = (current and current.tool_count) or row.tool_count or 0
  store:record_import(row.uid, { status = "error", error = reason, tool_count = count, at = now })
  return { server_uid = row.uid, imported = 0, skipped = 0, orphaned = 0, skip_reasons = { reason }, refused = true,
    err = err }
end

-- Sort the listed entries into accepted tool rows and skip reasons.
-- @return accepted, skips | nil, message, err (the store failed)
local function sort_entries(listed, ctx)
  local accepted, skips = {}, {}
  for _, entry in ipairs(listed) do
    local v, message, err = verdict(entry, ctx)
    if not v then return nil, message, err end
    if v.skip then
      skips[#skips + 1] = v.skip
    else
      ctx.seen[v.tool.tool_name] = true
      accepted[#accepted + 1] = v.tool
    end
  end
  return accepted, skips
end

-- Write the accepted catalogue and the outcome; the report.
local function record(store, row, accepted, skips, now)
  local orphaned, message, err = store:reconcile(row, accepted, now)
  if not orphaned then return refuse(store, row, message, now, err) end
  store:record_import(row.uid, { status = #skips == 0 and "ok" or "partial", error = table.concat(skips, "\n"),
    tool_count = #accepted, at = now })
  return { server_uid = row.uid, imported = #accepted, skipped = #skips, orphaned = orphaned,
    skip_reasons = skips, refused = false }
end

--- Import a server's catalogue: check what can be checked without the
--- network, list the tools once, judge each, write the outcome. It answers
--- the change notices heard before it began: an import that lists and stores
--- everything marks the catalogue current again, unless a notice came after
--- it began (the listing may predate the change); one heard on its own
--- connection keeps the catalogue stale without making a re-import due.
-- @param store a store (mcpclient.agent.store)
-- @param row the server row (store:server(uid))
-- @param options {
--   builtin_names = set or list of local names the host's own tools use,
--   now = unix seconds stamped on every row of this import (default os.time()),
--   connect = function(row) -> connection | nil, message, err (default catalogue.connect; the
--     import runs one list_tools on it and closes it),
--   log = function(level, message) (default: mcpclient.log's, one line on stderr),
--   transport, clock, resolver, budget, health — passed to catalogue.connect }
-- @return report { server_uid, imported, skipped, orphaned, skip_reasons, refused [, err] }
function catalogue.import(store, row, options)
  if type(row) ~= "table" then error("import: the server row must be a table", 2) end
  options = options or {}
  local now = options.now or os.time()
  local refusal = precondition(store, row)
  if refusal then return refuse(store, row, refusal.reason, now, refusal.err) end

  local offers = {}
  local listed, listing, err = fetch(row, setmetatable({ store = store }, { __index = options }), offers)
  if not listed then
    local message = listing
    pcall(options.log or default_log, "warning", string.format('An MCP catalogue import failed for "%s": %s',
      row.identifier, message))
    return refuse(store, row, message, now, err)
  end
  if #listed > catalogue.MAX_TOOLS then
    return refuse(store, row, string.format("The server advertises %d tools, more than the %d this client "
      .. "will import.", #listed, catalogue.MAX_TOOLS), now)
  end
  local ctx = { store = store, row = row, seen = {}, builtin = as_set(options.builtin_names),
    listing = type(listing) == "table" and listing or {} }
  local accepted, skips
  accepted, skips, err = sort_entries(listed, ctx)
  if not accepted then return refuse(store, row, skips, now, err) end
  for _, reason in ipairs(offers.skips) do skips[#skips + 1] = reason end
  local report = record(store, row, accepted, skips, now)
  if not report.refused then catalogue.keep_offers(store, row, offers, now, report) end
  return report
end

--- Re-import the catalogues a change notice made due: every live, enabled
--- server the operator set to re-import on its own (reimport "auto") whose
--- catalogue a notice marked stale since its last import. Each is taken by
--- one compare-and-set first (of several processes sharing the store, one
--- re-imports it, once per burst of notices), then imported exactly as
--- catalogue.import does (the caps, the text rule, orphans, the recorded
--- outcome, the contact). A re-import that fails leaves the stored catalogue
--- as it was, still stale, the failure recorded as the server's import error;
--- it is not tried again until the next notice (or `mcpclient import`).
--- Call it at a safe point: never while a model's turn is using the tools
--- (a run does it in run:tools(), before the gate decides the next turn's tools).
-- @param options catalogue.import's options, plus
--   admit = function(row) -> boolean: whether this host may reach the server now (a run's gate;
--     a server it refuses stays due, for a host that may)
-- @return list of { row, report, duration_ms } (one per re-import made) | nil, message, err
function catalogue.reimport_due(store, options)
  options = options or {}
  local rows, message, err = store:reimports_due()
  if not rows then return nil, message, err end
  local done = {}
  for _, row in ipairs(rows) do
    if (options.admit == nil or options.admit(row)) and store:begin_import(row.uid, true) == 1 then
      local started = core.now()
      local report = catalogue.import(store, store:server(row.uid) or row, options)
      done[#done + 1] = { row = row, report = report, duration_ms = (core.now() - started) * 1000 }
    end
  end
  return done
end

---------------------------------------------------------------------------
-- The other offers: resources, templates, prompts
---------------------------------------------------------------------------

-- What each listing gives the store: the kind, the connection's method, the
-- identifying field.
local OFFER_LISTINGS = {
  { kind = "resource", list = "list_resources", ident = "uri", capability = "resources" },
  { kind = "template", list = "list_resource_templates", ident = "uriTemplate", capability = "resources" },
  { kind = "prompt", list = "list_prompts", ident = "name", capability = "prompts" },
}

-- A stored row of one listed entry (its display fields are under the text
-- rule already), or nil and the reason it is not kept.
local function offer_row(entry, spec)
  local ident = entry[spec.ident]
  if #ident > catalogue.MAX_IDENT or ident == "" then
    return nil, string.format("A %s whose identifier is empty or longer than %d bytes was skipped.", spec.kind,
      catalogue.MAX_IDENT)
  end
  local detail = ""
  if spec.kind == "prompt" and type(entry.arguments) == "table" then detail = json.try_encode(entry.arguments) or "" end
  return { ident = ident, name = type(entry.name) == "string" and entry.name or "", title = entry.title or "",
    description = entry.description or "", mime_type = entry.mimeType or "", detail = detail }
end

-- List what the server advertises of each kind, on the import's connection,
-- into offers[kind] (rows, up to the kind's cap) and offers.skips. A listing
-- that fails leaves its kind out (the stored rows stay as they were) and is
-- named in the skips; a kind the server does not advertise is kept empty.
function fetch_offers(conn, offers)
  offers.skips, offers.listed = {}, {}
  local info = type(conn.server) == "function" and conn:server() or nil
  local caps = info and info.capabilities or {}
  for _, spec in ipairs(OFFER_LISTINGS) do
    if type(caps[spec.capability]) == "table" then
      local listed, message = conn[spec.list](conn)
      if not listed then
        offers.skips[#offers.skips + 1] = string.format("The %s listing failed, so the stored %ss were kept: %s",
          spec.kind, spec.kind, message)
      else
        local rows, cap = {}, catalogue.MAX_OFFERS[spec.kind]
        for _, entry in ipairs(listed) do
          local kept, why = offer_row(entry, spec)
          if kept and #rows < cap then rows[#rows + 1] = kept elseif why then offers.skips[#offers.skips + 1] = why end
        end
        if #listed > cap then
          offers.skips[#offers.skips + 1] = string.format("The server lists %d %ss; the first %d were kept.",
            #listed, spec.kind, cap)
        end
        offers[spec.kind] = rows
        offers.listed[spec.kind] = true
      end
    else
      offers[spec.kind] = {}
    end
  end
end

--- Keep the offers an import listed (catalogue.import calls it after the
--- tools): each kind reconciled (orphans as for tools; a kind the server no
--- longer advertises orphans all its rows), the catalogue marked current.
--- When the server advertised any, the report gets offers = { resource,
--- template, prompt } (how many of each listed kind were kept); a store
--- failure is added to its skip reasons, and those offers stay as they were.
function catalogue.keep_offers(store, row, offers, now, report)
  -- the catalogue is current again only when every listing it keeps was read and stored
  local complete = true
  for _, spec in ipairs(OFFER_LISTINGS) do
    local rows = offers[spec.kind]
    if rows then
      local orphaned, message = store:reconcile_offers(row.uid, spec.kind, rows, now)
      if not orphaned then
        complete = false
        report.skip_reasons[#report.skip_reasons + 1] = message
      elseif offers.listed[spec.kind] then
        report.offers = report.offers or {}
        report.offers[spec.kind] = #rows
      end
    else
      complete = false
    end
  end
  if complete then store:settle_catalogue(row.uid) end
end

---------------------------------------------------------------------------
-- Provider
---------------------------------------------------------------------------

-- What a tool executes against when its server cannot be connected to: every
-- call returns the reason, so the run goes on and the model is told.
local function unusable(message, err)
  return {
    call_tool = function() return nil, message, err end,
    close = function() return true end,
  }
end

-- The connection a server's tools share: opened on the first execution and
-- kept in `open` (by server uid) until the provider closes. A server that
-- cannot be connected to gives every call its failure value instead.
local function connection_getter(open, connect, row)
  return function()
    local conn = open[row.uid]
    if conn then return conn end
    local message, err
    conn, message, err = connect(row)
    if not conn then return unusable(message, err) end
    open[row.uid] = conn
    return conn
  end
end

-- A stored outputSchema decoded: nil when the tool declares none (""),
-- false when the text no longer decodes as a schema (an object or a boolean).
local function stored_output_schema(text)
  if type(text) ~= "string" or text == "" then return nil end
  local schema = json.decode(text, true)
  if type(schema) == "boolean" or json.is_object(schema) then
    return schema
  end
  return false
end

-- Append the live tools of one server to `list`, sharing `getter`. A row
-- whose stored input or output schema no longer decodes is left out, not
-- offered broken (its results could not be checked).
-- → true | nil, message, err
local function add_tools_of(store, row, getter, list)
  local rows, message, err = store:live_tools_of(row.uid)
  if not rows then return nil, message, err end
  for _, t in ipairs(rows) do
    local schema = type(t.input_schema) == "string" and core.decode_stored_schema(t.input_schema) or nil
    local output = stored_output_schema(t.output_schema)
    if schema and output ~= false then
      list[#list + 1] = tool.new {
        server = row, local_name = t.tool_name, remote_name = t.remote_name,
        description = t.description, parameters = schema, connection = getter,
        output_schema = output,
      }
    end
  end
  return true
end

--- The tools the store holds, as registry tools. No network:
--- connections open on a tool's first execution, one per server, shared.
-- @param options { connect = function(row) -> connection, and catalogue.connect's options }
-- @return provider { tools = function() -> array of tools | nil, message, err, close = function() }
function catalogue.provider(store, options)
  options = options or {}
  local connect_options = setmetatable({ store = store }, { __index = options })
  local connect = options.connect or function(r) return catalogue.connect(r, connect_options) end
  local open = {}
  local provider = {}

  function provider.tools()
    local servers, message, err = store:enabled_servers()
    if not servers then return nil, message, err end
    local list = {}
    for _, row in ipairs(servers) do
      if catalogue.data_class(row) then
        local ok
        ok, message, err = add_tools_of(store, row, connection_getter(open, connect, row), list)
        if not ok then return nil, message, err end
      end
    end
    return list
  end

  --- Close every connection the tools opened. Idempotent.
  function provider.close()
    for uid, conn in pairs(open) do
      open[uid] = nil
      pcall(conn.close, conn)
    end
    return true
  end

  return provider
end

return catalogue
