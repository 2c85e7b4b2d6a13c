-- core.validate_output (csrc/core/validate.c): a tool's structuredContent against its outputSchema,
-- keyword by keyword, the bounds (depth, steps, references), hostile inputs, and the check as
-- call_tool applies it (invalid, missing, opted out) over the fake server.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local Fake = require "support.fake_server"

local json = core.json
local array = json.array

-- Each case: schema text, value text, and true (valid) or the path of the failure.
local CASES = {
  -- type
  { '{"type":"string"}', '"x"', true },
  { '{"type":"string"}', "1", "$" },
  { '{"type":"integer"}', "3", true },
  { '{"type":"integer"}', "3.0", true },
  { '{"type":"integer"}', "3.5", "$" },
  { '{"type":"number"}', "3", true },
  { '{"type":"number"}', "3.5", true },
  { '{"type":"number"}', '"3"', "$" },
  { '{"type":"boolean"}', "false", true },
  { '{"type":"boolean"}', "0", "$" },
  { '{"type":"null"}', "null", true },
  { '{"type":"null"}', "{}", "$" },
  { '{"type":"object"}', "{}", true },
  { '{"type":"object"}', "[]", "$" },
  { '{"type":"array"}', "[]", true },
  { '{"type":"array"}', "{}", "$" },
  { '{"type":["string","null"]}', "null", true },
  { '{"type":["string","null"]}', '"a"', true },
  { '{"type":["string","null"]}', "2", "$" },
  { '{"type":["integer","string"]}', "2.0", true },
  { '{"type":"no such type"}', "2", true }, -- a name it does not know is not checked
  { '{"type":["string","no such type"]}', "2", true },
  { '{"type":[]}', "2", true }, -- an empty list names no type: not checked
  -- properties, required, additionalProperties
  { '{"properties":{"a":{"type":"integer"}}}', '{"a":1,"b":"x"}', true },
  { '{"properties":{"a":{"type":"integer"}}}', '{"a":"1"}', "$.a" },
  { '{"properties":{"a b":{"type":"integer"}}}', '{"a b":"1"}', '$["a b"]' },
  { '{"properties":{"q\\"":{"type":"integer"}}}', '{"q\\"":"1"}', '$["q\\""]' },
  { '{"properties":{"a":{"type":"integer"}}}', "[1]", true }, -- properties only apply to objects
  { '{"required":["a","b"]}', '{"a":1,"b":null}', true },
  { '{"required":["a","b"]}', '{"a":1}', "$" },
  { '{"required":true}', "{}", true }, -- the wrong shape: not checked
  { '{"additionalProperties":false,"properties":{"a":{}}}', '{"a":1}', true },
  { '{"additionalProperties":false,"properties":{"a":{}}}', '{"a":1,"b":2}', "$.b" },
  { '{"additionalProperties":{"type":"string"}}', '{"a":"x","b":2}', "$.b" },
  { '{"additionalProperties":{"type":"string"}}', '{"a":"x"}', true },
  { '{"additionalProperties":false,"patternProperties":{"^x":{}}}', '{"xa":1}', true },
  -- items, prefixItems, the older tuple form
  { '{"items":{"type":"integer"}}', "[1,2,3]", true },
  { '{"items":{"type":"integer"}}', '[1,2,"3"]', "$[2]" },
  { '{"prefixItems":[{"type":"string"},{"type":"integer"}]}', '["a",1,true]', true },
  { '{"prefixItems":[{"type":"string"},{"type":"integer"}]}', '["a","b"]', "$[1]" },
  { '{"prefixItems":[{"type":"string"}],"items":false}', '["a",1]', "$[1]" },
  { '{"items":[{"type":"string"}],"additionalItems":{"type":"integer"}}', '["a",1,"c"]', "$[2]" },
  { '{"items":[{"type":"string"}]}', '["a",1]', true },
  { '{"properties":{"a":{"items":{"properties":{"b":{"type":"integer"}}}}}}', '{"a":[{"b":1},{"b":"x"}]}',
    "$.a[1].b" },
  -- enum, const
  { '{"enum":["a","b",3]}', '"b"', true },
  { '{"enum":["a","b",3]}', "3.0", true },
  { '{"enum":["a","b",3]}', '"c"', "$" },
  { '{"enum":[{"x":[1,{"y":null}]}]}', '{"x":[1,{"y":null}]}', true },
  { '{"enum":[{"x":[1,{"y":null}]}]}', '{"x":[1,{"y":false}]}', "$" },
  { '{"const":{"a":1,"b":2}}', '{"b":2,"a":1}', true },
  { '{"const":{"a":1,"b":2}}', '{"a":1}', "$" },
  { '{"const":{"a":1}}', '{"a":1,"b":2}', "$" },
  { '{"const":[1,2]}', "[1,2,3]", "$" },
  { '{"const":null}', "null", true },
  { '{"const":{}}', "[]", "$" },
  -- numbers
  { '{"minimum":3}', "3", true },
  { '{"minimum":3}', "2.999", "$" },
  { '{"maximum":3}', "3", true },
  { '{"maximum":3}', "4", "$" },
  { '{"exclusiveMinimum":3}', "3", "$" },
  { '{"exclusiveMinimum":3}', "3.0001", true },
  { '{"exclusiveMaximum":3}', "3", "$" },
  { '{"minimum":3,"exclusiveMinimum":true}', "3", "$" },
  { '{"maximum":3,"exclusiveMaximum":true}', "2", true },
  { '{"maximum":9007199254740993}', "9007199254740992", true },
  { '{"maximum":9007199254740992}', "9007199254740993", "$" },
  { '{"minimum":"3"}', "1", true },
  -- strings, counted in characters
  { '{"minLength":2}', '"ab"', true },
  { '{"minLength":2}', '"\\u00e9"', "$" },
  { '{"maxLength":1}', '"\\u00e9"', true },
  { '{"maxLength":1}', '"\\ud83d\\ude00"', true },
  { '{"maxLength":2}', '"abc"', "$" },
  { '{"minLength":1}', "5", true },
  -- pattern: a subset of ECMA regular expressions, searched for anywhere, without backtracking
  { '{"pattern":"^a+$"}', '"aaa"', true },
  { '{"pattern":"^a+$"}', '"bbb"', "$" },
  { '{"pattern":"b"}', '"abc"', true },
  { '{"pattern":"^[a-z0-9_-]{3,16}$"}', '"ab"', "$" },
  { '{"pattern":"^\\\\d{3}-\\\\d{4}$"}', '"555-1234"', true },
  { '{"pattern":"^(foo|bar)+baz$"}', '"foobarbaz"', true },
  { '{"pattern":"^(foo|bar)+baz$"}', '"foofoo"', "$" },
  { '{"pattern":"^.$"}', '"\\ud83d\\ude00"', true }, -- a code point is one character
  { '{"pattern":"^[^\\\\d\\\\s]+$"}', '"a b"', "$" },
  { '{"pattern":"^\\\\s*$"}', '"\\u00a0\\t"', true },
  { '{"pattern":"^(?:ab){1,3}$"}', '"abababab"', "$" },
  { '{"properties":{"id":{"pattern":"^[A-Z]{2}\\\\d+$"}}}', '{"id":"gb12"}', "$.id" },
  { '{"pattern":"^a$"}', "1", true }, -- pattern applies to strings only
  { '{"pattern":"(?=a)b"}', '"zzz"', true }, -- outside the subset: not checked
  { '{"pattern":"(a)\\\\1"}', '"zzz"', true },
  { '{"pattern":"\\\\bword"}', '"zzz"', true },
  { '{"pattern":"\\\\p{L}"}', '"1"', true },
  { '{"pattern":"a{"}', '"zzz"', true },
  { '{"pattern":"(x{1000}){1000}"}', '"zzz"', true }, -- past the program's size: not checked
  -- arrays
  { '{"minItems":2}', "[1]", "$" },
  { '{"minItems":2}', "[1,2]", true },
  { '{"maxItems":1}', "[1,2]", "$" },
  -- combinators
  { '{"anyOf":[{"type":"string"},{"type":"integer"}]}', "1", true },
  { '{"anyOf":[{"type":"string"},{"type":"integer"}]}', "true", "$" },
  { '{"oneOf":[{"type":"string"},{"type":"integer"}]}', "1", true },
  { '{"oneOf":[{"type":"number"},{"type":"integer"}]}', "1", "$" },
  { '{"oneOf":[{"type":"string"},{"type":"integer"}]}', "null", "$" },
  { '{"allOf":[{"type":"integer"},{"minimum":2}]}', "2", true },
  { '{"allOf":[{"type":"integer"},{"minimum":2}]}', "1", "$" },
  { '{"allOf":[{"properties":{"a":{"type":"string"}}}]}', '{"a":1}', "$.a" },
  { '{"not":{"type":"string"}}', "1", true },
  { '{"not":{"type":"string"}}', '"x"', "$" },
  { '{"anyOf":[{"properties":{"a":{"type":"string"}}},{"required":["b"]}]}', '{"a":1}', "$" },
  -- boolean schemas
  { "true", '{"anything":[1]}', true },
  { "false", "null", "$" },
  { '{"properties":{"a":false}}', '{"a":1}', "$.a" },
  -- local references
  { '{"$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/n"}}}', '{"a":1}', true },
  { '{"$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/n"}}}', '{"a":"1"}', "$.a" },
  { '{"definitions":{"n":{"type":"integer"}},"items":{"$ref":"#/definitions/n"}}', '[1,"2"]', "$[1]" },
  { '{"$defs":{"a/b":{"type":"integer"}},"$ref":"#/$defs/a~1b"}', '"x"', "$" },
  { '{"$defs":{"n":{"minimum":5}},"$ref":"#/$defs/n","type":"integer"}', '6', true },
  { '{"$defs":{"n":{"minimum":5}},"$ref":"#/$defs/n","type":"integer"}', '6.5', "$" },
  { '{"$defs":{"n":{"minimum":5}},"$ref":"#/$defs/n","type":"integer"}', '4', "$" },
  { '{"prefixItems":[{"type":"string"},{"$ref":"#/prefixItems/0"}]}', '["a",2]', "$[1]" },
  { '{"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"items":{"$ref":"#/$defs/t"}}}}},'
    .. '"$ref":"#/$defs/t"}', '{"v":1,"kids":[{"v":2,"kids":[{"v":"3"}]}]}', "$.kids[0].kids[0].v" },
  -- unknown keywords are ignored
  { '{"format":"email","multipleOf":7,"uniqueItems":true,"if":false,"x-anything":1}', '"not an email"', true },
}

local function run(schema_text, value_text)
  return core.validate_output(json.decode(schema_text, true), json.decode(value_text, true))
end

describe("core.validate_output", function()
  it("checks each keyword of the subset, naming the failing place", function()
    for i, case in ipairs(CASES) do
      local ok, path, reason, unchecked = run(case[1], case[2])
      local what = string.format("case %d: %s against %s", i, case[2], case[1])
      if case[3] == true then
        assert.is_true(ok, what .. ": " .. tostring(path) .. " " .. tostring(reason))
      else
        assert.is_nil(ok, what)
        assert.equal(case[3], path, what)
        assert.is_string(reason, what)
        assert.is_nil(unchecked, what)
      end
    end
    assert.is_true(#CASES > 90)
  end)

  it("gives reasons a person can read", function()
    local _, _, reason = run('{"properties":{"a":{"type":"integer"}}}', '{"a":"x"}')
    assert.equal("expected integer, got string", reason)
    _, _, reason = run('{"required":["name"]}', "{}")
    assert.equal('the required property "name" is missing', reason)
    _, _, reason = run('{"maximum":3}', "4")
    assert.equal("4 is above the maximum 3", reason)
    _, _, reason = run('{"minLength":2}', '"\\u00e9"')
    assert.equal("the string is 1 characters long, under the minLength 2", reason)
  end)

  it("takes a lazy listed schema, Lua sequences and json.null; a string is no schema", function()
    assert.is_true(core.validate_output({ type = "array", items = { type = "integer" } }, { 1, 2 }))
    assert.is_nil(core.validate_output({ type = "array", items = { type = "integer" } }, { 1, "2" }))
    -- JSON text is the caller's to decode: a server's string where a schema belongs is never read as one
    assert.same({ nil, "$", "the output schema is not a JSON object or a boolean", "schema" },
      { core.validate_output("false", 1) })
    assert.is_true(core.validate_output({ type = "null" }, json.null))
    local _, result = core.rpc_classify('{"id":1,"result":{"tools":[{"name":"t","outputSchema":'
      .. '{"type":"object","required":["n"]}}]}}', 1, "text")
    local tools = result.tools
    core.lazy_schemas(tools)
    local ok, path = core.validate_output(tools[1].outputSchema, {})
    assert.is_nil(ok)
    assert.equal("$", path)
    assert.is_true(core.validate_output(tools[1].outputSchema, { n = 1 }))
  end)

  it("searches patterns as ECMAScript does (these answers are node's RegExp with the u flag)", function()
    local ECMA = {
      { "^a+$", { { "aaa", true }, { "", false }, { "ab", false }, { "a", true } } },
      { "^[a-z0-9_-]{3,16}$",
        { { "abc", true }, { "ab", false }, { "abc_def-12", true },
        { "ABC", false }, { "abcdefghijklmnopq", false } } },
      { "\\d{3}-\\d{4}", { { "x555-1234y", true }, { "55-1234", false } } },
      { "^(foo|bar)+baz$", { { "foobarbaz", true }, { "baz", false }, { "foofoo", false } } },
      { "colou?r", { { "color", true }, { "colour", true }, { "colr", false } } },
      { "^\\s*$", { { "   ", true }, { "\t\n", true }, { " a", false }, { " ", true } } },
      { "^[^\\d\\s]+$", { { "abc", true }, { "a1", false }, { "a b", false }, { "é", true } } },
      { "^.$", { { "😀", true }, { "é", true }, { "\n", false }, { "ab", false } } },
      { "^\\w+@\\w+\\.com$", { { "a@b.com", true }, { "a@b.org", false } } },
      { "a{2}", { { "a", false }, { "aa", true } } },
      { "^a{2,}$", { { "a", false }, { "aa", true }, { "aaaa", true } } },
      { "^(a|ab)(c|bcd)(d*)$", { { "abcd", true }, { "acd", true }, { "abcdd", true } } },
      { "^(?:a*)*$", { { "aaaa", true }, { "aab", false } } },
      { "^(a+)+$", { { "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab", false }, { "aaaa", true } } },
      { "^[\\u0041-\\u005A]+$", { { "ABC", true }, { "abc", false } } },
      { "\\x41", { { "A", true }, { "B", false } } },
      { "^[.]$", { { ".", true }, { "a", false } } },
      { "^\\.$", { { ".", true }, { "a", false } } },
      { "[]", { { "a", false }, { "", false } } },
      { "^[^]$", { { "a", true }, { "ab", false } } },
      { "^$", { { "", true }, { "a", false } } },
      { "a|", { { "b", true }, { "", true } } },
      { "^(|a)b$", { { "b", true }, { "ab", true }, { "aab", false } } },
      { "^\\/\\*$", { { "/*", true }, { "a", false } } },
      { "^[\\-a]+$", { { "-a-", true }, { "b", false } } },
      { "^[a\\]]+$", { { "a]", true }, { "b", false } } },
      { "^\\d+(\\.\\d{1,2})?$", { { "12", true }, { "12.5", true }, { "12.555", false }, { ".", false } } },
      { "^[A-Z]{2}\\d{2}[A-Z0-9]{1,30}$", { { "GB82WEST12345698765432", true }, { "gb82", false } } },
      { "^[\\w.+-]+$", { { "a.b+c-d", true }, { "a b", false } } },
      { "ab*?c", { { "ac", true }, { "abbc", true }, { "ab", false } } },
      { "^(ab){1,3}$", { { "ab", true }, { "ababab", true }, { "abababab", false } } },
    }
    local count = 0
    for _, case in ipairs(ECMA) do
      for _, probe in ipairs(case[2]) do
        local ok = core.validate_output({ type = "string", pattern = case[1] }, probe[1])
        assert.equal(probe[2], ok == true, string.format("%q against %q", case[1], probe[1]))
        count = count + 1
      end
    end
    assert.equal(82, count)
  end)

  it("searches patterns in time linear in the string, whatever the pattern", function()
    local started = os.clock()
    local ok, path, reason = core.validate_output({ pattern = "^(a+)+$" }, string.rep("a", 100000) .. "b")
    assert.is_nil(ok)
    assert.equal("$", path)
    assert.equal("the string does not match the pattern ^(a+)+$", reason)
    assert.is_nil(core.validate_output({ pattern = "^(a|a)*(a|aa)*$" }, string.rep("a", 200000) .. "b"))
    assert.is_true(os.clock() - started < 5)
    -- a thread alive from every place at once: the search is charged for each, and stops at the budget
    local _, _, _, unchecked = core.validate_output({ pattern = string.rep("a", 1000) },
      string.rep(string.rep("a", 999) .. "b", 100))
    assert.equal("steps", unchecked)
  end)

  it("refuses a schema it cannot read, saying so", function()
    for _, schema in ipairs { '{"$ref":"#/$defs/missing"}', '{"$ref":"https://example.com/s.json"}',
      '{"$ref":"#anchor"}', '{"$ref":5}' } do
      local ok, path, reason, unchecked = run(schema, "1")
      assert.is_nil(ok)
      assert.equal("$", path)
      assert.is_string(reason)
      assert.equal("schema", unchecked, schema)
    end
    assert.same({ nil, "$", "the output schema is not a JSON object or a boolean", "schema" },
      { core.validate_output("{not json", 1) })
    local _, _, _, unchecked = core.validate_output(array { 1 }, 1)
    assert.equal("schema", unchecked)
    _, _, _, unchecked = core.validate_output(json.null, 1)
    assert.equal("schema", unchecked)
  end)

  describe("bounds", function()
    it("ends a reference to itself at 64 levels", function()
      local ok, path, reason, unchecked = run('{"$ref":"#"}', "1")
      assert.is_nil(ok)
      assert.equal("$", path)
      assert.truthy(reason:find("64", 1, true))
      assert.equal("depth", unchecked)
      local _, _, _, again = run('{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}},'
        .. '"$ref":"#/$defs/a"}', "1")
      assert.equal("depth", again)
    end)

    it("ends a deep schema over a deep value at 64 levels, and a shallow schema reads no deeper", function()
      local deep = string.rep("[", 400) .. string.rep("]", 400)
      local tree = '{"$defs":{"a":{"type":"array","items":{"$ref":"#/$defs/a"}}},"$ref":"#/$defs/a"}'
      local ok, path, _, unchecked = run(tree, deep)
      assert.is_nil(ok)
      assert.equal("depth", unchecked)
      assert.truthy(path:find("^%$%[0%]%[0%]"))
      assert.is_true(run('{"type":"array"}', deep))
      _, _, _, unchecked = run('{"const":' .. deep .. "}", deep)
      assert.equal("depth", unchecked)
      -- a schema nested 200 levels by text
      local nested = string.rep('{"items":', 200) .. "{}" .. string.rep("}", 200)
      _, _, _, unchecked = run(nested, deep)
      assert.equal("depth", unchecked)
    end)

    it("ends an exponential schema on its step budget, quickly", function()
      local s = { type = "string" }
      for _ = 1, 40 do s = { anyOf = array { s, s } } end
      local started = os.clock()
      local ok, _, reason, unchecked = core.validate_output(s, 1)
      assert.is_nil(ok)
      assert.equal("steps", unchecked)
      assert.truthy(reason:find("steps", 1, true))
      assert.is_true(os.clock() - started < 10)
      -- the same with oneOf and not, which must look at every branch
      s = { type = "string" }
      for _ = 1, 40 do s = { oneOf = array { { ["not"] = s }, { ["not"] = s } } } end
      _, _, _, unchecked = core.validate_output(s, 1)
      assert.is_truthy(unchecked)
    end)

    it("checks a large array within the budget, and says so when one is too large", function()
      local items = {}
      for i = 1, 50000 do items[i] = '{"a":' .. i .. ',"b":"x"}' end
      local value = json.decode("[" .. table.concat(items, ",") .. "]")
      local schema = '{"type":"array","items":{"type":"object","required":["a","b"],'
        .. '"properties":{"a":{"type":"integer"},"b":{"type":"string"}}}}'
      assert.is_true(run(schema, "[]"))
      assert.is_true(core.validate_output(json.decode(schema), value))
      local huge = {}
      for i = 1, 1100000 do huge[i] = i end
      local ok, _, _, unchecked = core.validate_output({ items = { type = "integer", minimum = 0 } }, array(huge))
      assert.is_nil(ok)
      assert.equal("steps", unchecked)
    end)
  end)

  describe("hostile inputs", function()
    it("survives a cyclic value, a cyclic schema and values JSON cannot carry", function()
      local cyclic = {}
      cyclic.self = cyclic
      local _, _, _, unchecked = core.validate_output({ properties = { self = { ["$ref"] = "#" } } }, cyclic)
      assert.equal("depth", unchecked)
      local schema = {}
      schema.properties = { a = schema }
      assert.is_true(core.validate_output(schema, { a = { a = { a = cyclic } } }))
      _, _, _, unchecked = core.validate_output(schema, cyclic)
      assert.is_nil(unchecked)
      assert.is_nil(core.validate_output({ type = "object" }, print))
      assert.is_nil(core.validate_output({ type = "string" }, io.stdout))
      assert.is_true(core.validate_output({}, print))
    end)

    it("writes control bytes and long names in a path escaped, and names no long reference whole", function()
      local ok, path = core.validate_output({ additionalProperties = false }, { ["a\nb\"\\"] = 1 })
      assert.is_nil(ok)
      assert.equal('$["a\\u000ab\\"\\\\"]', path)
      local name = string.rep("x", 200000)
      ok, path = core.validate_output({ additionalProperties = false }, { [name] = 1 })
      assert.is_nil(ok)
      assert.equal("$." .. name, path)
      local _, _, reason = core.validate_output({ ["$ref"] = "#/" .. name }, 1)
      assert.is_true(#reason < 200)
    end)

    it("raises only for a missing argument", function()
      assert.has_error(function() core.validate_output() end)
      assert.has_error(function() core.validate_output({}) end)
    end)
  end)
end)

-- The check as call_tool applies it, over the fake server.
local function connect(fake, extra)
  local options = {
    url = "https://mcp.example.com/rpc", identifier = "srv",
    transport = fake, clock = fake.clock, health = mcp.health.discard,
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  return fake:hold(mcp.connect(options))
end

local LISTING = { tools = array {
  { name = "count", inputSchema = { type = "object" },
    outputSchema = { type = "object", required = array { "n" }, properties = { n = { type = "integer" } } } },
  { name = "free", inputSchema = { type = "object" } },
} }

local function result(structured, is_error)
  return { content = array { { type = "text", text = "done" } }, structuredContent = structured, isError = is_error }
end

describe("call_tool with an outputSchema", function()
  for _, form in ipairs { "tables", "text", "kept" } do
    it("hands over a matching result, refuses a mismatched or missing one (listing as " .. form .. ")", function()
      local fake = Fake.new():will_handshake():will_return(LISTING)
        :will_return(result { n = 3 })
        :will_return(result { n = "3" })
        :will_return { content = array { { type = "text", text = "no structure" } } }
      local conn = connect(fake)
      assert(conn:list_tools { schemas = form })
      local out = assert(conn:call_tool("count", {}))
      assert.equal(3, out.structured.n)
      local ok, message, err = conn:call_tool("count", {})
      assert.is_nil(ok)
      assert.equal("invalid_output", err.kind)
      assert.equal("$.n", err.path)
      assert.equal("expected integer, got string", err.detail)
      assert.equal("count", err.tool)
      assert.equal("srv", err.server)
      assert.is_nil(err.unchecked)
      assert.equal('The result of tool "count" of MCP server "srv" does not match the tool\'s output schema at '
        .. "$.n: expected integer, got string. The result was not used.", message)
      ok, _, err = conn:call_tool("count", {})
      assert.is_nil(ok)
      assert.equal("invalid_output", err.kind)
      assert.equal("$", err.path)
      assert.truthy(err.detail:find("no structuredContent", 1, true))
    end)
  end

  for _, form in ipairs { "tables", "text", "kept" } do
    it("reads a listed string where a schema belongs as no schema (listing as " .. form .. ")", function()
      local listing = { tools = array { { name = "odd", inputSchema = { type = "object" }, outputSchema = "{}" } } }
      local fake = Fake.new():will_handshake():will_return(listing):will_return(result { n = 1 })
      local conn = connect(fake)
      assert(conn:list_tools { schemas = form })
      local ok, _, err = conn:call_tool("odd", {})
      assert.is_nil(ok)
      assert.equal("schema", err.unchecked)
      assert.equal("the output schema is not a JSON object or a boolean", err.detail)
    end)
  end

  it("takes error results, tools without a schema and unlisted connections unchecked", function()
    local fake = Fake.new():will_handshake():will_return(LISTING)
      :will_return(result({ n = "bad" }, true))
      :will_return(result { anything = true })
    local conn = connect(fake)
    assert(conn:list_tools())
    local out = assert(conn:call_tool("count", {}))
    assert.is_true(out.is_error)
    assert(conn:call_tool("free", {}))
    local unlisted = Fake.new():will_handshake():will_return(result { n = "bad" })
    assert(connect(unlisted):call_tool("count", {}))
  end)

  it("takes results unchecked with validate_output = false", function()
    local fake = Fake.new():will_handshake():will_return(LISTING):will_return(result { n = "3" })
      :will_return { content = array {} }
    local conn = connect(fake, { validate_output = false })
    assert(conn:list_tools())
    assert.equal("3", assert(conn:call_tool("count", {})).structured.n)
    assert(conn:call_tool("count", {}))
  end)

  it("says when the check could not be finished", function()
    local listing = { tools = array { { name = "loop", inputSchema = { type = "object" },
      outputSchema = { ["$ref"] = "#/$defs/gone" } } } }
    local fake = Fake.new():will_handshake():will_return(listing):will_return(result { n = 1 })
    local conn = connect(fake)
    assert(conn:list_tools())
    local ok, message, err = conn:call_tool("loop", {})
    assert.is_nil(ok)
    assert.equal("invalid_output", err.kind)
    assert.equal("schema", err.unchecked)
    assert.truthy(message:find("could not be checked", 1, true))
  end)

  it("checks the outcome of a call that ran as a task too", function()
    local function task(status)
      return { taskId = "t-1", status = status, createdAt = os.date("!%Y-%m-%dT%H:%M:%SZ"),
        lastUpdatedAt = os.date("!%Y-%m-%dT%H:%M:%SZ"), ttl = 600000, pollInterval = 0 }
    end
    local fake = Fake.new()
    fake:will_return({ protocolVersion = "2025-11-25", serverInfo = { name = "tasks", version = "1" },
      capabilities = { tools = {}, tasks = { requests = { tools = { call = {} } } } } }, "sess-1")
    fake:will_return { tools = array { { name = "long", inputSchema = { type = "object" },
      execution = { taskSupport = "required" },
      outputSchema = { type = "object", properties = { n = { type = "integer" } } } } } }
    fake:will_return { task = task("working") }
    fake:will_return(task("completed"))
    fake:will_return(result { n = 1.5 })
    local conn = connect(fake, { tasks = true })
    assert(conn:list_tools())
    local ok, _, err = conn:call_tool("long", {})
    assert.is_nil(ok)
    assert.equal("invalid_output", err.kind)
    assert.equal("$.n", err.path)
    assert.equal("expected integer, got a number with a fraction", err.detail)
    assert.equal("tasks/result", fake:methods()[#fake:methods()])
  end)

  it("checks the option's type", function()
    assert.has_error(function() connect(Fake.new(), { validate_output = "no" }) end,
      "validate_output must be a boolean, not a string")
  end)

  it("reaches a model as an error result through an imported tool", function()
    local tool = require "mcpclient.agent.tool"
    local fake = Fake.new():will_handshake():will_return(LISTING):will_return(result { n = "3" })
    local conn = connect(fake)
    assert(conn:list_tools())
    local imported = tool.new { server = { identifier = "srv", name = "srv", requires_approval = "0" },
      local_name = "mcp_srv_count", remote_name = "count", parameters = { type = "object" },
      connection = function() return conn end }
    local shown = imported:execute({})
    assert.is_true(shown.is_error)
    assert.equal("invalid_output", shown.err.kind)
    assert.truthy(shown.text:find('The result of tool "count" of MCP server "srv" does not match', 1, true))
    assert.truthy(shown.text:find("The result was not used.", 1, true))
  end)
end)
