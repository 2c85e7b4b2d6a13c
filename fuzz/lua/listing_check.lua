--- Checker of fuzz/listing_fuzz.c: a tools/list answer read with its tools'
--- schemas as text and as kept (core.rpc_classify's "text" and "kept"
--- decodings), the lazy schemas of the default listing (core.lazy_schemas),
--- and core.normalise_schema_text, against the table paths they stand for.
--
-- The listing: the jansson classifier (key order recorded) must give the
-- same kind and details; in a result, every value but the listed tools'
-- inputSchema and outputSchema must be the same (key order aside: the
-- listing records none outside the schemas, which keep theirs as text);
-- each of those must be a string equal to json.encode of jansson's value,
-- except a kept inputSchema, which must be what the table normaliser keeps
-- of jansson's value, encoded, or { refused = its reason }. The normaliser
-- on text: for text jansson refuses, the "not valid JSON" reason;
-- otherwise exactly the table normaliser's answer, encoded (or its reason).
local core = require "mcpclient.core"

local check = require "check"

local json = core.json
local slow_classify = core.json_reference.classify
check(type(slow_classify) == "function" and slow_classify ~= core.rpc_classify, "no jansson classifier")
local SCHEMA_KEYS = { inputSchema = true, outputSchema = true }

-- values compared without key order: a listing records none outside its schemas
local same = require("same")(false)

-- What the table normaliser keeps of a decoded schema: its text, or { refused = reason }.
local function kept_of(value)
  local schema, reason = core.normalise_schema(value)
  if schema == nil then return { refused = reason } end
  return json.encode(schema)
end

-- One listed tool: schemas as text equal to the encoding of jansson's (or what is kept of it), the
-- rest the same.
local function same_tool(fast, slow, path, decoding)
  if type(fast) ~= "table" or json.is_array(fast) then return same(fast, slow, path) end
  check(type(slow) == "table" and not json.is_array(slow), "%s: a tool on one side only", path)
  for k, v in pairs(fast) do
    if k == "inputSchema" and decoding == "kept" then
      local want = kept_of(rawget(slow, k))
      if type(want) == "string" then
        check(v == want, "%s.inputSchema: not the kept text", path)
      else
        local got = type(v) == "table" and v.refused
        check(got == want.refused and next(v, next(v)) == nil, "%s.inputSchema: refusals differ: %s against %s", path,
          tostring(got), want.refused)
      end
    elseif SCHEMA_KEYS[k] then
      check(type(v) == "string", "%s.%s: not text", path, k)
      check(v == json.encode(rawget(slow, k)), "%s.%s: the text is not json.encode of the value", path, k)
    else
      same(v, rawget(slow, k), path .. "." .. k)
    end
  end
  for k in pairs(slow) do check(rawget(fast, k) ~= nil, "%s: key %q only in jansson's tool", path, k) end
end

local function same_result(fast, slow, decoding)
  local tools = rawget(fast, "tools")
  if type(tools) ~= "table" or not json.is_array(tools) then return same(fast, slow, "result") end
  for k, v in pairs(fast) do
    if k ~= "tools" then same(v, rawget(slow, k), "result." .. k) end
  end
  for k in pairs(slow) do check(rawget(fast, k) ~= nil, "result: key %q only in jansson's", k) end
  local other = rawget(slow, "tools")
  check(type(other) == "table" and #other == #tools, "result.tools: lengths differ")
  for i = 1, #tools do same_tool(tools[i], other[i], "result.tools[" .. i .. "]", decoding) end
end

local function listing(body, id, decoding, max_containers)
  local f = table.pack(core.rpc_classify(body, id, decoding, max_containers))
  local s = table.pack(slow_classify(body, id, true, max_containers))
  check(f.n == s.n, "rpc_classify: %d values against %d", f.n, s.n)
  check(f[1] == s[1], "rpc_classify: kind %s against %s", tostring(f[1]), tostring(s[1]))
  if f[1] == "malformed" and tostring(s[2]):find("^invalid JSON: ") then
    return check(tostring(f[2]):find("^invalid JSON: ") ~= nil, "rpc_classify's refusal: %s", tostring(f[2]))
  end
  for i = 2, f.n do
    if f[1] == "result" and i == 2 then
      same_result(f[2], s[2], decoding)
    else
      same(f[i], s[i], "rpc_classify[" .. i .. "]")
    end
  end
end

-- The default listing: the text form with each schema made lazy (core.lazy_schemas). Unread, a
-- lazy schema must encode and normalise as jansson's value; read, it must be that value, key
-- order included.
local same_ordered = require("same")(true)
local function lazy_listing(body)
  local kind, result = core.rpc_classify(body, 1, "text")
  if kind ~= "result" or type(rawget(result, "tools")) ~= "table" then return end
  local _, other = slow_classify(body, 1, true)
  local tools = core.lazy_schemas(rawget(result, "tools"))
  for i, tool in ipairs(tools) do
    for k in pairs(SCHEMA_KEYS) do
      local v, want = type(tool) == "table" and rawget(tool, k), type(tool) == "table" and rawget(other.tools[i], k)
      if v ~= nil and v ~= false then
        if core.lazy_text(v) then
          check(json.encode(v) == json.encode(want), "lazy %s: its encoding is not jansson's value's", k)
          local a, why_a = core.normalise_schema(v)
          local b, why_b = core.normalise_schema(want)
          check(why_a == why_b and (a == nil) == (b == nil), "lazy %s: refusals differ", k)
          if a then check(json.encode(a) == json.encode(b), "lazy %s: kept schemas differ", k) end
          check(core.lazy_text(v), "lazy %s: built by encode or normalise", k)
          local _ = v[1] -- the first read builds it
          check(core.lazy_text(v) == nil and getmetatable(v) == nil, "lazy %s: not built by a read", k)
        end
        same_ordered(v, want, "lazy " .. k)
      end
    end
  end
end

local function normalised(text)
  local kept, why = core.normalise_schema_text(text)
  local value = json.decode(text, true)
  if value == nil then
    check(kept == nil and why == "its parameter schema is not valid JSON", "invalid text given an answer")
    return
  end
  local schema, reason = core.normalise_schema(value)
  if schema == nil then
    check(kept == nil and why == reason, "refusals differ: %s against %s", tostring(why), tostring(reason))
    return
  end
  check(why == nil and kept == json.encode(schema), "the kept text is not the table normaliser's, encoded")
end

return function(body, oom)
  local wrapped = '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","inputSchema":' .. body
    .. ',"outputSchema":' .. body .. '}],"nextCursor":"c"}}'
  if oom then
    -- one failed allocation: surviving is the property (memory errors are accepted by the harness)
    core.rpc_classify(wrapped, 1, "text")
    core.rpc_classify(wrapped, 1, "kept")
    local kind, result = core.rpc_classify(wrapped, 1, "text")
    if kind == "result" then
      for _, tool in ipairs(core.lazy_schemas(result.tools)) do
        json.try_encode(tool)
        local _ = type(tool.inputSchema) == "table" and tool.inputSchema[1]
      end
    end
    core.normalise_schema_text(body)
    return
  end
  listing(body, 1, "text")
  listing(body, 1, "kept")
  listing(wrapped, 1, "text")
  listing(wrapped, 1, "kept")
  listing(wrapped, 1, "kept", 1 + #body % 16)
  listing(wrapped, 1, "text", 65536)
  lazy_listing(wrapped)
  lazy_listing(body)
  normalised(body)
end
