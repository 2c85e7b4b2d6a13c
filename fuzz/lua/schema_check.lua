--- Checker of fuzz/schema_fuzz.c: the schema normaliser (csrc/core/schema.c).
--
-- The input is decoded with key order (as the catalogue decodes tools/list);
-- the value itself and, when it is an object, its inputSchema member are
-- normalised. A refusal carries a reason. An accepted
-- schema holds only retained keys, type first and exactly "object", encodes
-- in at most 16384 bytes in the ASCII measure, normalises again to the same
-- bytes, and survives the store format: encode -> decode_stored_schema ->
-- normalise -> encode gives the same bytes. The input text itself is also
-- read as a stored schema, which must give nil or an object.
local core = require "mcpclient.core"

local json = core.json
local ascii_encode = _G.fuzz_ascii_encode

local RETAINED = {
  type = 1, description = 2, properties = 3, required = 4, additionalProperties = 5,
  allOf = 6, anyOf = 7, oneOf = 8, ["not"] = 9,
}

local check = require "check"

local function is_object(v) return type(v) == "table" and not json.is_array(v) end

local function normalise(value, what)
  local s, reason = core.normalise_schema(value)
  if s == nil then
    check(type(reason) == "string" and reason ~= "", "%s: refused without a reason", what)
    return nil, reason
  end
  check(reason == nil, "%s: accepted but with a reason %q", what, tostring(reason))
  check(is_object(s), "%s: the schema is not an object table", what)
  check(s.type == "object", "%s: accepted with type %s", what, tostring(s.type))
  local last = 0
  for _, k in ipairs(json.key_order(s) or {}) do
    check(RETAINED[k] and RETAINED[k] > last, "%s: key order record %s out of place", what, k)
    last = RETAINED[k]
  end
  for k in pairs(s) do check(RETAINED[k], "%s: kept key %s", what, tostring(k)) end
  local measured, why = ascii_encode(s)
  check(measured ~= nil, "%s: accepted but does not encode: %s", what, tostring(why))
  check(#measured <= 16384, "%s: accepted at %d bytes in the ASCII measure", what, #measured)
  return s, measured
end

local function accepted(value, what)
  local s, measured = normalise(value, what)
  if s == nil then return end
  local text = json.encode(s)
  check(text:sub(1, 16) == '{"type":"object"', "%s: the encoding does not start with the type: %s", what, text)
  -- normalising twice changes nothing (a refusal's second value is its reason)
  local again, again_measured = normalise(s, what .. " again")
  check(again ~= nil, "%s: a normalised schema is refused: %s", what, again_measured)
  check(again_measured == measured and json.encode(again) == text, "%s: re-normalised differently", what)
  -- the store format: the text a store keeps, read back
  local stored = core.decode_stored_schema(text)
  check(stored ~= nil, "%s: the stored text %q does not decode as a schema", what, text)
  local back, refusal = normalise(stored, what .. " stored")
  check(back ~= nil, "%s: the stored schema is refused: %s", what, refusal)
  local back_text = json.encode(back)
  check(back_text == text, "%s: store round trip changed the bytes:\n%s\n%s", what, text, back_text)
  check(json.encode(stored) == text, "%s: decode_stored_schema lost the bytes", what)
end

return function(input)
  local stored = core.decode_stored_schema(input)
  check(stored == nil or is_object(stored), "decode_stored_schema gave a non-object")
  local value = json.decode(input, true)
  if value == nil then return end
  accepted(value, "input")
  if is_object(value) and value.inputSchema ~= nil then accepted(value.inputSchema, "inputSchema") end
  local list = is_object(value) and (is_object(value.result) and value.result.tools or value.tools)
  if json.is_array(list) then
    for i, tool in ipairs(list) do
      if i > 64 then break end
      if is_object(tool) and tool.inputSchema ~= nil then accepted(tool.inputSchema, "tools[" .. i .. "]") end
    end
  end
end
