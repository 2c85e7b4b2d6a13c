-- core.normalise_schema / decode_stored_schema: the schema normaliser (keep only what a model can be
-- told faithfully, refuse the whole tool otherwise, say why) and the stored-schema reader; the
-- conformance items 6-15 pin the same cases over a connection.
local core = require "mcpclient.core"
local json = core.json

local function decode(text)
  return assert(json.decode(text, true))
end

local function kw_reason(kw)
  return 'it uses "' .. kw .. '", which this import does not carry: dropping the keyword would widen what '
    .. "the tool accepts, letting a model produce arguments the server then rejects"
end

local NO_SCHEMA = "the server advertised no parameter schema"
local NOT_OBJECT = 'its top-level type is not "object"'
-- Each shape refusal names the key that caused it.
local BAD = {
  description = 'its "description" is not a string',
  additionalProperties = 'its "additionalProperties" is a schema (only true, false or {} is carried)',
  required = 'its "required" is not a list of strings',
  properties = 'its "properties" is not an object of schemas',
  unencodable = "it holds a value JSON cannot carry",
}
local TOO_DEEP = "it nests deeper than 12 levels"
local BAD_UTF8 = "it contains bytes that are not valid UTF-8"
local TOO_BIG = "it exceeds 16384 bytes once stored"

-- Refused with exactly this reason.
local function refused(value, reason)
  local schema, why = core.normalise_schema(value)
  assert.is_nil(schema)
  assert.equal(reason, why)
end

-- Accepted; returns the normalised schema.
local function accepted(value)
  local schema, why = core.normalise_schema(value)
  assert.is_nil(why)
  assert.is_table(schema)
  return schema
end

-- n object levels counting the root, the innermost holding a string leaf. Each declared object costs
-- two container levels (the schema and its properties map), so with a depth cap of 12 five nested
-- objects fit and six do not.
local function nested_objects(n)
  local node = { type = "string" }
  for _ = 1, n - 1 do
    node = { type = "object", properties = { child = node } }
  end
  return { type = "object", properties = { child = node } }
end

-- The same chain (n objects counting the root) as JSON text, so key order and markers come from the codec.
local function nested_objects_json(n)
  local s = '{"type":"string"}'
  for _ = 1, n do
    s = '{"type":"object","properties":{"child":' .. s .. "}}"
  end
  return s
end

describe("normalise_schema", function()
  it("keeps only the retained keys, in the retained order (conformance 6)", function()
    local input = decode([[{
      "title": "Read page",
      "$id": "https://example.com/schemas/read-page",
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "required": ["uid"],
      "properties": {"uid": {"type": "integer", "description": "Page id", "minimum": 1}},
      "examples": [{"uid": 3}],
      "additionalProperties": false,
      "x-vendor-hint": "fast",
      "description": "Reads one page",
      "type": "object"
    }]])
    local schema = accepted(input)
    assert.same({ "type", "description", "properties", "required", "additionalProperties" }, json.key_order(schema))
    assert.equal('{"type":"object","description":"Reads one page",'
      .. '"properties":{"uid":{"type":"integer","description":"Page id","minimum":1}},'
      .. '"required":["uid"],"additionalProperties":false}', json.encode(schema))
    for _, k in ipairs({ "title", "$id", "$schema", "examples", "x-vendor-hint" }) do
      assert.is_nil(schema[k])
    end
  end)

  it("returns a new table and carries nested values by reference, untouched", function()
    local input = decode('{"type":"object","title":"t","properties":{"q":{"type":"string"}},"required":["q"]}')
    local schema = accepted(input)
    assert.is_false(rawequal(schema, input))
    assert.is_true(rawequal(input.properties, schema.properties))
    assert.is_true(rawequal(input.required, schema.required))
    assert.equal("t", input.title)
    assert.is_true(json.is_array(schema.required))
  end)

  it("orders the retained union keys after the others", function()
    local input = decode('{"not":{"required":["x"]},"oneOf":[{}],"anyOf":[{}],"allOf":[{}],"type":"object"}')
    local schema = accepted(input)
    assert.same({ "type", "allOf", "anyOf", "oneOf", "not" }, json.key_order(schema))
    assert.equal('{"type":"object","allOf":[{}],"anyOf":[{}],"oneOf":[{}],"not":{"required":["x"]}}',
      json.encode(schema))
  end)

  it("counts a retained key whose value is JSON null as present", function()
    local schema = accepted(decode('{"type":"object","allOf":null}'))
    assert.equal(json.null, schema.allOf)
    assert.equal('{"type":"object","allOf":null}', json.encode(schema))
    refused(decode('{"type":"object","description":null}'), BAD.description)
  end)

  it("keeps {} an object and [] an array through encode, decode and normalise again", function()
    local text = '{"type":"object","properties":{},"required":[]}'
    local first = json.encode(accepted(decode(text)))
    assert.equal(text, first)
    local second = json.encode(accepted(decode(first)))
    assert.equal(first, second)
    local nested = '{"type":"object","properties":{"o":{"type":"object","properties":{}},"a":{}}}'
    assert.equal(nested, json.encode(accepted(decode(nested))))
  end)

  it("accepts a plain Lua schema", function()
    local schema = accepted({ type = "object", properties = { q = { type = "string" } }, required = { "q" } })
    assert.equal('{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}', json.encode(schema))
    accepted({ type = "object", properties = {}, required = json.array() })
  end)

  describe("accepts", function()
    it("DeepWiki's anyOf property", function()
      local text = '{"type":"object","properties":{"repoName":{"anyOf":[{"type":"string"},'
        .. '{"type":"array","items":{"type":"string"}}],"description":"owner/repo"}},"required":["repoName"]}'
      local schema = accepted(decode(text))
      assert.equal(text, json.encode(schema))
    end)

    it("a top-level anyOf of required alternatives", function()
      local text = '{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},'
        .. '"anyOf":[{"required":["a"]},{"required":["b"]}]}'
      assert.equal(text, json.encode(accepted(decode(text))))
    end)

    it("a refused keyword that sits only inside a dropped key, without blaming it", function()
      local schema = accepted(decode('{"type":"object","examples":[{"$ref":"#/x","anyOf":[]}],'
        .. '"x-vendor":{"if":{},"then":{}},"title":{"patternProperties":{}}}'))
      assert.equal('{"type":"object"}', json.encode(schema))
    end)

    it("an oversized annotation that is dropped", function()
      accepted({ type = "object", title = string.rep("t", 20000) })
    end)

    it("invalid UTF-8 inside a dropped key", function()
      accepted({ type = "object", title = "bad \xff" })
    end)
  end)

  describe("refuses (conformance 7-14)", function()
    it("a nested $ref to a definition the schema does not hold, naming where it is", function()
      refused(decode('{"type":"object","properties":{"page":{"$ref":"#/$defs/page"}}}'),
        'its "$ref" at #/properties/page points to #/$defs/page, which the schema does not define')
    end)

    it("a nested dependentRequired", function()
      refused(decode('{"type":"object","properties":{"card":{"type":"object",'
        .. '"dependentRequired":{"number":["expiry"]}}}}'), kw_reason("dependentRequired"))
    end)

    it("a top-level if/then, naming the first keyword in list order", function()
      refused(decode('{"type":"object","then":{"required":["b"]},"if":{"required":["a"]}}'), kw_reason("if"))
      refused(decode('{"type":"object","then":{}}'), kw_reason("then"))
    end)

    it('type ["object","null"]', function()
      refused(decode('{"type":["object","null"],"properties":{}}'), NOT_OBJECT)
    end)

    it('type "string"', function()
      refused(decode('{"type":"string"}'), NOT_OBJECT)
    end)

    it("a value that is not a schema at all", function()
      refused("not a schema", NO_SCHEMA)
    end)

    it("14 nested object levels", function()
      refused(decode(nested_objects_json(14)), TOO_DEEP)
    end)

    it("a 16385-byte description", function()
      refused({ type = "object", description = string.rep("d", 16385) }, TOO_BIG)
    end)
  end)

  describe("step 1-3", function()
    it("gives no schema for nil, null, numbers and booleans", function()
      for _, v in ipairs({ json.null, 42, true, "" }) do refused(v, NO_SCHEMA) end
      refused(nil, NO_SCHEMA)
    end)

    it("needs the string type object exactly", function()
      refused(decode("{}"), NOT_OBJECT)
      refused(decode("[]"), NOT_OBJECT)
      refused(decode('{"type":"array"}'), NOT_OBJECT)
      refused(decode('{"type":"Object"}'), NOT_OBJECT)
      refused(decode('{"type":null}'), NOT_OBJECT)
      refused({ type = "object\0" }, NOT_OBJECT)
      accepted(decode('{"type":"object"}'))
    end)

    it("refuses a top-level keyword even though it would be dropped", function()
      refused(decode('{"type":"object","unevaluatedProperties":false,"$ref":"#"}'),
        'its "$ref" at # (#) names no whole definition in "$defs" or "definitions"')
      refused(decode('{"type":"object","$dynamicRef":"#meta","$defs":{}}'), kw_reason("$dynamicRef"))
    end)

    it("drops definitions nothing refers to: on their own they constrain nothing", function()
      local unused = decode('{"type":"object","$defs":{"x":{"type":"string"}}}')
      assert.equal('{"type":"object"}', json.encode(accepted(unused)))
      assert.equal('{"type":"object"}', json.encode(accepted(decode('{"type":"object","definitions":{}}'))))
    end)

    it("checks the top level before shape", function()
      refused(decode('{"type":"object","propertyNames":{},"required":"q"}'), kw_reason("propertyNames"))
    end)
  end)

  describe("step 5: well-formedness", function()
    local cases = {
      { '{"type":"object","description":5}', "description" },
      { '{"type":"object","additionalProperties":{"type":"string"}}', "additionalProperties" },
      { '{"type":"object","additionalProperties":[]}', "additionalProperties" },
      { '{"type":"object","additionalProperties":"false"}', "additionalProperties" },
      { '{"type":"object","properties":"x"}', "properties" },
      { '{"type":"object","properties":["a"]}', "properties" },
      { '{"type":"object","properties":[]}', "properties" },
      { '{"type":"object","properties":{"a":true}}', "properties" },
      { '{"type":"object","properties":{"a":[]}}', "properties" },
      { '{"type":"object","properties":{"a":null}}', "properties" },
      { '{"type":"object","properties":{"a":"string"}}', "properties" },
      { '{"type":"object","required":"query"}', "required" },
      { '{"type":"object","required":{"0":"q","2":"r"}}', "required" },
      { '{"type":"object","required":["q",7]}', "required" },
      { '{"type":"object","required":[null]}', "required" },
      { '{"type":"object","required":{}}', "required" },
    }
    for _, case in ipairs(cases) do
      it("refuses " .. case[1] .. ", naming " .. case[2], function()
        refused(decode(case[1]), BAD[case[2]])
      end)
    end

    it("refuses Lua tables that are not the right JSON shape", function()
      refused({ type = "object", properties = { { type = "string" } } }, BAD.properties)
      refused({ type = "object", properties = { q = { "string" } } }, BAD.properties)
      refused({ type = "object", required = {} }, BAD.required)
      refused({ type = "object", required = { "a", [3] = "c" } }, BAD.required)
      refused({ type = "object", required = { "a", x = "b" } }, BAD.required)
      refused({ type = "object", properties = { q = { type = "string" } }, allOf = { print } }, BAD.unencodable)
    end)

    -- The official SDK's zod .passthrough() emits {}: the schema that accepts every value, exactly as true.
    it('reads "additionalProperties": {} as true, the same constraint spelled as a boolean', function()
      local schema = accepted(decode('{"type":"object","properties":{"tag":{"type":"string"}},'
        .. '"additionalProperties":{}}'))
      assert.is_true(schema.additionalProperties)
      assert.equal('{"type":"object","properties":{"tag":{"type":"string"}},"additionalProperties":true}',
        json.encode(schema))
    end)

    it("accepts booleans for additionalProperties and an empty required array", function()
      accepted(decode('{"type":"object","additionalProperties":true,"required":[]}'))
      accepted(decode('{"type":"object","properties":{"a":{}}}'))
    end)

    it("does not type-check the unions", function()
      accepted(decode('{"type":"object","allOf":5,"anyOf":"x","oneOf":true,"not":[1]}'))
    end)
  end)

  describe("step 6: the walk", function()
    it("accepts 5 nested objects and refuses 6", function()
      accepted(nested_objects(5))
      refused(nested_objects(6), TOO_DEEP)
      accepted(decode(nested_objects_json(5)))
      refused(decode(nested_objects_json(6)), TOO_DEEP)
    end)

    it("counts lists as well as maps, even an empty one at level 13", function()
      local function arrays(n) return string.rep("[", n) .. string.rep("]", n) end
      accepted(decode('{"type":"object","anyOf":' .. arrays(11) .. "}"))  -- innermost at level 12
      refused(decode('{"type":"object","anyOf":' .. arrays(12) .. "}"), TOO_DEEP)
      refused(decode('{"type":"object","not":' .. string.rep('{"a":', 11) .. "{}" .. string.rep("}", 11) .. "}"),
        TOO_DEEP)
      accepted(decode('{"type":"object","not":' .. string.rep('{"a":', 10) .. "{}" .. string.rep("}", 10) .. "}"))
    end)

    it("refuses a property named like a keyword", function()
      refused(decode('{"type":"object","properties":{"if":{"type":"string"}}}'), kw_reason("if"))
      refused(decode('{"type":"object","properties":{"definitions":{"type":"string"}}}'), kw_reason("definitions"))
    end)

    it("names a keyword found anywhere in preference to depth", function()
      local deep = nested_objects(14)
      local node = deep
      for _ = 1, 14 do node = node.properties.child end
      node["$dynamicRef"] = "#/x" -- the string leaf, at level 29
      refused(deep, kw_reason("$dynamicRef"))
    end)

    it("checks a node's keys before descending into its values", function()
      refused(decode('{"type":"object","properties":{"a":{"$dynamicRef":"#"},"if":{"type":"string"}}}'),
        kw_reason("if"))
    end)

    it("names the first keyword in list order among one node's keys", function()
      refused(decode('{"type":"object","properties":{"a":{"then":{},"unevaluatedProperties":false,'
        .. '"$dynamicRef":"#"}}}'),
        kw_reason("$dynamicRef"))
    end)

    it("visits values in the server's key order", function()
      refused(decode('{"type":"object","properties":{"a":{"then":{}},"b":{"$dynamicRef":"#"}}}'), kw_reason("then"))
      refused(decode('{"type":"object","properties":{"b":{"$dynamicRef":"#"},"a":{"then":{}}}}'),
        kw_reason("$dynamicRef"))
      refused(decode('{"type":"object","anyOf":[{"else":{}},{"$defs":{}}]}'), kw_reason("else"))
      refused(decode('{"type":"object","anyOf":[{"$defs":{}},{"else":{}}]}'), kw_reason("$defs"))
    end)

    it("visits an unordered Lua table's keys sorted, so the answer never depends on hashing", function()
      for _ = 1, 20 do
        refused({ type = "object", properties = { b = { ["$dynamicRef"] = "#" }, a = { ["then"] = {} } } },
          kw_reason("then"))
        refused({ type = "object", properties = { zz = { ["$dynamicRef"] = "#" }, m = { ["else"] = {} } } },
          kw_reason("else"))
      end
    end)

    it("visits recorded keys first, then the rest sorted, like the encoder", function()
      local props = { a = { ["then"] = {} }, b = { ["$dynamicRef"] = "#" }, c = { ["if"] = {} } }
      json.set_key_order(props, { "c" })
      refused({ type = "object", properties = props }, kw_reason("if"))
      json.set_key_order(props, { "missing", "b" })
      refused({ type = "object", properties = props }, kw_reason("$dynamicRef"))
    end)

    it("ends on a cyclic table", function()
      local t = { type = "object", allOf = {} }
      t.allOf[1] = t
      refused(t, TOO_DEEP)
    end)

    it("ends on a table graph that shares subtables", function()
      local node = { type = "string" }
      for _ = 1, 11 do node = { node, node, node, node } end -- 4^11 paths, few tables
      local t0 = os.clock()
      refused({ type = "object", allOf = node }, TOO_BIG)
      assert.is_true(os.clock() - t0 < 5)
    end)
  end)

  describe("step 7: UTF-8 and size", function()
    it("refuses invalid UTF-8 in a kept value or key", function()
      refused({ type = "object", description = "bad \xff byte" }, BAD_UTF8)
      refused({ type = "object", properties = { ["q\xc3"] = { type = "string" } } }, BAD_UTF8)
      refused({ type = "object", anyOf = { { description = "\xed\xa0\x80" } } }, BAD_UTF8)
    end)

    -- Bytes the filtered schema takes with an empty description, escaped as the stored-size measure
    -- counts it ('/' and non-ASCII escaped).
    local overhead = #json.encode(accepted({ type = "object", description = "" }))

    it("measures the filtered encoding: 16384 bytes pass, 16385 do not", function()
      assert.equal(34, overhead)
      accepted({ type = "object", description = string.rep("a", 16384 - overhead) })
      refused({ type = "object", description = string.rep("a", 16385 - overhead) }, TOO_BIG)
    end)

    it("measures slashes escaped as \\/", function()
      local half = (16384 - overhead) // 2
      accepted({ type = "object", description = string.rep("/", half) })
      refused({ type = "object", description = string.rep("/", half + 1) }, TOO_BIG) -- 8176 raw bytes
    end)

    it("measures non-ASCII as \\uXXXX, surrogate pairs as 12 bytes", function()
      local n = (16384 - overhead) // 6
      accepted({ type = "object", description = string.rep("\u{E9}", n) })
      refused({ type = "object", description = string.rep("\u{E9}", n + 1) }, TOO_BIG)
      local m = (16384 - overhead) // 12
      accepted({ type = "object", description = string.rep("\u{1F600}", m) })
      refused({ type = "object", description = string.rep("\u{1F600}", m + 1) }, TOO_BIG)
    end)

    it("stores the accepted schema unescaped", function()
      local schema = accepted({ type = "object", description = "a/b \u{E9}" })
      assert.equal('{"type":"object","description":"a/b \u{E9}"}', json.encode(schema))
    end)
  end)

  it("raises when called without an argument", function()
    assert.has_error(function() core.normalise_schema() end)
  end)
end)

describe("decode_stored_schema (conformance 15)", function()
  it("reads nothing from [], null or broken text", function()
    assert.is_nil(core.decode_stored_schema("[]"))
    assert.is_nil(core.decode_stored_schema("null"))
    assert.is_nil(core.decode_stored_schema("{ broken"))
    assert.is_nil(core.decode_stored_schema(""))
    assert.is_nil(core.decode_stored_schema('  "x"'))
    assert.is_nil(core.decode_stored_schema("{} trailing"))
  end)

  it("reads {} as the empty object", function()
    local schema = core.decode_stored_schema("{}")
    assert.same({}, schema)
    assert.is_false(json.is_array(schema))
    assert.equal("{}", json.encode(schema))
  end)

  it("skips leading whitespace and keeps the stored key order and arrays", function()
    local text = '{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}},"required":[]}'
    local schema = core.decode_stored_schema(" \n\t" .. text)
    assert.equal(text, json.encode(schema))
    assert.equal(text, json.encode(accepted(schema)))
  end)

  it("raises on a non-string", function()
    assert.has_error(function() core.decode_stored_schema(nil) end)
    assert.has_error(function() core.decode_stored_schema({}) end)
  end)
end)

describe("normalise_schema_text", function()
  -- The table normaliser's answer for the value the text holds, encoded: what the text form must give.
  local function by_table(text)
    local schema, why = core.normalise_schema(json.decode(text, true))
    if not schema then return nil, why end
    return json.encode(schema)
  end

  local function nested(levels)
    return '{"type":"object","properties":' .. string.rep('{"a":', levels) .. "1" .. string.rep("}", levels) .. "}"
  end

  local CASES = {
    kept_and_reordered = '{"required":["q"],"title":"t","properties":{"q":{"type":"string"}},"type":"object"}',
    all_kept_in_order = '{"type":"object","description":"d","properties":{},"required":[],'
      .. '"additionalProperties":false}',
    additional_empty = '{"type":"object","additionalProperties":{}}',
    additional_schema = '{"type":"object","additionalProperties":{"type":"string"}}',
    blanks_and_escapes = ' { "type" : "object" , "description" : "caf\\u00e9 \\/ \\n \\u200b" } ',
    numbers = '{"type":"object","properties":{"n":{"minimum":-0,"maximum":1E2,"multipleOf":0.5}}}',
    top_keyword = '{"type":"object","$ref":"#/x"}',
    nested_keyword = '{"type":"object","properties":{"a":{"if":{}}}}',
    keyword_in_dropped = '{"type":"object","examples":[{"$ref":1}]}',
    keyword_as_property = '{"type":"object","properties":{"then":{"type":"string"}}}',
    required_mixed = '{"type":"object","required":["a",1]}',
    properties_array = '{"type":"object","properties":{"a":[]}}',
    description_number = '{"type":"object","description":5}',
    not_object = '{"type":"array"}',
    empty = "{}",
    array = "[]",
    null = "null",
    string = '"{}"',
    depth_12 = nested(10),
    depth_13 = nested(11),
    big_ascii = '{"type":"object","description":"' .. string.rep("a", 16340) .. '"}',
    big_by_slashes = '{"type":"object","description":"' .. string.rep("/", 8190) .. '"}',
    big_by_accents = '{"type":"object","description":"' .. string.rep("é", 3000) .. '"}',
    many_members = "{" .. (function()
      local t = {}
      for i = 1, 70 do t[i] = '"k' .. i .. '":' .. i end
      return table.concat(t, ",")
    end)() .. ',"type":"object"}',
  }

  for name, text in pairs(CASES) do
    it("answers as the table normaliser does: " .. name, function()
      local want, want_why = by_table(text)
      local got, why = core.normalise_schema_text(text)
      assert.equal(want, got)
      assert.equal(want_why, why)
    end)
  end

  it("gives a kept text equal to the one it was given as that very string", function()
    local text = '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}'
    assert.is_true(rawequal(text, core.normalise_schema_text(text)))
  end)

  it("says so when the text is not JSON, and raises on a non-string", function()
    for _, text in ipairs { "", "{", '{"type":"object",}', '{"a":1,"a":2}' } do
      assert.same({ nil, "its parameter schema is not valid JSON" }, { core.normalise_schema_text(text) })
    end
    assert.has_error(function() core.normalise_schema_text({ type = "object" }) end)
  end)

  it("measures the cap on the ASCII form: one byte under it is kept, one over refused", function()
    local head = '{"type":"object","description":"'
    local fits = head .. string.rep("/", (16384 - #head - 2) // 2) .. '"}'
    assert.is_string((core.normalise_schema_text(fits)))
    assert.same({ nil, TOO_BIG }, { core.normalise_schema_text(head .. string.rep("/", (16384 - #head - 2) // 2 + 1)
      .. '"}') })
  end)
end)
