-- core.rpc_classify: one JSON-RPC response text classified for the client:
-- a result or an error for our id only (ids are real integers), exact JSON.
local core = require "mcpclient.core"
local json = core.json
local classify = core.rpc_classify

local NEITHER = "the response carries neither a result nor an error"

describe("core.rpc_classify", function()
  describe("result", function()
    it("returns the result object when the id matches", function()
      local kind, result = classify('{"jsonrpc":"2.0","id":7,"result":{"tools":[],"meta":{}}}', 7)
      assert.equal("result", kind)
      assert.is_true(json.is_array(result.tools))
      assert.is_false(json.is_array(result.meta))
      assert.equal('{"meta":{},"tools":[]}', json.encode(result))
    end)

    it("keeps integers exact and records key order only when asked", function()
      local text = '{"id":1,"result":{"z":9007199254740993,"a":{"y":1,"b":2}}}'
      local kind, result = classify(text, 1)
      assert.equal("result", kind)
      assert.equal(9007199254740993, result.z)
      assert.is_nil(json.key_order(result))
      kind, result = classify(text, 1, true)
      assert.equal("result", kind)
      assert.same({ "z", "a" }, json.key_order(result))
      assert.same({ "y", "b" }, json.key_order(result.a))
    end)

    it("accepts leading and trailing whitespace", function()
      assert.equal("result", (classify(' \r\n{"id":1,"result":{}}\n ', 1)))
    end)
  end)

  describe("error", function()
    it("returns code and message", function()
      local kind, code, message = classify('{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no"}}', 3)
      assert.equal("error", kind)
      assert.equal(-32601, code)
      assert.equal("integer", math.type(code))
      assert.equal("no", message)
    end)

    it("accepts a null id (the server could not read ours)", function()
      local kind, code, message = classify('{"id":null,"error":{"code":-32700,"message":"parse"}}', 5)
      assert.equal("error", kind)
      assert.equal(-32700, code)
      assert.equal("parse", message)
    end)

    it("defaults a non-integer code to 0 and a non-string message to 'no message'", function()
      local kind, code, message = classify('{"id":1,"error":{"code":"x","message":42}}', 1)
      assert.same({ "error", 0, "no message" }, { kind, code, message })
      kind, code, message = classify('{"id":1,"error":{"code":1.0}}', 1)
      assert.same({ "error", 0, "no message" }, { kind, code, message })
      kind, code, message = classify('{"id":1,"error":{}}', 1)
      assert.same({ "error", 0, "no message" }, { kind, code, message })
    end)

    it("wins over result when both are present", function()
      local kind, code = classify('{"id":1,"result":{"ok":true},"error":{"code":9,"message":"m"}}', 1)
      assert.equal("error", kind)
      assert.equal(9, code)
    end)

    it("is ignored when not an object, falling through to the result rule", function()
      assert.equal("result", (classify('{"id":1,"error":"bad","result":{}}', 1)))
      assert.same({ "malformed", NEITHER }, { classify('{"id":1,"error":"bad"}', 1) })
      assert.same({ "malformed", NEITHER }, { classify('{"id":1,"error":[1]}', 1) })
    end)

    it("keeps a message with a NUL byte whole", function()
      local _, _, message = classify('{"id":1,"error":{"code":1,"message":"a\\u0000b"}}', 1)
      assert.equal("a\0b", message)
    end)
  end)

  describe("other", function()
    it("reports a server request or notification", function()
      assert.same({ "other", "a server request or notification" },
        { classify('{"jsonrpc":"2.0","method":"notifications/progress","params":{}}', 1) })
      assert.same({ "other", "a server request or notification" },
        { classify('{"jsonrpc":"2.0","id":1,"method":"roots/list"}', 1) })
    end)

    it("reports a response to another request on an id mismatch", function()
      assert.same({ "other", "a response to another request" }, { classify('{"id":2,"result":{}}', 1) })
      assert.same({ "other", "a response to another request" },
        { classify('{"id":2,"error":{"code":1,"message":"x"}}', 1) })
    end)

    it("does not match a string id to an integer one", function()
      assert.same({ "other", "a response to another request" }, { classify('{"id":"1","result":{}}', 1) })
      assert.same({ "other", "a response to another request" },
        { classify('{"id":"1","error":{"code":1}}', 1) })
      assert.same({ "other", "a response to another request" }, { classify('{"id":1.0,"result":{}}', 1) })
    end)

    it("does not take a null or absent id for a result", function()
      assert.equal("other", (classify('{"id":null,"result":{}}', 1)))
      assert.equal("other", (classify('{"result":{}}', 1)))
    end)
  end)

  describe("malformed", function()
    it("reports an empty or blank body", function()
      for _, text in ipairs({ "", "   ", "\r\n\t", "\0\v " }) do
        assert.same({ "malformed", "empty body" }, { classify(text, 1) })
      end
    end)

    it("reports invalid JSON with the decoder's short message", function()
      local kind, detail = classify('{"id":1,"result":{', 1)
      assert.equal("malformed", kind)
      assert.matches("^invalid JSON: .* at line 1 column %d+$", detail)
      kind, detail = classify('{"id":1,"id":1,"result":{}}', 1)
      assert.equal("malformed", kind)
      assert.matches("duplicate object key", detail)
      kind, detail = classify('{"id":1,"result":{"x":"\xff"}}', 1)
      assert.equal("malformed", kind)
      assert.matches("^invalid JSON", detail)
    end)

    it("reports nesting deeper than 512 levels anywhere in the body", function()
      -- the body object is level 1 and the result level 2: 510 arrays reach level 512
      local deep = string.rep("[", 510) .. string.rep("]", 510)
      assert.equal("result", (classify('{"id":1,"result":{"a":' .. deep .. '}}', 1)))
      deep = string.rep("[", 511) .. string.rep("]", 511)
      assert.same({ "malformed", "invalid JSON: nesting deeper than 512 levels" },
        { classify('{"id":1,"result":{"a":' .. deep .. '}}', 1) })
      assert.equal("result", (classify('{"id":1,"result":{},"extra":' .. deep .. '}', 1)))
      deep = string.rep("[", 512) .. string.rep("]", 512)
      assert.same({ "malformed", "invalid JSON: nesting deeper than 512 levels" },
        { classify('{"id":1,"result":{},"extra":' .. deep .. '}', 1) })
    end)

    it("reports a body that is not a JSON object", function()
      for _, text in ipairs({ "[]", '[{"id":1,"result":{}}]', "1", '"x"', "null", "true" }) do
        assert.same({ "malformed", "the body is not a JSON object" }, { classify(text, 1) })
      end
    end)

    it("reports a response without a usable result or error", function()
      for _, text in ipairs({ '{"id":1}', '{"id":1,"result":null}', '{"id":1,"result":"x"}',
                              '{"id":1,"result":3}', '{"id":1,"result":[]}', '{"id":1,"result":[1]}',
                              '{"id":1,"error":null}', '{"jsonrpc":"2.0"}' }) do
        assert.same({ "malformed", NEITHER }, { classify(text, 1) })
      end
    end)
  end)

  it("raises on misuse", function()
    assert.has_error(function() classify(nil, 1) end)
    assert.has_error(function() classify(12, 1) end)
    assert.has_error(function() classify('{"id":1,"result":{}}', "1") end)
  end)

  describe("a tools/list answer read as a listing", function()
    local BODY = '{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"t","annotations":{"b":1,"a":2},'
      .. '"inputSchema":{"type":"object","title":"x","properties":{"z":{},"a":{}}},"outputSchema":[1, 2.50]},'
      .. '{"name":"u","inputSchema":{"type":"object","$defs":{}}}],"nextCursor":"c"}}'

    it("writes each tool's schemas as text with \"text\", the rest as values, no key order outside", function()
      local kind, result, containers = classify(BODY, 3, "text", 100)
      assert.equal("result", kind)
      local tool = result.tools[1]
      assert.equal('{"type":"object","title":"x","properties":{"z":{},"a":{}}}', tool.inputSchema)
      assert.equal("[1,2.5]", tool.outputSchema)
      assert.same({ b = 1, a = 2 }, tool.annotations)
      assert.is_nil(json.key_order(tool))
      assert.equal("c", result.nextCursor)
      -- the schemas' objects and arrays count toward the cap as decoded ones do
      assert.equal(select(3, classify(BODY, 3, true, 100)), containers)
      assert.equal("malformed", (classify(BODY, 3, "text", containers - 1)))
    end)

    it("judges each input schema as an import does with \"kept\"", function()
      local _, result = classify(BODY, 3, "kept", 100)
      assert.equal('{"type":"object","properties":{"z":{},"a":{}}}', result.tools[1].inputSchema)
      assert.equal("[1,2.5]", result.tools[1].outputSchema)
      assert.equal(select(2, core.normalise_schema(json.decode('{"type":"object","$defs":{}}'))),
        result.tools[2].inputSchema.refused)
    end)

    it("refuses what jansson refuses, and reads only the tools' schemas as text", function()
      local kind = classify(BODY:gsub('"title":"x"', '"title":"x","title":"y"'), 3, "text")
      assert.equal("malformed", kind)
      local _, result = classify('{"id":1,"result":{"inputSchema":{"a":1},"tools":[{"x":{"inputSchema":{}}}]}}', 1,
        "kept")
      assert.same({ a = 1 }, result.inputSchema)
      assert.same({ inputSchema = {} }, result.tools[1].x)
    end)

    it("writes a schema's text as json.encode writes its value, however the server spelt it", function()
      -- compact and plain: the text is the server's own bytes
      local compact = '{"type":"object","properties":{"n":{"type":"integer","minimum":-3,"default":0.5}},'
        .. '"required":["n"],"additionalProperties":false}'
      -- the same schema spelt otherwise: blanks, escapes, a real not in its shortest form, -0, a hidden
      -- code point (written \u200b), non-ASCII kept as UTF-8, an escaped key
      local spelt = {
        '{ "type" : "object",\n\t"properties" : { "n" : { "type" : "integer" , "minimum" : -3, "default" : 5e-1 } } ,'
          .. ' "required" : [ "n" ] , "additionalProperties" : false }\r\n',
        '{"type":"\\u006fbject","properties":{"\\u006e":{"type":"integer","minimum":-3,"default":0.50}},'
          .. '"required":["n"],"additionalProperties":false}',
        '{"a":"x\\/y\\n\\u00e9\\u200b","b":[-0,1.0,1E2,-0.0],"c":"é\u{200B}"}',
      }
      for _, schema in ipairs { compact, table.unpack(spelt) } do
        local body = '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","inputSchema":' .. schema
          .. ',"outputSchema":' .. schema .. "}]}}"
        local want = json.encode(json.decode(schema, true))
        local _, result = classify(body, 1, "text")
        assert.equal(want, result.tools[1].inputSchema)
        assert.equal(want, result.tools[1].outputSchema)
        local _, kept = classify(body, 1, "kept")
        local normalised, why = core.normalise_schema(json.decode(schema, true))
        assert.same(normalised and json.encode(normalised) or { refused = why }, kept.tools[1].inputSchema)
        assert.same(normalised and json.encode(normalised) or { refused = why },
          core.normalise_schema_text(schema) or { refused = select(2, core.normalise_schema_text(schema)) })
      end
      assert.equal(compact, select(2, classify('{"id":1,"result":{"tools":[{"inputSchema":' .. compact .. "}]}}", 1,
        "text")).tools[1].inputSchema)
      assert.equal('{"a":"x/y\\né\\u200b","b":[0,1.0,100.0,-0.0],"c":"é\\u200b"}',
        select(2, classify('{"id":1,"result":{"tools":[{"inputSchema":' .. spelt[3] .. "}]}}", 1, "text"))
        .tools[1].inputSchema)
    end)

    it("raises on a decoding it does not know", function()
      assert.has_error(function() classify(BODY, 3, "tables") end)
    end)
  end)

  describe("limits and messages", function()
    it("never quotes body bytes in a parse failure", function()
      for _, text in ipairs {
        '{"jsonrpc":"2.0","id":1,"result":SecretTokenValue}',
        '{"jsonrpc":"2.0","id":1,"result":{"a":"SecretTokenValue\n"}}',
        '{"jsonrpc":"2.0","id":1} SecretTokenValue',
      } do
        local kind, why = classify(text, 1)
        assert.equal("malformed", kind)
        assert.is_nil(why:find("Secret", 1, true), why)
        assert.truthy(why:find("^invalid JSON"), why)
      end
      local value, why = json.decode('{"token": SecretTokenValue}')
      assert.is_nil(value)
      assert.is_nil(why:find("Secret", 1, true), why)
    end)

    it("refuses a response that opens more objects and arrays than asked, before decoding it", function()
      local text = '{"jsonrpc":"2.0","id":1,"result":{"tools":[' .. string.rep("{},", 99) .. '{}],"s":"[[[{{{"}}'
      assert.equal("result", (classify(text, 1, false, 103))) -- the envelope, result, tools and 100 tools
      local kind, why = classify(text, 1, false, 102)
      assert.equal("malformed", kind)
      assert.equal("the response holds more than 102 objects and arrays", why)
      assert.equal("result", (classify(text, 1)))
      -- with a limit, a result also says how many it opened (so a walk can bound its pages together)
      assert.equal(103, select(3, classify(text, 1, false, 1000)))
      assert.is_nil(select(3, classify(text, 1)))
    end)
  end)
end)
