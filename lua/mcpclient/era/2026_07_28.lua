--- The 2026-07-28 revision of MCP: everything of its era in one place.
--
-- In this revision there is no handshake and no session. Every request names
-- its revision, the client's identity and capabilities in `params._meta` (the
-- envelope) and mirrors the revision, the method and the target's name into
-- headers, so intermediaries can route without reading the body. Every result
-- says whether it is complete (`resultType`); list results carry a freshness
-- hint (`ttlMs`, `cacheScope`); a kept schema is held to the 2020-12 rule;
-- a task is a result of its own (`resultType: "task"`) followed by
-- tasks/get alone. The contract every era file fills is era/init.lua's
-- CONTRACT; the 2025 one is era/2025_11_25.lua.
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"

local json = core.json
local fail = errors.fail

-- The revision's own helpers (the envelope, header encodings, discovery,
-- the schema rule): the era object's `wire`.
local modern = {}
-- The era object: the slots of era/init.lua's CONTRACT.
local this = { wire = modern }

-- the era's name in reports, and its revision
this.name = "modern"
this.revision = "2026-07-28"

modern.VERSION = "2026-07-28"
-- The modern revisions this client speaks, best first.
modern.VERSIONS = { "2026-07-28" }

local PREFIX = "io.modelcontextprotocol/"
local KEY_VERSION = PREFIX .. "protocolVersion"
local KEY_CAPABILITIES = PREFIX .. "clientCapabilities"
local KEY_CLIENT = PREFIX .. "clientInfo"
local KEY_SERVER = PREFIX .. "serverInfo"
local KEY_LOG_LEVEL = PREFIX .. "logLevel"

-- The error codes the specification reserves for itself (-32020..-32099) and
-- defines in this revision. A body carrying one of them comes from a modern
-- server: the era is known, whatever else went wrong.
modern.UNSUPPORTED_VERSION = -32022
modern.HEADER_MISMATCH = -32020
-- A request needs a capability the client did not declare (the tasks
-- extension, for a call the server will only run as a task).
modern.MISSING_CAPABILITY = -32021
-- The tasks extension's name, as declared in clientCapabilities.extensions.
modern.TASKS = "io.modelcontextprotocol/tasks"
local RECOGNISED = { [-32020] = true, [-32021] = true, [-32022] = true }

function modern.recognised(code)
  return RECOGNISED[code] == true
end

local speaks = {}
for _, v in ipairs(modern.VERSIONS) do speaks[v] = true end

function modern.speaks(version)
  return speaks[version] == true
end

---------------------------------------------------------------------------
-- Requests
---------------------------------------------------------------------------

-- How the client names itself in every request's envelope.
local CLIENT_INFO = { name = "mcpclient", version = core.version }

--- The request's params with the envelope added (a shallow copy; the
--- caller's table is left as it was). `capabilities` is what the client
--- declares for this request ({} when nil): what the host's handlers let it
--- answer, and the tasks extension only when the host asked for tasks.
function modern.envelope(params, version, capabilities)
  local out = {}
  for k, v in pairs(params or {}) do out[k] = v end
  local meta = {}
  if type(out._meta) == "table" then for k, v in pairs(out._meta) do meta[k] = v end end
  meta[KEY_VERSION] = version
  meta[KEY_CAPABILITIES] = capabilities or {}
  meta[KEY_CLIENT] = CLIENT_INFO
  out._meta = meta
  return out
end

local SENTINEL_PREFIX, SENTINEL_SUFFIX = "=?base64?", "?="

-- A header value goes as it is only when it is visible ASCII or inner
-- spaces, does not start or end with white space, and cannot be mistaken
-- for the base64 form; everything else (non-ASCII, controls, an empty
-- value, the sentinel itself) travels as =?base64?<UTF-8 in base64>?=.
function modern.header_value(text)
  local plain = text ~= "" and not text:find("[^\32-\126]") and not text:find("^%s") and not text:find("%s$")
  local sentinel = text:sub(1, #SENTINEL_PREFIX) == SENTINEL_PREFIX
    and text:sub(-#SENTINEL_SUFFIX) == SENTINEL_SUFFIX
  if plain and not sentinel then return text end
  return SENTINEL_PREFIX .. core.crypto.base64(text) .. SENTINEL_SUFFIX
end

-- Methods whose target is named in Mcp-Name, and the parameter naming it.
local NAMED = { ["tools/call"] = "name", ["prompts/get"] = "name", ["resources/read"] = "uri",
  ["tasks/get"] = "taskId", ["tasks/update"] = "taskId", ["tasks/cancel"] = "taskId" }

--- Append the request metadata headers (Mcp-Method, Mcp-Name) to `list`,
--- and for tools/call the `mirrored` lines (modern.param_headers). The
--- revision header comes with the session (every era sends it).
function modern.headers(list, method, params, mirrored)
  list[#list + 1] = "Mcp-Method: " .. modern.header_value(method)
  local key = NAMED[method]
  local name = key and params and params[key]
  if type(name) == "string" then list[#list + 1] = "Mcp-Name: " .. modern.header_value(name) end
  if method == "tools/call" then
    for _, line in ipairs(mirrored or {}) do list[#list + 1] = line end
  end
  return list
end

---------------------------------------------------------------------------
-- Tool parameters mirrored into headers (x-mcp-header)
---------------------------------------------------------------------------

-- A tool's inputSchema may mark a property with "x-mcp-header": <Name>; a
-- tools/call then carries that argument's value in Mcp-Param-<Name> as well,
-- so intermediaries can route on it, and the server checks that both agree.
-- A marking that breaks the rules makes the whole tool unusable: it is
-- refused at listing, never called with a guessed header.
local HEADER_KEY = "x-mcp-header"
-- How deep the marking walk goes (it also runs on schemas not yet checked).
local MAX_DEPTH_MARKINGS = 64
local PARAM_PREFIX = "Mcp-Param-"
-- HTTP field-name token characters (1*tchar): no space, no control, no delimiter.
local TOKEN = "^[!#$%%&'*+%-%.%^_`|~0-9A-Za-z]+$"
local MIRRORED_TYPES = { string = true, integer = true, boolean = true }
-- The largest integer a double-precision number holds exactly (2^53 - 1):
-- a peer reading numbers as doubles must see the same value in both places.
local SAFE_INTEGER = 9007199254740991
-- Keywords holding a map of name -> subschema, and keywords holding data
-- (whose objects are values, not schemas, so a key there marks nothing).
local SCHEMA_MAPS = { patternProperties = true, dependentSchemas = true, ["$defs"] = true, definitions = true }
local DATA = { const = true, enum = true, default = true, examples = true }

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do if type(k) == "string" then keys[#keys + 1] = k end end
  table.sort(keys)
  return keys
end

local function path_name(path)
  local shown = {}
  for i, key in ipairs(path) do shown[i] = core.label(key) end
  return #shown > 0 and table.concat(shown, ".") or "the schema root"
end

-- Check the marking of one property reached by `path`; record it in `scan`.
local function take_marking(node, path, reachable, scan)
  local name = node[HEADER_KEY]
  local where = string.format('its x-mcp-header on "%s"', path_name(path))
  if not reachable or #path == 0 then
    return where .. " is not reachable from the root through properties alone"
  end
  if type(name) ~= "string" or not name:find(TOKEN) then
    return where .. " is not an HTTP header name token"
  end
  if not MIRRORED_TYPES[node.type] then
    return where .. ' marks a property whose type is not "string", "integer" or "boolean"'
  end
  local lower = name:lower()
  if scan.seen[lower] then return string.format('%s repeats the header name "%s"', where, core.label(name)) end
  scan.seen[lower] = true
  local copy = {}
  for i, key in ipairs(path) do copy[i] = key end
  scan.found[#scan.found + 1] = { name = name, path = copy, type = node.type }
  return nil
end

local visit

-- The subschemas of a map keyword (properties, $defs, ...), by name.
local function visit_map(map, path, reachable, depth, scan)
  if type(map) ~= "table" or json.is_array(map) then return nil end
  for _, key in ipairs(sorted_keys(map)) do
    path[#path + 1] = key
    local why = visit(map[key], path, reachable, depth + 1, scan)
    path[#path] = nil
    if why then return why end
  end
  return nil
end

-- Walk a (sub)schema: only a chain of "properties" keys keeps a property
-- reachable; anything under items, composition, conditionals or $defs is not.
function visit(node, path, reachable, depth, scan)
  if type(node) ~= "table" then return nil end
  if depth > MAX_DEPTH_MARKINGS then return "it nests too deep to look for x-mcp-header markings" end
  if json.is_array(node) then
    for _, branch in ipairs(node) do
      local why = visit(branch, path, false, depth + 1, scan)
      if why then return why end
    end
    return nil
  end
  if node[HEADER_KEY] ~= nil then
    local why = take_marking(node, path, reachable, scan)
    if why then return why end
  end
  for _, key in ipairs(sorted_keys(node)) do
    local why
    if key == "properties" then
      why = visit_map(node[key], path, reachable, depth, scan)
    elseif not DATA[key] then
      path[#path + 1] = "<" .. key .. ">"  -- named in a refusal, never a property
      if SCHEMA_MAPS[key] then why = visit_map(node[key], path, false, depth, scan)
      else why = visit(node[key], path, false, depth + 1, scan) end
      path[#path] = nil
    end
    if why then return why end
  end
  return nil
end

-- Does the schema hold the marking key anywhere (data keywords aside)? Most
-- schemas do not, and this pass is much cheaper than the ordered walk.
local function carries_marking(node, depth)
  if node[HEADER_KEY] ~= nil or depth > MAX_DEPTH_MARKINGS then return true end
  for k, v in pairs(node) do
    if type(v) == "table" and not DATA[k] and carries_marking(v, depth + 1) then return true end
  end
  return false
end

--- The parameters a tool's inputSchema mirrors into headers: a list of
--- { name, path (property names from the root), type }, in a stable order
--- (empty when nothing is marked). A marking that breaks a rule (a header
--- name that is no token or repeats another case-insensitively, a type other
--- than string/integer/boolean, a place not reached through "properties"
--- alone) refuses the tool, naming the property.
-- @return list | nil, reason
function modern.header_params(schema)
  if type(schema) ~= "table" or not carries_marking(schema, 1) then return {} end
  local scan = { found = {}, seen = {} }
  local why = visit(schema, {}, true, 1, scan)
  if why then return nil, why end
  return scan.found
end

-- The header text of one argument value: strings as they are, integers in
-- decimal, booleans as true/false | nil, why it cannot be sent.
local function header_text(value)
  if type(value) == "string" then return value end
  if type(value) == "boolean" then return value and "true" or "false" end
  if type(value) == "number" then
    local n = math.tointeger(value)
    if not n then return nil, "it is a number with a fraction (only integers are mirrored)" end
    if n > SAFE_INTEGER or n < -SAFE_INTEGER then
      return nil, "it is an integer outside +-(2^53-1), which a peer may not read exactly"
    end
    return string.format("%d", n)
  end
  return nil, "it is an object or an array, not a string, integer or boolean"
end

-- The value at `path` inside the arguments, or nil when there is none.
local function value_at(arguments, path)
  local node = arguments
  for _, key in ipairs(path) do
    if type(node) ~= "table" or node == json.null then return nil end
    node = node[key]
  end
  if node == json.null then return nil end
  return node
end

--- The Mcp-Param-&lt;Name&gt; header lines for a tools/call with `arguments`,
--- appended to `list`. An argument the call does not carry (or carries as
--- null) sends no header; a value is encoded like every header value (the
--- base64 form for anything not plain visible ASCII, so CR, LF and other
--- controls never reach the wire as they are). A value that cannot be
--- mirrored refuses the call before anything is sent.
-- @return list | nil, reason
function modern.param_headers(list, params, arguments)
  for _, param in ipairs(params or {}) do
    local value = value_at(arguments, param.path)
    if value ~= nil then
      local text, why = header_text(value)
      if not text then
        return nil, string.format('the argument "%s" cannot be sent in the %s%s header: %s', path_name(param.path),
          PARAM_PREFIX, param.name, why)
      end
      list[#list + 1] = PARAM_PREFIX .. param.name .. ": " .. modern.header_value(text)
    end
  end
  return list
end

---------------------------------------------------------------------------
-- Results
---------------------------------------------------------------------------

--- Is this result final? A missing resultType means complete (servers of
--- the first modern releases omit it). "input_required" asks the client for
--- input it has no handler for; anything else is not a result this client
--- can read. Nothing is sent again in either case. "task" is final only for
--- a request that declared the tasks extension (`task_ok`): to any other it
--- is an invalid answer.
-- @return true | nil, message, err
function modern.complete(result, server, method, task_ok)
  local kind = result.resultType
  if kind == nil or kind == "complete" then return true end
  if kind == "task" and task_ok then return true end
  if kind == "input_required" then
    local asked = {}
    if type(result.inputRequests) == "table" then
      for _, request in pairs(result.inputRequests) do
        if type(request) == "table" and type(request.method) == "string" then
          asked[#asked + 1] = core.label(request.method)
        end
        if #asked == 4 then break end
      end
    end
    table.sort(asked)
    return fail("input_required", { server = server, method = method,
      asked = #asked > 0 and table.concat(asked, ", ") or nil })
  end
  return fail("malformed", { server = server, detail = type(kind) == "string"
    and string.format('the result carries the unknown resultType "%s"', kind)
    or "the result's resultType is not a string" })
end

--- The freshness hint of a cacheable result: ttl_ms (a negative or missing
--- value means 0, stale at once) and cache_scope ("public" | "private" | nil).
function modern.cache_hint(result)
  local ttl = result.ttlMs
  local scope = result.cacheScope
  return {
    ttl_ms = math.type(ttl) == "integer" and ttl > 0 and ttl or 0,
    cache_scope = (scope == "public" or scope == "private") and scope or nil,
  }
end

-- The versions a list names, as labels safe to show (control characters
-- stripped, clipped: a real revision is unchanged); at most 8.
local function versions_of(list)
  local out = {}
  if type(list) ~= "table" or not json.is_array(list) then return out end
  for _, v in ipairs(list) do
    if type(v) == "string" then out[#out + 1] = core.label(v) end
    if #out == 8 then break end
  end
  return out
end
modern.versions_of = versions_of

--- The first version of `ours` the server also names, or nil.
function modern.common(ours, theirs)
  local named = {}
  for _, v in ipairs(theirs) do named[v] = true end
  for _, v in ipairs(ours) do if named[v] then return v end end
  return nil
end

--- Read a server/discover result: the revisions the server supports, its
--- capabilities and identity. A result that names no supportedVersions is
--- not a discover result (`nil, "not modern"`).
-- @return { supported, capabilities, server_info, hint } | nil
function modern.discovery(result)
  if type(result.supportedVersions) ~= "table" or not json.is_array(result.supportedVersions) then return nil end
  local meta = type(result._meta) == "table" and result._meta or {}
  local info = meta[KEY_SERVER]
  return {
    supported = versions_of(result.supportedVersions),
    capabilities = type(result.capabilities) == "table" and result.capabilities or {},
    server_info = type(info) == "table" and info or {},
    instructions = type(result.instructions) == "string" and result.instructions or nil,
    hint = modern.cache_hint(result),
  }
end

---------------------------------------------------------------------------
-- Schemas
---------------------------------------------------------------------------

-- The caps that hold in both eras: how deep a schema may nest and how long
-- it may be once stored (encoded).
local MAX_DEPTH = 12
local MAX_SCHEMA_BYTES = 16384
local REFERENCES = { ["$ref"] = true, ["$dynamicRef"] = true }

-- The first reason to refuse `value` (a schema or a part of it) at `depth`:
-- nesting past the cap, or a reference that leaves the schema. A reference
-- inside it ("#", "#/$defs/x") is the schema's own; any other would have to
-- be fetched, and a schema is never fetched from the network.
local function walk(value, depth)
  if type(value) ~= "table" then return nil end
  if depth > MAX_DEPTH then return string.format("it nests deeper than %d levels", MAX_DEPTH) end
  for k, v in pairs(value) do
    if REFERENCES[k] and (type(v) ~= "string" or v:sub(1, 1) ~= "#") then
      return string.format('its "%s" points outside the schema (%s), and references are never fetched', k,
        type(v) == "string" and core.label(v) or "not a string")
    end
    local why = walk(v, depth + 1)
    if why then return why end
  end
  return nil
end

-- A JSON pointer's reference token for `key` (~ as ~0, / as ~1).
local function pointer_token(key)
  return (tostring(key):gsub("~", "~0"):gsub("/", "~1"))
end

-- Every local reference in `value` (a "$ref"/"$dynamicRef" string that
-- starts with "#"), as { holder, ref, path }, and every "$anchor" and
-- "$dynamicAnchor" name. The walk is bounded by the depth check run first.
local function collect(value, path, found)
  if type(value) ~= "table" or value == json.null then return found end
  for k, v in pairs(value) do
    local here = path .. "/" .. pointer_token(json.is_array(value) and math.tointeger(k) and k - 1 or k)
    if REFERENCES[k] and type(v) == "string" then
      found.refs[#found.refs + 1] = { holder = value, ref = v, path = path }
    elseif (k == "$anchor" or k == "$dynamicAnchor") and type(v) == "string" then
      found.anchors[v] = value
    end
    collect(v, here, found)
  end
  return found
end

-- What a local reference names inside `root`: "#" the root, "#/a/b" a JSON
-- pointer (percent-decoded, ~1 and ~0 read as / and ~), "#name" the schema
-- holding that $anchor or $dynamicAnchor; nil when nothing is there.
local function target_of(root, ref, anchors)
  local fragment = ref:sub(2):gsub("%%(%x%x)", function(hex) return string.char(tonumber(hex, 16)) end)
  if fragment == "" then return root end
  if fragment:sub(1, 1) ~= "/" then return anchors[fragment] end
  local node = root
  for token in (fragment:sub(2) .. "/"):gmatch("(.-)/") do
    if type(node) ~= "table" or node == json.null then return nil end
    token = token:gsub("~1", "/"):gsub("~0", "~")
    if json.is_array(node) then
      local i = token:match("^%d+$") and math.tointeger(tonumber(token))
      node = i and node[i + 1]
    else
      node = node[token]
    end
    if node == nil then return nil end
  end
  return node
end

-- The keywords that apply a subschema to the same instance in place (a
-- reference too): a cycle through these alone never ends, while recursion
-- through "properties" or "items" ends with the instance.
local IN_PLACE = { allOf = true, anyOf = true, oneOf = true, ["not"] = true, ["if"] = true, ["then"] = true,
  ["else"] = true }

-- Whether following references and in-place keywords from `node` reaches `holder` again.
local function reaches(node, holder, targets, seen)
  if type(node) ~= "table" or node == json.null or seen[node] then return false end
  if node == holder then return true end
  seen[node] = true
  if targets[node] and reaches(targets[node], holder, targets, seen) then return true end
  for k, v in pairs(node) do
    if IN_PLACE[k] then
      if type(v) == "table" and json.is_array(v) then
        for _, sub in ipairs(v) do
          if reaches(sub, holder, targets, seen) then return true end
        end
      elseif reaches(v, holder, targets, seen) then
        return true
      end
    end
  end
  return false
end

-- The first reason to refuse the schema's local references: one that
-- points at nothing (dangling), or one that leads back to itself through
-- references and in-place keywords only (a cycle no validator can leave).
-- Recursion through properties or items (a recursive model) is kept: the
-- schema is carried verbatim, references and all.
local function references_problem(schema)
  local found = collect(schema, "#", { refs = {}, anchors = {} })
  local targets = {}
  table.sort(found.refs, function(a, b) return a.path < b.path end)
  for _, r in ipairs(found.refs) do
    local target = target_of(schema, r.ref, found.anchors)
    if target == nil then
      return string.format('its "$ref" at %s points to %s, which the schema does not define', core.clip(r.path, 120),
        core.clip(r.ref, 120))
    end
    targets[r.holder] = target
  end
  for _, r in ipairs(found.refs) do
    if reaches(targets[r.holder], r.holder, targets, {}) then
      return string.format('its "$ref" at %s leads back to itself through references alone (%s), a cycle no'
        .. " validator can leave", core.clip(r.path, 120), core.clip(r.ref, 120))
    end
  end
  return nil
end

-- The rule's checks; the schema's stored text when it passes.
local function stored_schema(schema)
  if type(schema) ~= "table" or schema == json.null or json.is_array(schema) then
    return nil, "the server advertised no parameter schema"
  end
  if schema.type ~= "object" then return nil, 'its top-level type is not "object"' end
  local why = walk(schema, 1) or references_problem(schema)
  if why then return nil, why end
  why = select(2, modern.header_params(schema))
  if why then return nil, why end
  local encoded, reason = json.try_encode(schema)
  if not encoded then return nil, "it holds a value JSON cannot carry (" .. core.clip(reason) .. ")" end
  if #encoded > MAX_SCHEMA_BYTES then return nil, string.format("it exceeds %d bytes once stored", MAX_SCHEMA_BYTES) end
  return encoded
end

--- A tool's inputSchema under the rules of the 2026-07-28 era: a JSON Schema
--- in the 2020-12 dialect unless it names another, carried whole, every
--- keyword included, so nothing is dropped and nothing widened. Refused
--- (never repaired), with the reason naming what caused it: no schema, a
--- top-level type other than "object", nesting deeper than 12 levels, a
--- $ref/$dynamicRef leaving the schema, a local one that points at nothing
--- or only at itself (through references and allOf/anyOf/oneOf/not/if/
--- then/else alone; a recursive model, through properties or items, is
--- kept as its references), an x-mcp-header marking that breaks
--- its rules (modern.header_params), more than 16384 bytes once encoded, or
--- a value JSON cannot carry.
-- @return the schema (the caller's table) | nil, reason
function modern.normalise_schema(schema)
  local encoded, why = stored_schema(schema)
  if not encoded then return nil, why end
  return schema
end

--- The same rule on a schema given as JSON text (a listing's text form);
--- the answer is the text the store keeps.
-- @return text | nil, reason
function modern.normalise_schema_text(text)
  local schema = json.decode(text, true)
  if schema == nil then return nil, "its parameter schema is not valid JSON" end
  return stored_schema(schema)
end

---------------------------------------------------------------------------
-- The era's contract (era/init.lua's CONTRACT)
---------------------------------------------------------------------------

this.versions = modern.VERSIONS
this.complete = modern.complete
this.header_params = modern.header_params
-- opened by server/discover alone: no handshake, no session, nothing to end
this.discovered = true
-- a server request on a response stream gets no answer in this revision
this.answers_server_requests = false
-- a response stream of this revision cannot be resumed (Last-Event-ID)
this.resumable = false
-- abandoning a written request over HTTP: the closed response stream is the signal
this.cancel_notice = false
-- change notices: subscriptions/listen, beside a request or standing
this.listens = "listen"

--- What the client declares in each request's envelope: each capability
--- only when the host gave what answers it (`answers`: { elicitation,
--- sampling (handlers), roots (the list) }; elicitation in both modes), and
--- what the request itself asks to declare (the tasks extension, when the
--- host asked for tasks).
function this.capabilities(answers, asked)
  local declared
  if answers and (answers.elicitation or answers.sampling or answers.roots) then
    declared = {}
    if answers.elicitation then declared.elicitation = { form = {}, url = {} } end
    if answers.sampling then declared.sampling = {} end
    if answers.roots then declared.roots = {} end
  end
  if asked then
    declared = declared or {}
    for name, value in pairs(asked) do declared[name] = value end
  end
  return declared
end

--- What a request carries in this revision: the envelope, declaring what the
--- client can answer (this.capabilities).
function this.envelope(params, version, answers, asked)
  -- (nothing to declare, the common case, needs no call)
  local declared = (answers or asked) and this.capabilities(answers, asked) or nil
  return modern.envelope(params, version, declared)
end

-- no change notice for roots in this revision: the server asks for them
-- (an inputRequests entry) each time it needs them, and the next answer
-- carries the roots as they are then
this.roots_notice = false

-- a tools/call, prompts/get or resources/read may be answered input_required,
-- answered through the host's handler and sent again (the session's rounds)
this.asks_input = true

-- no ping in this revision: discovery is the cheapest request a server must answer
this.ping_method = "server/discover"

--- The state a discovery answered on an open state leaves (what it learned,
--- the revision kept) | nil when the answer is no discovery result.
function this.refreshed(state, result)
  local found = modern.discovery(result)
  if not found then return nil end
  return this.state(state.version, found)
end

--- The state an opening leaves: no id, no handshake, what discovery learned.
function this.state(version, found)
  return { era = this, version = version, server_info = found.server_info,
    capabilities = found.capabilities, instructions = found.instructions, hint = found.hint }
end

--- The opening of this revision: server/discover with `version` in the
--- envelope (era.negotiate runs it, and reads the verdict).
-- @return probed { found (modern.discovery, nil when the answer is no discover result), reply }
--   | nil, message, err
function this.open(host, op, version)
  local reply, message, err = host.send(op, { version = version, era = this }, "server/discover", {})
  if not reply then return nil, message, err end
  local ok
  ok, message, err = modern.complete(reply.result, host.identifier, "server/discover")
  if not ok then return nil, message, err end
  return { found = modern.discovery(reply.result), reply = reply }
end

-- each request has header lines of its own (its method, name and mirrored arguments)
this.headers_per_request = true

--- The request metadata headers of `call` under this revision, appended to
--- `list` (the revision header is the channel's, every era sends it).
-- @return list | nil, why (an argument no header can carry: nothing is sent)
function this.request_headers(list, call)
  local mirrored, why = modern.param_headers({}, call.mirror, call.params and call.params.arguments)
  if not mirrored then return nil, why end
  return modern.headers(list, call.method, call.params, mirrored)
end

--- A listing's freshness hint.
this.freshness = modern.cache_hint

--- The rule a kept schema is held to (the table form; the text form is keep_page's).
this.schema_rule = modern.normalise_schema

-- A kept listing of this revision is read as text and judged here: the C
-- decoder's kept form judges by the 2025 rule.
local DECODING = { tables = "text", text = "text", kept = "text" }

--- How a page of a tool listing in `form` is read (rpc_classify's decoding).
function this.listing_decoding(form)
  return DECODING[form]
end

--- A page read with `decoding`, after this revision's rule: a kept page's
--- schemas judged by the 2020-12 rule (a refused one as { refused = reason }).
-- @return true | nil, why (the page was not read as this revision reads it)
function this.keep_page(page, form, decoding)
  if form ~= "kept" then return true end
  if decoding ~= "text" then return nil, "the server changed protocol era during the tool listing" end
  for _, tool in ipairs(page) do
    if tool.inputSchema ~= nil then
      local kept, why = modern.normalise_schema_text(tool.inputSchema)
      tool.inputSchema = kept or { refused = why }
    end
  end
  return true
end

--- The host's per-request settings in the envelope `params` (what
--- this.envelope made: its own table and _meta): the client's identity when
--- the host named one, and the log level, without which a server of this
--- revision sends no log notices for the request.
function this.with_settings(params, settings)
  local meta = params._meta
  if settings.client_info then meta[KEY_CLIENT] = settings.client_info end
  if settings.log_level then meta[KEY_LOG_LEVEL] = settings.log_level end
  return params
end

--- Nothing to ask of the server: each request names the level (this.with_settings).
function this.set_level()
  return true
end

-- a cached listing is fresh while its ttlMs lasts
this.cache_by = "ttl"

--- Whether a listing's x-mcp-header markings are learned (and mirrored on a call).
this.mirrors = true

---------------------------------------------------------------------------
-- Tasks: a result of its own, followed by tasks/get alone
---------------------------------------------------------------------------

--- The task a tools/call answer describes, or nil when it answered at once.
function this.task_of(result)
  return result.resultType == "task" and result or nil
end

--- A task's poll interval and time to live, in ms, under this revision's keys.
function this.task_times(t)
  return t.pollIntervalMs, t.ttlMs
end

--- Is a task offered for a tools/call? Here: declaring the extension asks for it.
function this.task_offered()
  return true
end

--- A tools/call asked as a task: the params as they are, the tasks extension
--- declared in the envelope, and a task answer taken as final.
function this.ask_task(params, how)
  how.capabilities = { extensions = { [modern.TASKS] = {} } }
  how.task = true
  return params
end

-- an ended task's outcome is in its tasks/get answer
this.task_outcome = "tasks/get"
-- input a task waits for is read from tasks/get (inputRequests) and answered with tasks/update
this.task_input = "tasks/update"
-- a tasks/cancel answer is not read as the task
this.cancel_reads_task = false
-- the server decides which calls run as tasks: nothing is listed first
this.task_listed_first = false

return this
