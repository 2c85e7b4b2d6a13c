--- The 2026-07-28 era of MCP: what a request carries and what a result must hold.
--
-- In this revision there is no handshake and no session. Every request names
-- its revision, the client's identity and capabilities in `params._meta` (the
-- envelope) and mirrors the revision, the method and the target's name into
-- headers, so intermediaries can route without reading the body. Every result
-- says whether it is complete (`resultType`); list results carry a freshness
-- hint (`ttlMs`, `cacheScope`). Everything that differs between the eras lives
-- here; the 2025 handshake stays in the connection.
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"

local json = core.json
local fail = errors.fail

local modern = {}

modern.VERSION = "2026-07-28"
-- The modern revisions this client speaks, best first.
modern.VERSIONS = { "2026-07-28" }

local PREFIX = "io.modelcontextprotocol/"
local KEY_VERSION = PREFIX .. "protocolVersion"
local KEY_CAPABILITIES = PREFIX .. "clientCapabilities"
local KEY_CLIENT = PREFIX .. "clientInfo"
local KEY_SERVER = PREFIX .. "serverInfo"

-- The error codes the specification reserves for itself (-32020..-32099) and
-- defines in this revision. A body carrying one of them comes from a modern
-- server: the era is known, whatever else went wrong.
modern.UNSUPPORTED_VERSION = -32022
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

-- The client declares no capability of its own here: a capability is a
-- promise to answer input requests, and this client has no handler for them.
local CLIENT_INFO = { name = "mcpclient", version = core.version }

--- The request's params with the envelope added (a shallow copy; the
--- caller's table is left as it was).
function modern.envelope(params, version)
  local out = {}
  for k, v in pairs(params or {}) do out[k] = v end
  local meta = {}
  if type(out._meta) == "table" then for k, v in pairs(out._meta) do meta[k] = v end end
  meta[KEY_VERSION] = version
  meta[KEY_CAPABILITIES] = {}
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
local NAMED = { ["tools/call"] = "name", ["prompts/get"] = "name", ["resources/read"] = "uri" }

--- Append the request metadata headers (Mcp-Method, Mcp-Name) to `list`.
--- The revision header comes with the session (every era sends it).
function modern.headers(list, method, params)
  list[#list + 1] = "Mcp-Method: " .. modern.header_value(method)
  local key = NAMED[method]
  local name = key and params and params[key]
  if type(name) == "string" then list[#list + 1] = "Mcp-Name: " .. modern.header_value(name) end
  return list
end

---------------------------------------------------------------------------
-- Results
---------------------------------------------------------------------------

--- Is this result final? A missing resultType means complete (servers of
--- the first modern releases omit it). "input_required" asks the client for
--- input it has no handler for; anything else is not a result this client
--- can read. Nothing is sent again in either case.
-- @return true | nil, message, err
function modern.complete(result, server, method)
  local kind = result.resultType
  if kind == nil or kind == "complete" then return true end
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

--- A tool's inputSchema under the rules of the 2026-07-28 era: a JSON Schema
--- in the 2020-12 dialect unless it names another, carried whole, every
--- keyword included, so nothing is dropped and nothing widened. Refused
--- (never repaired), with the reason naming what caused it: no schema, a
--- top-level type other than "object", nesting deeper than 12 levels, a
--- $ref/$dynamicRef leaving the schema, more than 16384 bytes once
--- encoded, or a value JSON cannot carry.
-- @return the schema (the caller's table) | nil, reason
function modern.normalise_schema(schema)
  if type(schema) ~= "table" or schema == json.null or json.is_array(schema) then
    return nil, "the server advertised no parameter schema"
  end
  if schema.type ~= "object" then return nil, 'its top-level type is not "object"' end
  local why = walk(schema, 1)
  if why then return nil, why end
  local encoded, reason = json.try_encode(schema)
  if not encoded then return nil, "it holds a value JSON cannot carry (" .. core.clip(reason) .. ")" end
  if #encoded > MAX_SCHEMA_BYTES then return nil, string.format("it exceeds %d bytes once stored", MAX_SCHEMA_BYTES) end
  return schema
end

--- The schema rule of the era a listing came from (list_tools' second value):
--- the 2026-07-28 rules for "modern", the 2025 normaliser otherwise.
function modern.schema_for(era)
  return era == "modern" and modern.normalise_schema or core.normalise_schema
end

return modern
