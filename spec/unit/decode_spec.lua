-- The single-pass decoder (csrc/core/decode.c) behind core.json.decode and core.rpc_classify (csrc/core/rpc.c):
-- jansson's verdict and value on every input (fuzz/decode_fuzz.c checks that at scale against the
-- oracle, core.json_reference; these are the edges named in its promise), and its own message, with
-- the place, on every refusal.
local core = require "mcpclient.core"
local json = core.json
local reference = core.json_reference

-- A refusal as the decoder words it: what and where, or the nesting bound.
local function worded(message)
  return type(message) == "string" and (message:find("^invalid JSON: .+ at line %d+ column %d+$") ~= nil
    or message == "invalid JSON: nesting deeper than 512 levels")
end

local same

local function same_table(a, b)
  assert.equal(getmetatable(b), getmetatable(a))
  local n = 0
  for k, v in pairs(a) do
    n = n + 1
    same(v, rawget(b, k))
  end
  for _ in pairs(b) do n = n - 1 end
  assert.equal(0, n)
  assert.same(json.key_order(b), json.key_order(a))
end

function same(a, b)
  assert.equal(type(b), type(a))
  if type(a) == "table" then return same_table(a, b) end
  if type(a) == "number" then
    assert.equal(math.type(b), math.type(a))
    assert.is_true(a == b and (a ~= 0 or 1 / a == 1 / b))
    return
  end
  assert.equal(b, a)
end

-- Two classifier answers alike: the same values, but a refusal's detail in each one's own words.
local function same_answer(f, s, body)
  assert.equal(s.n, f.n, body)
  if f[1] == "malformed" and s[1] == "malformed" and worded(s[2]) then
    assert.is_true(worded(f[2]), tostring(f[2]))
    return
  end
  for i = 1, f.n do same(f[i], s[i]) end
end

local EDGES = {
  '{"a":[],"b":{},"c":null,"d":true,"e":false}', '[1,-0,-0.0,1.5e3,1E-400,0.1]', "9223372036854775807",
  "-9223372036854775808", "9223372036854775808", "-9223372036854775809", "1e400", "-1e400", "01", "1.",
  ".5", "-", "1e", "1e+", '"\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\"\\\\"', '"\\ud800"', '"\\udc00"',
  '"\\ud800\\u0041"', '"\\u0000"', '{"a\\u0000":1}', '"\\U0041"', '"\\x"', '"a\0b"', '"\t"', '"\127"',
  '"\xc3\xa9"', '"\xc3"', '"\xed\xa0\x80"', '"\xf4\x90\x80\x80"', '"\xc0\xaf"', '{"a":1,"a":2}',
  '{"b":1,"a":2,"c":{"z":1,"y":2}}', "", " ", "\t\n\r 1 \t\n\r", "1 x", "{}\0", "\0", "truex", "[true1]",
  "nul", "10\0", "\r10\0", "1.5\0", "true\0", "[null\0]", '{"a":1\0}', "10\0\0", "1 \0", "12\0abc",
  '"a"\0', "[1]\0", "1\0.5", "[1,]", "[,1]", '{"a":1,}', '{"a" 1}', '{a:1}', "\xef\xbb\xbf{}", string.rep("[", 512) ..
  string.rep("]", 512), string.rep("[", 513) .. string.rep("]", 513), '{"jsonrpc":"2.0","id":1,"result":{}}',
}

-- A string's end, an escape, a raw control, a DEL, a multi-byte character or a broken one at every
-- offset of the first three eight-byte words the scanner reads a string by, and as a key.
for k = 0, 23 do
  local run = string.rep("a", k)
  for _, hit in ipairs { "", "\\n", "\\u00e9", "\t", "\31", "\127", "\xc3\xa9", "\xc3", "\xc2\x85", "\0" } do
    EDGES[#EDGES + 1] = '"' .. run .. hit .. 'bcd"'
    EDGES[#EDGES + 1] = '{"' .. run .. hit .. '":' .. k .. '}'
  end
end

describe("the single-pass decoder", function()
  it("is the one decoder of json.decode and rpc_classify, held to the oracle apart from them", function()
    assert.equal("function", type(reference.decode))
    assert.equal("function", type(reference.classify))
    assert.are_not.equal(reference.decode, json.decode)
    assert.are_not.equal(reference.classify, core.rpc_classify)
    assert.is_nil(debug.getupvalue(json.decode, 3))        -- no jansson function kept behind it
    assert.is_nil(debug.getupvalue(core.rpc_classify, 3))
  end)

  it("decodes every edge as jansson does, plain and key-ordered, wording each refusal with its place", function()
    local slow = reference.decode
    for _, text in ipairs(EDGES) do
      for _, ordered in ipairs({ false, true }) do
        local fv, fm = json.decode(text, ordered)
        local sv = slow(text, ordered)
        if sv ~= nil then
          assert.is_nil(fm, string.format("the decoder refused %q, which jansson accepts", text))
          same(fv, sv)
        else
          assert.is_nil(fv, text)
          assert.is_true(worded(fm), tostring(fm))
        end
      end
    end
  end)

  it("says what it refused and where, line and column (bytes from the line's start)", function()
    local cases = {
      { '{"a":1,"a":2}', "duplicate object key at line 1 column 8" },
      { '[1,\n 2,]', "a value expected at line 2 column 4" },
      { '[1] x', "end of file expected at line 1 column 5" },
      { '"\xff"', "invalid UTF-8 in a string at line 1 column 2" },
      { '"a\tb"', "control character in a string at line 1 column 3" },
      { '"\\x"', "invalid escape in a string at line 1 column 2" },
      { '"\\ud800"', "invalid \\u escape in a string at line 1 column 2" },
      { '{"a\\u0000":1}', "\\u0000 in an object key at line 1 column 2" },
      { "9223372036854775808", "too big integer at line 1 column 1" },
      { "1e400", "real number overflow at line 1 column 1" },
      { "[truex]", "invalid literal at line 1 column 2" },
      { '{"a" 1}', "':' expected at line 1 column 6" },
      { '{"a":1 "b":2}', "',' or '}' expected at line 1 column 8" },
      { "[1 2]", "',' or ']' expected at line 1 column 4" },
      { "{a:1}", "object key expected at line 1 column 2" },
      { "[-]", "invalid number at line 1 column 2" },
      { "[01]", "',' or ']' expected at line 1 column 3" },
      { '{"a":', "unexpected end of text at line 1 column 6" },
      { "", "unexpected end of text at line 1 column 1" },
    }
    for _, case in ipairs(cases) do
      local v, message = json.decode(case[1])
      assert.is_nil(v, case[1])
      assert.equal("invalid JSON: " .. case[2], message)
    end
  end)

  it("refuses a repeated key wherever it stands, short or long, as jansson does", function()
    local slow = reference.decode
    local long = string.rep("k", 60)  -- past the length Lua interns
    local function object(keys)
      local members = {}
      for i, k in ipairs(keys) do members[i] = string.format("%q:%d", k, i) end
      return "{" .. table.concat(members, ",") .. "}"
    end
    local texts = {}
    for n = 2, 20 do
      for at = 1, n - 1 do
        local keys = {}
        for i = 1, n do keys[i] = "k" .. i end
        keys[n] = keys[at]                              -- the last repeats an earlier one
        texts[#texts + 1] = object(keys)
        keys[n] = long .. "x"
        keys[at] = long .. "x"                          -- a long key repeated
        texts[#texts + 1] = object(keys)
        keys[at] = long .. "y"                          -- long keys of one length that differ
        texts[#texts + 1] = object(keys)
        keys[at] = long                                 -- a prefix of the other
        texts[#texts + 1] = object(keys)
      end
    end
    for _, text in ipairs(texts) do
      local fv, fm = json.decode(text)
      local sv = slow(text)
      if sv == nil then
        assert.is_nil(fv, text)
        assert.matches("^invalid JSON: duplicate object key at line 1 column %d+$", fm)
      else
        same(fv, sv)
      end
    end
    assert.is_nil(json.decode(object { "a", "b", "a" }))
    assert.is_nil(json.decode(object { "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "k1" }))
    assert.is_nil(json.decode(object { "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "k9" }))
    assert.is_table(json.decode(object { long, long .. "x", "k" }))
  end)

  it("decodes a long array of alike objects as jansson does: keys reused, sizes carried, each key judged", function()
    local slow = reference.decode
    local forty, fortyone = string.rep("k", 39) .. "a", string.rep("k", 40) .. "b"  -- the interned limit and past it
    local entries = {}
    for i = 1, 300 do
      local members = { '"uri":"file:///' .. i .. '"', '"name":"n' .. i .. '"', '"size":' .. i }
      if i % 3 == 0 then members[#members + 1] = '"' .. string.char(97 + i % 26) .. string.char(97 + i % 7) .. '":1' end
      if i % 5 == 0 then members[#members + 1] = '"\\u006eame2":"escaped, equal to a plain key later"' end
      if i % 7 == 0 then members[#members + 1] = '"nested":{"uri":{},"name":[{"a":1,"b":2},{}]}' end
      if i % 11 == 0 then members[#members + 1] = '"' .. forty .. '":1,"' .. fortyone .. '":2,"":3' end
      if i % 13 == 0 then members = {} end
      entries[i] = "{" .. table.concat(members, ",") .. "}"
    end
    local text = '{"resources":[' .. table.concat(entries, ",") .. '],"uri":"top"}'
    for _, ordered in ipairs({ false, true }) do
      local fv, fm = json.decode(text, ordered)
      local sv = slow(text, ordered)
      assert.is_nil(fm)
      assert.is_table(fv)
      same(fv, sv)
    end
    -- a key seen in earlier objects (so remembered) repeated within a later one is still refused
    for _, repeated in ipairs { '"uri":2', '"\\u0075ri":2', '"name":3' } do
      local bad = '[{"uri":1,"name":2},{"uri":1,"name":2},{"uri":1,"name":2,' .. repeated .. '}]'
      assert.is_nil(json.decode(bad), bad)
      assert.is_nil(slow(bad), bad)
    end
  end)

  it("records key order only on non-empty objects, in text order", function()
    local v = json.decode('{"b":1,"a":{},"c":{"z":1,"y":2}}', true)
    assert.same({ "b", "a", "c" }, json.key_order(v))
    assert.is_nil(json.key_order(v.a))
    assert.same({ "z", "y" }, json.key_order(v.c))
    assert.is_nil(json.key_order(json.decode('{"b":1,"a":2}')))
  end)

  it("classifies every response shape as jansson's classifier does", function()
    local slow = reference.classify
    local bodies = {
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"}],"nextCursor":"x"}}',
      '{"jsonrpc":"2.0","id":2,"result":{}}', '{"jsonrpc":"2.0","id":1.0,"result":{}}',
      '{"jsonrpc":"2.0","id":"1","result":{}}', '{"jsonrpc":"2.0","id":1,"result":[]}',
      '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}',
      '{"jsonrpc":"2.0","id":null,"error":{"code":1.5}}', '{"jsonrpc":"2.0","id":7,"error":{"message":3}}',
      '{"jsonrpc":"2.0","id":1,"error":"x","result":{"a":1}}', '{"jsonrpc":"2.0","method":"ping","id":1}',
      '[{"jsonrpc":"2.0","id":1,"result":{}}]', '{"jsonrpc":"2.0","id":1}', "", " \0\v", "{", "null",
      '{"id":1,"result":' .. string.rep("[", 511) .. string.rep("]", 511) .. "}",
      '{"id":1,"result":{"a":' .. string.rep("[", 511) .. string.rep("]", 511) .. "}}",
    }
    for _, body in ipairs(bodies) do
      for _, ordered in ipairs({ false, true }) do
        for _, cap in ipairs({ false, 1, 2, 3, 65536 }) do
          local f = table.pack(core.rpc_classify(body, 1, ordered, cap or nil))
          local s = table.pack(slow(body, 1, ordered, cap or nil))
          same_answer(f, s, body)
        end
      end
    end
  end)

  it("classifies an answer read member by member as jansson's classifier does, whatever its members", function()
    local slow = reference.classify
    local members = { '"jsonrpc":"2.0"', '"id":1', '"id":2', '"id":null', '"id":"1"', '"result":{"a":[1,{"b":2}]}',
      '"result":[]', '"result":null', '"error":{"code":-1,"message":"m"}', '"error":"x"', '"method":"ping"',
      '"method":null', '"ix":1', '"resul":{}', '"x":{"y":[{},{}]}', '"a\\u0000":1', '"id":1.0',
      '"result":{"a":1,"a":2}', '"z":tru' }
    local bodies = { "{}", "{ }", ' { "id" : 1 , "result" : { } } ', '{"id":1,"result":{}}x', '{"id":1,"result":{}',
      '{"id":1,"result":{},}', '{"id" 1}', '{"id":1 "result":{}}' }
    for i = 1, #members do
      for j = 1, #members do
        bodies[#bodies + 1] = "{" .. members[i] .. "," .. members[j] .. "}"
        bodies[#bodies + 1] = '{"jsonrpc":"2.0",' .. members[i] .. ',"k":[],' .. members[j] .. "}"
      end
    end
    for n = 6, 11 do  -- around the most members a message is read without its table
      local list = {}
      for i = 1, n - 2 do list[i] = string.format('"k%d":%d', i, i) end
      list[#list + 1] = '"id":1'
      list[#list + 1] = '"result":{"v":' .. n .. "}"
      bodies[#bodies + 1] = "{" .. table.concat(list, ",") .. "}"
      list[1] = '"id":1'
      bodies[#bodies + 1] = "{" .. table.concat(list, ",") .. "}"   -- "id" twice
      list[1], list[n] = '"k1":1', '"k1":{}'
      bodies[#bodies + 1] = "{" .. table.concat(list, ",") .. "}"   -- "k1" twice, the last member
    end
    for _, body in ipairs(bodies) do
      for _, decoding in ipairs({ false, true }) do
        for _, cap in ipairs({ false, 1, 2, 3, 65536 }) do
          local f = table.pack(core.rpc_classify(body, 1, decoding, cap or nil))
          local s = table.pack(slow(body, 1, decoding, cap or nil))
          same_answer(f, s, body)
        end
      end
    end
  end)

  it("raises on misuse as jansson's entry points do", function()
    assert.has_error(function() json.decode(12) end)
    assert.has_error(function() core.rpc_classify("{}", "1") end)
    assert.has_error(function() core.rpc_classify("{}", 1.0) end)
    assert.has_error(function() core.rpc_classify("{}", 1, false, "many") end)
  end)
end)
