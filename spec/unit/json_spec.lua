-- core.json: the one exact JSON codec (wire, storage, Lua API). Decoding is jansson's; encoding is
-- hand-written. Integers stay exact, floats round-trip as floats, [] and {} survive,
-- duplicate keys / invalid UTF-8 / deep nesting are refused, output is deterministic.
local core = require "mcpclient.core"
local json = core.json

-- A float that is a float (not an integer subtype) and equal, including the sign of zero.
local function same_float(a, b)
  return math.type(a) == "float" and math.type(b) == "float" and a == b and 1 / a == 1 / b
end

local function nested(n) return string.rep("[", n) .. string.rep("]", n) end

describe("core.json", function()
  it("exposes exactly the documented API", function()
    local names = {}
    for k in pairs(json) do names[#names + 1] = k end
    table.sort(names)
    assert.same({ "array", "decode", "encode", "is_array", "is_object", "key_order", "null", "set_key_order",
                  "try_encode" }, names)
    assert.equal("userdata", type(json.null))
    assert.equal("function", type(core.rpc_classify))
  end)

  describe("round trips", function()
    it("keeps [] and {} and exact numbers through decode -> encode", function()
      local text = '{"a":[],"b":{},"n":1234567890123456789,"x":0.1}'
      local v = assert(json.decode(text))
      assert.equal(1234567890123456789, v.n)
      assert.equal("integer", math.type(v.n))
      assert.is_true(json.is_array(v.a))
      assert.is_false(json.is_array(v.b))
      assert.equal(text, json.encode(v))
    end)

    it("keeps math.maxinteger and math.mininteger exact", function()
      for _, n in ipairs({ math.maxinteger, math.mininteger, 0, -1, 9007199254740993 }) do
        local text = json.encode(n)
        assert.equal(string.format("%d", n), text)
        local back = json.decode(text)
        assert.equal("integer", math.type(back))
        assert.equal(n, back)
      end
    end)

    it("round-trips floats exactly and as floats", function()
      for _, x in ipairs({ 0.1, 1e300, 5e-324, 1.0, -0.0, 1 / 3, 2 ^ 63, -1.5e-7, 123456.789,
                           1.7976931348623157e308, 2.2250738585072014e-308 }) do
        local text = json.encode(x)
        local back = json.decode(text)
        assert.is_true(same_float(x, back), text)
      end
    end)

    it("writes the shortest round-tripping text, always readable as a float", function()
      assert.equal("0.1", json.encode(0.1))
      assert.equal("1.0", json.encode(1.0))
      assert.equal("-0.0", json.encode(-0.0))
      assert.equal("1e+20", json.encode(1e20))
      assert.equal("0.3333333333333333", json.encode(1 / 3))
      assert.equal("[1,1.0]", json.encode({ 1, 1.0 }))
    end)

    it("refuses NaN and infinities", function()
      for _, x in ipairs({ 0 / 0, math.huge, -math.huge }) do
        local text, err = json.try_encode(x)
        assert.is_nil(text)
        assert.matches("NaN", err)
        assert.has_error(function() json.encode({ x = x }) end)
      end
    end)

    it("preserves [] and {} when nested", function()
      local text = '{"a":[[],{},[{}],{"b":[]}],"c":{"d":{}}}'
      assert.equal(text, json.encode(json.decode(text)))
      assert.equal("[[]]", json.encode(json.decode("[[]]")))
      assert.equal("[{}]", json.encode(json.decode("[{}]")))
    end)

    it("keeps null positions in arrays and null object members", function()
      local v = json.decode('[1,null,3,null]')
      assert.equal(4, #v)
      assert.equal(json.null, v[2])
      assert.equal(json.null, v[4])
      assert.equal('[1,null,3,null]', json.encode(v))
      local o = json.decode('{"a":null}')
      assert.equal(json.null, o.a)
      assert.equal('{"a":null}', json.encode(o))
      assert.equal("null", json.encode(json.null))
      assert.equal("null", json.encode(nil))
      assert.equal(json.null, json.decode("null"))
    end)

    it("writes nil holes of a marked array as null", function()
      assert.equal("[1,null,3]", json.encode(json.array({ 1, nil, 3 })))
    end)

    it("decodes scalars at the top level", function()
      assert.equal(true, json.decode("true"))
      assert.equal(false, json.decode(" false "))
      assert.equal("x", json.decode('"x"'))
      assert.equal(42, json.decode("42"))
      assert.equal("float", math.type(json.decode("1e2")))
    end)

    it("is byte-stable: encode(decode(encode(x))) == encode(x)", function()
      local x = { z = { 3, 2, 1 }, a = { y = "é", b = json.array() }, m = 1.5, k = json.null, t = true }
      local once = json.encode(x)
      assert.equal(once, json.encode(json.decode(once)))
      assert.equal(once, json.encode(json.decode(once, true)))
    end)
  end)

  describe("strings", function()
    it("escapes quotes, backslashes and control characters, and nothing else", function()
      assert.equal([["a\"b\\c\b\f\n\r\t\u0001\u001f"]], json.encode('a"b\\c\b\f\n\r\t\1\31'))
      assert.equal('"/ \127 é 😀"', json.encode("/ \127 é 😀"))
    end)

    it("escapes C1 controls and bidi/invisible formatting characters, equal in value", function()
      local hidden = "\u{9B}31m\u{9D}0;t\u{9C} \u{202E}gnp.exe\u{202C} \u{2066}\u{2067}\u{2068}\u{2069}"
        .. " \u{61C}\u{200B}\u{200F}\u{202A}\u{2060}\u{FEFF}"
      local text = json.encode(hidden)
      assert.equal([["\u009b31m\u009d0;t\u009c \u202egnp.exe\u202c \u2066\u2067\u2068\u2069]]
        .. [[ \u061c\u200b\u200f\u202a\u2060\ufeff"]], text)
      assert.equal(hidden, json.decode(text))
      -- their neighbours stay raw
      assert.equal('"\u{A0}\u{200A}\u{2010}\u{2029}\u{202F}\u{206A}\u{FEFE}"',
        json.encode("\u{A0}\u{200A}\u{2010}\u{2029}\u{202F}\u{206A}\u{FEFE}"))
      assert.equal('{"\\u202ename":"\\u2066x"}', json.encode({ ["\u{202E}name"] = "\u{2066}x" }))
    end)

    it("round-trips \\u0000", function()
      local s = json.decode('"a\\u0000b"')
      assert.equal("a\0b", s)
      assert.equal('"a\\u0000b"', json.encode(s))
    end)

    it("decodes escaped surrogate pairs and refuses lone surrogates", function()
      assert.equal("😀", json.decode('"\\ud83d\\ude00"'))
      assert.equal("é", json.decode('"\\u00e9"'))
      local v, err = json.decode('"\\ud800"')
      assert.is_nil(v)
      assert.matches("^invalid JSON: ", err)
    end)

    it("refuses invalid UTF-8 when decoding", function()
      for _, bad in ipairs({ '"\xff"', '"\xc0\xaf"', '"\xe0\x80\xaf"', '"\xed\xa0\x80"', '"\xf4\x90\x80\x80"',
                             '"\xc3"', '{"\xff":1}' }) do
        local v, err = json.decode(bad)
        assert.is_nil(v)
        assert.matches("^invalid JSON: .* at line 1 column %d+$", err)
      end
    end)

    it("refuses invalid UTF-8, overlong forms and surrogates when encoding", function()
      for _, bad in ipairs({ "\xff", "\x80", "a\xc3", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xe0\x9f\xbf",
                             "\xf0\x80\x80\xaf", "\xf0\x8f\xbf\xbf", "\xed\xa0\x80", "\xed\xbf\xbf",
                             "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xe2\x82" }) do
        local text, err = json.try_encode(bad)
        assert.is_nil(text)
        assert.equal("a string is not valid UTF-8", err)
      end
      assert.is_nil(json.try_encode({ ["\xff"] = 1 }))
      assert.has_error(function() json.encode({ "\xc0\xaf" }) end)
    end)

    it("accepts the UTF-8 boundaries", function()
      for _, good in ipairs({ "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80",
                              "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf" }) do
        assert.equal(good, json.decode(json.encode(good)))
      end
    end)

    it("handles a long string with escapes spread through it", function()
      local parts = {}
      for i = 1, 5000 do parts[i] = "é\n\"/" .. i end
      local s = table.concat(parts)
      assert.equal(s, json.decode(json.encode(s)))
    end)

    -- MCP_JSON_ASCII (\/ and \uXXXX) is reachable from C only: spec/unit/schema_spec.lua
    -- pins it through the normaliser's 16384-byte size measure.
  end)

  describe("refusals", function()
    it("refuses duplicate keys", function()
      local v, err = json.decode('{"a":1,"a":2}')
      assert.is_nil(v)
      assert.matches("^invalid JSON: duplicate object key", err)
    end)

    it("reports bad text with a short message, never the whole input", function()
      local text = '{"x":"' .. string.rep("y", 5000) .. '",}'
      local v, err = json.decode(text)
      assert.is_nil(v)
      assert.matches("^invalid JSON: .* at line 1 column %d+$", err)
      assert.is_true(#err < 300)
      v, err = json.decode("")
      assert.is_nil(v)
      assert.matches("^invalid JSON", err)
      v, err = json.decode("[1] x")
      assert.is_nil(v)
      assert.matches("end of file expected", err)
    end)

    it("refuses out-of-range integers", function()
      local v, err = json.decode("9223372036854775808")
      assert.is_nil(v)
      assert.matches("too big integer", err)
      assert.equal(math.mininteger, json.decode("-9223372036854775808"))
    end)

    it("raises on a non-string text", function()
      assert.has_error(function() json.decode(42) end)
      assert.has_error(function() json.decode() end)
      assert.has_error(function() json.decode({}) end)
    end)

    it("accepts 512 levels of nesting and refuses 513 both ways", function()
      local ok = assert(json.decode(nested(512)))
      assert.equal(nested(512), json.encode(ok))
      local v, err = json.decode(nested(513))
      assert.is_nil(v)
      assert.equal("invalid JSON: nesting deeper than 512 levels", err)
      v, err = json.decode(nested(5000))
      assert.is_nil(v)
      assert.equal("invalid JSON: nesting deeper than 512 levels", err)
      local deep = {}
      local t = deep
      for _ = 2, 513 do
        t[1] = {}
        t = t[1]
      end
      local text, why = json.try_encode(deep)
      assert.is_nil(text)
      assert.matches("deeper than 512", why)
      assert.is_string(json.encode(deep[1]))
    end)

    it("refuses cycles without crashing", function()
      local a = { name = "a" }
      a.self = a
      local text, err = json.try_encode(a)
      assert.is_nil(text)
      assert.matches("cycle", err)
      local b = json.array()
      b[1] = b
      assert.is_nil(json.try_encode(b))
      assert.has_error(function() json.encode(a) end)
    end)

    it("refuses tables that mix key kinds", function()
      local cases = {
        { { 1, 2, x = 3 }, "mixes string and integer" },
        { { x = 1, [1] = 2 }, "mixes string and integer" },
        { { [1] = 1, [3] = 3 }, "sparse" },
        { { [0] = 1 }, "neither a string nor a positive integer" },
        { { [-1] = 1 }, "neither a string nor a positive integer" },
        { { [1.5] = 1 }, "neither a string nor a positive integer" },
        { { [true] = 1 }, "neither a string nor a positive integer" },
        { json.array({ 1, x = 2 }), "array%-marked" },
      }
      for _, case in ipairs(cases) do
        local text, err = json.try_encode(case[1])
        assert.is_nil(text)
        assert.matches(case[2], err)
      end
      local ok, err = pcall(json.encode, { 1, x = 2 })
      assert.is_false(ok)
      assert.matches("a table mixes", err)
    end)

    it("refuses functions, threads and userdata", function()
      for _, v in ipairs({ print, coroutine.create(print), io.stdout }) do
        local text, err = json.try_encode({ v })
        assert.is_nil(text)
        assert.matches("cannot be encoded", err)
      end
    end)

    it("leaves the stack and later encodes intact after a refusal", function()
      for _ = 1, 100 do
        assert.is_nil(json.try_encode({ a = { b = { 1, x = 1 } }, c = string.rep("z", 3000) }))
      end
      assert.equal('{"a":1}', json.encode({ a = 1 }))
    end)
  end)

  describe("tables and key order", function()
    it("encodes empty tables as {} and json.array() as []", function()
      assert.equal("{}", json.encode({}))
      assert.equal("[]", json.encode(json.array()))
      assert.equal("[]", json.encode(json.array({})))
      assert.equal("[1,2,3]", json.encode({ 1, 2, 3 }))
    end)

    it("marks and recognises arrays", function()
      local t = {}
      assert.equal(t, json.array(t))
      assert.is_true(json.is_array(t))
      assert.is_false(json.is_array({}))
      assert.is_false(json.is_array("x"))
      assert.is_true(json.is_array(json.decode("[1]")))
      assert.has_error(function() json.array("x") end)
    end)

    it("sorts object keys bytewise by default", function()
      assert.equal('{"A":1,"B":2,"a":3,"ab":4,"b":5}', json.encode({ b = 5, ab = 4, a = 3, B = 2, A = 1 }))
      local big, keys = {}, {}
      for i = 1, 300 do
        local k = string.format("k%04d", (i * 7919) % 1000)
        big[k] = i
        keys[#keys + 1] = k
      end
      table.sort(keys)
      local back = json.decode(json.encode(big), true)
      assert.same(keys, json.key_order(back))
    end)

    it("records decoded key order only when asked", function()
      local text = '{"z":1,"a":{"y":2,"b":3},"m":[{"q":1,"c":2}]}'
      local plain = json.decode(text)
      assert.is_nil(json.key_order(plain))
      assert.equal('{"a":{"b":3,"y":2},"m":[{"c":2,"q":1}],"z":1}', json.encode(plain))
      local ordered = json.decode(text, true)
      assert.same({ "z", "a", "m" }, json.key_order(ordered))
      assert.same({ "y", "b" }, json.key_order(ordered.a))
      assert.equal(text, json.encode(ordered))
    end)

    it("honours set_key_order: skips absent keys, appends unrecorded ones sorted", function()
      local t = { jsonrpc = "2.0", id = 1, method = "tools/call", params = {} }
      assert.equal(t, json.set_key_order(t, { "jsonrpc", "id", "method", "params" }))
      assert.equal('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}', json.encode(t))
      t.id = nil
      t.zeta, t.alpha = 1, 2
      assert.equal('{"jsonrpc":"2.0","method":"tools/call","params":{},"alpha":2,"zeta":1}', json.encode(t))
      json.set_key_order(t, { "params", "params", "nope" })
      assert.equal('{"params":{},"alpha":2,"jsonrpc":"2.0","method":"tools/call","zeta":1}', json.encode(t))
      json.set_key_order(t, nil)
      assert.is_nil(json.key_order(t))
      assert.has_error(function() json.set_key_order(t, { 1 }) end)
    end)

    it("ignores a table's own metatable other than the marker", function()
      local t = setmetatable({ b = 1, a = 2 }, { __index = function() return 0 end, __pairs = error })
      assert.equal('{"a":2,"b":1}', json.encode(t))
    end)

    it("encodes big objects and arrays", function()
      local o, a = {}, {}
      for i = 1, 2000 do
        o["key" .. i] = { i, tostring(i) }
        a[i] = i * 0.5
      end
      local back = json.decode(json.encode({ o = o, a = a }))
      assert.equal(2000, #back.a)
      assert.equal(1000.0, back.a[2000])
      assert.same({ 1234, "1234" }, back.o.key1234)
    end)
  end)

  describe("core.rpc_request", function()
    -- what the request text was when the transport joined it from pieces
    local function joined(id, method, params)
      return '{"jsonrpc":"2.0","id":' .. id .. ',"method":' .. json.encode(method) .. ',"params":'
        .. json.encode(params) .. "}"
    end

    it("writes the request the pieces made, byte for byte", function()
      local ordered = json.decode('{"z":1,"a":{"y":[1,2.5,"\\u00e9"],"b":null},"m":{}}', true)
      local cases = {
        { 1, "tools/call", { name = "echo", arguments = { message = "hello" } } },
        { 42, "tools/list", { cursor = "c\"\n\0" } },
        { 9007199254740993, "ping", {} },
        { math.maxinteger, "initialize", { protocolVersion = "2025-11-25", capabilities = {}, clientInfo = {} } },
        { -7, "x/\xc3\xa9", json.array { 1, json.null, true, false, 0.1, -0.0 } },
        { 0, "server/discover", ordered },
        { 3, "tools/call", { name = "t", arguments = { b = 1, a = 2, c = { 3, 4 }, [""] = "" } } },
      }
      for i, case in ipairs(cases) do
        assert.equal(joined(case[1], case[2], case[3]), core.rpc_request(case[1], case[2], case[3]), "case " .. i)
      end
    end)

    it("gives try_encode's reason when the params cannot be encoded, and raises on misuse", function()
      local bad = { { f = print }, { [1] = 1, x = 2 }, { s = "\xff" }, { n = 0 / 0 } }
      for _, params in ipairs(bad) do
        local text, why = core.rpc_request(1, "tools/call", params)
        assert.is_nil(text)
        assert.equal(select(2, json.try_encode(params)), why)
      end
      assert.is_nil((core.rpc_request(1, "\xff", {})))
      assert.has_error(function() core.rpc_request("1", "ping", {}) end)
      assert.has_error(function() core.rpc_request(1.5, "ping", {}) end)
      assert.has_error(function() core.rpc_request(1, nil, {}) end)
      assert.has_error(function() core.rpc_request(1, "ping") end)
    end)
  end)
end)
