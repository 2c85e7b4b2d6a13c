-- Local references in an input schema: what servers built on pydantic (the
-- MCP Python SDK among them) advertise for nested models, lists of models,
-- optional models and enums ("$defs" + "#/$defs/<Name>" from pydantic 2,
-- "definitions" + "#/definitions/<Name>" from pydantic 1). The fixtures in
-- spec/fixtures/pydantic are pydantic's own output (generate.py).
--
-- The 2025 revisions' rule keeps a schema a model can be shown whole: each
-- reference is written out and the definitions dropped; a recursive model
-- has no such form and is refused, naming the reference that recurses. The
-- 2026-07-28 rule carries a schema verbatim, references included, recursive
-- models too. Both refuse a dangling reference and never fetch one that
-- leaves the schema; the 2026-07-28 rule also refuses a reference that
-- returns to itself through references and in-place keywords alone.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local modern = require("mcpclient.era.2026_07_28").wire
local Fake = require "support.fake_server"

local json = core.json

local DIR = "spec/fixtures/pydantic/"

local function fixture(name)
  local f = assert(io.open(DIR .. name .. ".json", "rb"))
  local text = f:read("a")
  f:close()
  return text
end

-- The 2025 rule on the text, the table and the listing's kept form must agree; returns its answer.
local function legacy(text)
  local kept, why = core.normalise_schema(json.decode(text, true))
  local kept_text, why_text = core.normalise_schema_text(text)
  assert.equal(why, why_text)
  assert.equal(kept and json.encode(kept), kept_text)
  return kept_text, why
end

-- No "$ref", "$defs" or "definitions" key anywhere in a decoded value.
local function no_references(value, path)
  if type(value) ~= "table" then return end
  for k, v in pairs(value) do
    assert(k ~= "$ref" and k ~= "$defs" and k ~= "definitions", (path or "#") .. " still holds " .. tostring(k))
    no_references(v, (path or "#") .. "/" .. tostring(k))
  end
end

local ACCEPTED = { "nested", "list_of_models", "optional_model", "enum", "described_model", "deep" }

describe("local references under the 2025 rule (written out)", function()
  for _, version in ipairs { "v1", "v2" } do
    for _, name in ipairs(ACCEPTED) do
      it(version .. "-" .. name .. " is accepted with every reference written out", function()
        local kept = assert(legacy(fixture(version .. "-" .. name)))
        no_references(json.decode(kept))
      end)
    end
  end

  it("puts a definition where its reference was, keeping the server's key order (pydantic 2)", function()
    local source = json.decode(fixture("v2-nested"), true)
    local kept = json.decode(assert(legacy(fixture("v2-nested"))), true)
    assert.equal(json.encode(source["$defs"].Item), json.encode(kept.properties.item))
    assert.same({ "properties", "required", "title", "type" }, json.key_order(kept.properties.item))
    assert.equal("#/$defs/Item", source.properties.item["$ref"]) -- the caller's table is left as it was
  end)

  it("does the same for pydantic 1's definitions, inside lists and optional values", function()
    local source = json.decode(fixture("v1-list_of_models"), true)
    local kept = json.decode(assert(legacy(fixture("v1-list_of_models"))), true)
    assert.equal(json.encode(source.definitions.Item), json.encode(kept.properties.items.items))
    assert.equal(json.encode(source.definitions.Address), json.encode(kept.properties.address))
    local optional = json.decode(assert(legacy(fixture("v2-optional_model"))), true)
    assert.equal("object", optional.properties.address.anyOf[1].type)
    assert.same({ type = "null" }, optional.properties.address.anyOf[2])
  end)

  it("keeps what stands beside a reference, the definition joining as an allOf entry", function()
    local kept = json.decode(assert(legacy(fixture("v2-described_model"))), true)
    assert.equal("The item to add.", kept.properties.item.description)
    assert.equal(1, #kept.properties.item.allOf)
    assert.equal("Item", kept.properties.item.allOf[1].title)
    assert.same({ "description", "allOf" }, json.key_order(kept.properties.item))
    local both = assert(legacy('{"type":"object","$defs":{"A":{"type":"string"}},"properties":{"a":'
      .. '{"allOf":[{"minLength":1}],"$ref":"#/$defs/A"}}}'))
    assert.equal('{"type":"object","properties":{"a":{"allOf":[{"minLength":1},{"type":"string"}]}}}', both)
    local _, why = legacy('{"type":"object","$defs":{"A":{}},"properties":{"a":{"allOf":{},"$ref":"#/$defs/A"}}}')
    assert.equal('its "$ref" at #/properties/a stands beside an "allOf" that is not a list', why)
  end)

  it("refuses a recursive model, naming the reference that recurses", function()
    local _, why = legacy(fixture("v2-recursive"))
    assert.equal('its "$ref" at #/$defs/Node/properties/children/items leads back to #/$defs/Node, a definition it'
      .. " lies in: a recursive schema has no form without references", why)
    _, why = legacy(fixture("v1-mutually_recursive"))
    assert.equal('its "$ref" at #/definitions/Right/properties/left leads back to #/definitions/Left, a definition'
      .. " it lies in: a recursive schema has no form without references", why)
    _, why = legacy(fixture("v2-mutually_recursive"))
    assert.truthy(why:find("#/$defs/Right/properties/left/anyOf/0", 1, true), why)
    _, why = legacy('{"type":"object","$defs":{"A":{"$ref":"#/$defs/A"}},"properties":{"a":{"$ref":"#/$defs/A"}}}')
    assert.equal('its "$ref" at #/$defs/A leads back to #/$defs/A, a definition it lies in: a recursive schema has'
      .. " no form without references", why)
  end)

  it("refuses a dangling reference, naming where it is", function()
    local _, why = legacy('{"type":"object","$defs":{"Item":{}},"properties":{"x":{"items":{"$ref":"#/$defs/Iten"}}}}')
    assert.equal('its "$ref" at #/properties/x/items points to #/$defs/Iten, which the schema does not define', why)
    _, why = legacy('{"type":"object","properties":{"x":{"$ref":"#/definitions/X"}}}')
    assert.equal('its "$ref" at #/properties/x points to #/definitions/X, which the schema does not define', why)
    _, why = legacy('{"type":"object","$defs":{"X":[]},"properties":{"x":{"$ref":"#/$defs/X"}}}')
    assert.equal('its "$ref" at #/properties/x points to #/$defs/X, which is not a schema', why)
  end)

  it("of several bad references names the first in the schema's order, however its tables were built", function()
    -- many members, so a table's own layout (its size, the order keys went in) would decide a walk in hash
    -- order; the refusal must not depend on it (the listing's kept form and the table path agree)
    local members = {}
    for i = 1, 40 do members[#members + 1] = string.format('"p%02d":{"type":"string"}', i) end
    local text = '{"type":"object","properties":{' .. table.concat(members, ",", 1, 20)
      .. ',"items":{"type":"array","items":{"$ref":"#/$defs/Iten"}},' .. table.concat(members, ",", 21, 40)
      .. ',"address":{"$ref":"#/$defs/Adress"}},"$defs":{"Item":{},"Address":{}}}'
    local want = 'its "$ref" at #/properties/items/items points to #/$defs/Iten, which the schema does not define'
    assert.equal(want, select(2, legacy(text)))
    -- the same schema built by hand, its keys set in another order, the order written recorded
    local decoded = json.decode(text, true)
    local props, order = {}, json.key_order(decoded.properties)
    for i = #order, 1, -1 do props[order[i]] = decoded.properties[order[i]] end
    json.set_key_order(props, order)
    local by_hand = { type = "object", ["$defs"] = decoded["$defs"], properties = props }
    json.set_key_order(by_hand, { "type", "properties", "$defs" })
    assert.equal(want, select(2, core.normalise_schema(by_hand)))
    -- the listing's kept form, as the decoder reads it in a page
    local _, result = core.rpc_classify('{"id":1,"result":{"tools":[{"inputSchema":' .. text .. "}]}}", 1, "kept")
    assert.equal(want, result.tools[1].inputSchema.refused)
  end)

  it("never fetches a reference that leaves the schema, and takes only whole definitions", function()
    local _, why = legacy('{"type":"object","properties":{"x":{"$ref":"https://evil.example/s.json#/$defs/X"}}}')
    assert.equal('its "$ref" at #/properties/x points outside the schema (https://evil.example/s.json#/$defs/X), and'
      .. " references are never fetched", why)
    _, why = legacy('{"type":"object","$defs":{"X":{"properties":{"y":{}}}},"properties":{"x":'
      .. '{"$ref":"#/$defs/X/properties/y"}}}')
    assert.equal('its "$ref" at #/properties/x (#/$defs/X/properties/y) names no whole definition in "$defs" or'
      .. ' "definitions"', why)
    _, why = legacy('{"type":"object","properties":{"x":{"$ref":7}}}')
    assert.equal('its "$ref" at #/properties/x is not a string', why)
  end)

  it("reads ~0 and ~1 in a definition's name and clips what it shows of a hostile one", function()
    assert.equal('{"type":"object","properties":{"x":{"type":"string"}}}',
      legacy('{"type":"object","$defs":{"a/b~c":{"type":"string"}},"properties":{"x":{"$ref":"#/$defs/a~1b~0c"}}}'))
    local _, why = legacy('{"type":"object","properties":{"x\\u001b[31m":{"$ref":"#/$defs/\\u202e' .. ("z"):rep(300)
      .. '"}}}')
    assert.is_nil(why:find("[%c]"))
    assert.is_nil(why:find("\u{202e}", 1, true))
    assert.is_true(#why < 400)
  end)

  it("leaves data alone: a \"$ref\" inside default, enum, const or examples is not a reference", function()
    local _, why = legacy('{"type":"object","properties":{"x":{"default":{"$ref":"#/$defs/none"}}}}')
    assert.truthy(why:find('it uses "$ref"', 1, true), why)
  end)

  it("holds the caps on what the references write out: size and depth", function()
    -- each level doubles: 2^14 copies of the leaf would be written out
    local defs = { '"L0":{"type":"string"}' }
    for i = 1, 14 do
      defs[#defs + 1] = string.format('"L%d":{"type":"object","properties":{"a":{"$ref":"#/$defs/L%d"},'
        .. '"b":{"$ref":"#/$defs/L%d"}}}', i, i - 1, i - 1)
    end
    local _, why = legacy('{"type":"object","$defs":{' .. table.concat(defs, ",")
      .. '},"properties":{"x":{"$ref":"#/$defs/L14"}}}')
    assert.equal("it exceeds 16384 bytes once stored", why)
    local chain = {}
    for i = 1, 40 do
      chain[#chain + 1] = string.format('"D%d":{"properties":{"n":{"$ref":"#/$defs/D%d"}}}', i, i + 1)
    end
    chain[#chain + 1] = '"D41":{"type":"string"}'
    _, why = legacy('{"type":"object","$defs":{' .. table.concat(chain, ",") .. '},"properties":{"x":'
      .. '{"$ref":"#/$defs/D1"}}}')
    assert.equal("it nests deeper than 12 levels", why)
  end)

  it("writes out a reference at the root (pydantic's recursive-root shape) when it is not recursive", function()
    assert.equal('{"type":"object","properties":{"a":{"type":"integer"}}}',
      legacy('{"$defs":{"M":{"type":"object","properties":{"a":{"type":"integer"}}}},"$ref":"#/$defs/M"}'))
  end)
end)

describe("local references under the 2026-07-28 rule (carried verbatim)", function()
  local function rule(text)
    local schema, why = modern.normalise_schema(json.decode(text, true))
    local kept, why_text = modern.normalise_schema_text(text)
    assert.equal(why, why_text)
    if schema then assert.equal(json.encode(schema), kept) end
    return kept, why
  end

  for _, version in ipairs { "v1", "v2" } do
    for _, name in ipairs { "nested", "list_of_models", "optional_model", "enum", "described_model", "deep",
      "recursive", "mutually_recursive" } do
      it(version .. "-" .. name .. " is kept exactly as pydantic wrote it, recursive models included", function()
        local text = fixture(version .. "-" .. name)
        assert.equal(json.encode(json.decode(text, true)), rule(text))
      end)
    end
  end

  it("refuses a dangling reference, a pointer or an anchor, naming where it is", function()
    local _, why = rule('{"type":"object","properties":{"a":{"$ref":"#/$defs/Missing"}},"$defs":{}}')
    assert.equal('its "$ref" at #/properties/a points to #/$defs/Missing, which the schema does not define', why)
    _, why = rule('{"type":"object","properties":{"a":{"$ref":"#nope"}}}')
    assert.equal('its "$ref" at #/properties/a points to #nope, which the schema does not define', why)
    assert.is_not_nil(rule('{"type":"object","properties":{"a":{"$ref":"#item"}},'
      .. '"$defs":{"I":{"$anchor":"item","type":"string"}}}'))
    assert.is_not_nil(rule('{"type":"object","properties":{"a":{"$ref":"#/properties/b"},"b":{"type":"string"}}}'))
    assert.is_not_nil(rule('{"type":"object","properties":{"a":{"$ref":"#/$defs/a~1b"}},'
      .. '"$defs":{"a/b":{"type":"string"}}}'))
  end)

  it("refuses a reference that returns to itself through references and in-place keywords alone", function()
    local _, why = rule('{"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},'
      .. '"$defs":{"A":{"$ref":"#/$defs/B"},"B":{"allOf":[{"$ref":"#/$defs/A"}]}}}')
    assert.equal('its "$ref" at #/$defs/A leads back to itself through references alone (#/$defs/B), a cycle no'
      .. " validator can leave", why)
    _, why = rule('{"type":"object","allOf":[{"$ref":"#"}]}')
    assert.equal('its "$ref" at #/allOf/0 leads back to itself through references alone (#), a cycle no validator'
      .. " can leave", why)
    -- recursion through properties ends with the instance: kept
    assert.is_not_nil(rule('{"type":"object","properties":{"child":{"$ref":"#"}}}'))
  end)

  it("never fetches a network reference", function()
    local _, why = rule('{"type":"object","properties":{"a":{"$ref":"https://evil.example/s.json"}}}')
    assert.equal('its "$ref" points outside the schema (https://evil.example/s.json), and references are never'
      .. " fetched", why)
  end)
end)

describe("a pydantic server's tools through a listing and an import", function()
  local servers = require "support.servers"
  local catalogue = require "mcpclient.agent.catalogue"

  local function serving(modern_era, names)
    local entries = {}
    for i, name in ipairs(names) do
      entries[i] = '{"name":"' .. name .. '","inputSchema":' .. fixture("v2-" .. name) .. "}"
    end
    local page = '{"tools":[' .. table.concat(entries, ",") .. "]}"
    local fake = Fake.new { modern = modern_era }
    if modern_era then
      fake:will_return { supportedVersions = { "2026-07-28" }, capabilities = { tools = {} },
        serverInfo = { name = "py", version = "1" }, resultType = "complete" }
      fake:will_return_raw('{"jsonrpc":"2.0","id":%ID%,"result":' .. page:sub(1, -2) .. ',"resultType":"complete"}}')
    else
      fake:will_handshake():will_return_raw('{"jsonrpc":"2.0","id":%ID%,"result":' .. page .. "}")
    end
    return fake
  end

  it("the 2025 era imports every model-shaped tool and skips the recursive one, saying why", function()
    local store = servers.open_store()
    local uid = servers.add(store, { identifier = "py" })
    local fake = serving(false, { "nested", "list_of_models", "optional_model", "enum", "recursive" })
    local report = catalogue.import(store, assert(store:server(uid)), { transport = fake, clock = fake.clock, now = 1 })
    assert.equal(4, report.imported)
    assert.same({ '"recursive" was skipped: its "$ref" at #/$defs/Node/properties/children/items leads back to'
      .. " #/$defs/Node, a definition it lies in: a recursive schema has no form without references." },
      report.skip_reasons)
    for _, row in ipairs(store:tools_of(uid)) do no_references(json.decode(row.input_schema)) end
    store:close()
  end)

  it("the 2026-07-28 era imports all of them verbatim", function()
    local store = servers.open_store()
    local uid = servers.add(store, { identifier = "py" })
    local fake = serving(true, { "nested", "recursive" })
    local report = catalogue.import(store, assert(store:server(uid)), { transport = fake, clock = fake.clock, now = 1 })
    assert.equal(2, report.imported, table.concat(report.skip_reasons or {}, "\n"))
    local rows = store:tools_of(uid)
    local by_name = {}
    for _, row in ipairs(rows) do by_name[row.remote_name] = row.input_schema end
    assert.equal(json.encode(json.decode(fixture("v2-recursive"), true)), by_name.recursive)
    store:close()
  end)

  it("the default listing's lazy schema normalises the same way", function()
    local fake = serving(false, { "nested" })
    local conn = mcp.connect { url = "https://mcp.example.com/mcp", identifier = "py", health = mcp.health.discard,
      transport = fake, clock = fake.clock }
    local tools = assert(conn:list_tools())
    assert.equal(assert(legacy(fixture("v2-nested"))), json.encode(assert(core.normalise_schema(tools[1].inputSchema))))
    conn:close()
  end)
end)
