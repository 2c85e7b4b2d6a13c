-- A listing's schemas by default (list_tools() without a schemas option):
-- each kept as the JSON text the decoder wrote and built as a table on its
-- first read. Read, encoded or normalised, it must be what an eager decode
-- of the same text gives, for every schema the specs and the fuzz seeds
-- hold: the same values, integers as integers, [] apart from {}, the
-- server's key order.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local Fake = require "support.fake_server"

local json = core.json

-- Every schema text the project keeps as a fixture: the fuzz seeds of the
-- schema normaliser and of the listing reader, and the schemas pydantic
-- generated (spec/fixtures/pydantic).
local FIXTURE_DIRS = { "fuzz/corpus/schema", "fuzz/corpus/listing", "spec/fixtures/pydantic" }

local function read(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("a")
  f:close()
  return text
end

local function fixtures()
  local out = {}
  for _, dir in ipairs(FIXTURE_DIRS) do
    local ls = assert(io.popen("ls " .. dir .. " 2>/dev/null"))
    for name in ls:lines() do out[#out + 1] = { name = dir .. "/" .. name, text = read(dir .. "/" .. name) } end
    ls:close()
  end
  return out
end

-- The same value, compared the strictest way: Lua types, integer or float,
-- the array marker, json.null, every key and, for objects, the recorded key order.
local function same(a, b, path)
  assert(type(a) == type(b), path .. ": " .. type(a) .. " against " .. type(b))
  if type(a) == "number" then
    assert(math.type(a) == math.type(b), path .. ": " .. math.type(a) .. " against " .. math.type(b))
    assert(a == b, path .. ": values differ")
    return
  end
  if type(a) ~= "table" then
    assert(a == b, path .. ": values differ")
    return
  end
  assert(json.is_array(a) == json.is_array(b), path .. ": array against object")
  local n = 0
  for k, v in pairs(a) do -- (reads a lazy table, which then drops its own metatable)
    n = n + 1
    same(v, rawget(b, k), path .. "." .. tostring(k))
  end
  assert(getmetatable(a) == getmetatable(b), path .. ": the array marker on one side only")
  for _ in pairs(b) do n = n - 1 end
  assert(n == 0, path .. ": keys only in the eager value")
  if not json.is_array(a) then
    assert.same(json.key_order(b), json.key_order(a), path .. ": key order")
  end
end

-- The default listing of one tool whose input and output schemas are `text`.
local function listed(text)
  local fake = Fake.new():will_handshake()
    :will_return_raw('{"jsonrpc":"2.0","id":%ID%,"result":{"tools":[{"name":"t","inputSchema":' .. text
      .. ',"outputSchema":' .. text .. "}]}}")
  local conn = mcp.connect { url = "https://mcp.example.com/mcp", identifier = "lazy",
    health = mcp.health.discard, transport = fake, clock = fake.clock }
  local tools, listing = assert(conn:list_tools())
  conn:close()
  return tools[1], listing
end

-- What the normaliser makes of a value, as comparable text.
local function normalised(value)
  local schema, why = core.normalise_schema(value)
  if schema == nil then return "refused: " .. why end
  return json.encode(schema)
end

describe("a listed schema built on first read", function()
  local all = fixtures()

  it("finds the fixtures", function()
    assert.is_true(#all >= 100, "only " .. #all .. " fixtures")
  end)

  it("reads, encodes and normalises as the eager value for every fixture schema", function()
    local objects = 0
    for _, fixture in ipairs(all) do
      local eager = json.decode(fixture.text, true)
      -- a fixture a response can carry as a schema (some seeds are broken or too deep on purpose)
      if eager ~= nil and json.decode('{"a":' .. fixture.text .. "}", true) then
        local tool, listing = listed(fixture.text)
        assert.equal("tables", listing.schemas)
        local lazy = tool.inputSchema
        if type(eager) == "table" and eager ~= json.null and not json.is_array(eager) then
          objects = objects + 1
          assert.is_not_nil(core.lazy_text(lazy), fixture.name .. ": not lazy")
          assert.is_true(json.is_object(lazy), fixture.name)
          assert.is_false(json.is_array(lazy), fixture.name)
          -- unread: encoded from its text, normalised from its text, and still unread after both
          assert.equal(json.encode(eager), json.encode(lazy), fixture.name)
          assert.equal(normalised(eager), normalised(lazy), fixture.name)
          assert.is_not_nil(core.lazy_text(lazy), fixture.name .. ": built by encode or normalise")
          -- read: the eager value itself
          same(lazy, eager, fixture.name)
          assert.is_nil(getmetatable(lazy), fixture.name)
          assert.is_nil(core.lazy_text(lazy))
          assert.equal(json.encode(eager), json.encode(lazy), fixture.name)
          -- the output schema too, read another way first
          assert.equal(#eager, #tool.outputSchema)
          same(tool.outputSchema, eager, fixture.name .. " (outputSchema)")
        else
          same(lazy, eager, fixture.name .. " (not an object: decoded at once)")
        end
      end
    end
    assert.is_true(objects >= 90, "only " .. objects .. " object schemas")
  end)

  describe("reads like a table", function()
    local TEXT = '{"type":"object","properties":{"b":{"type":"integer","maximum":9007199254740993},'
      .. '"a":{"type":"array","items":[],"default":{}}},"required":["b"],"x-n":1.5,"x-null":null}'

    local function fresh() return listed(TEXT).inputSchema end

    it("on index: tool.inputSchema.properties works unchanged", function()
      local s = fresh()
      assert.equal("integer", s.properties.b.type)
      assert.equal(9007199254740993, s.properties.b.maximum)
      assert.equal("integer", math.type(s.properties.b.maximum))
      assert.is_true(json.is_array(s.properties.a.items))
      assert.is_false(json.is_array(s.properties.a.default))
      assert.equal(json.null, s["x-null"])
      assert.equal(1.5, s["x-n"])
      assert.same({ "type", "properties", "required", "x-n", "x-null" }, json.key_order(s))
    end)

    it("on pairs, in the server's key order when walked by the order record", function()
      local s, keys = fresh(), {}
      for k in pairs(s) do keys[#keys + 1] = k end
      table.sort(keys)
      assert.same({ "properties", "required", "type", "x-n", "x-null" }, keys)
      assert.same({ "type", "properties", "required", "x-n", "x-null" }, json.key_order(s))
    end)

    it("on #, on ipairs and on assignment, which lands beside the members", function()
      local s = fresh()
      assert.equal(0, #s)
      s = fresh()
      for _ in ipairs(s) do error("an object has no items") end
      assert.equal("object", rawget(s, "type"))
      s = fresh()
      s.description = "added"
      assert.equal("object", s.type)
      assert.equal("added", rawget(s, "description"))
    end)

    it("raw access sees it only once read, and then it is an ordinary table", function()
      local s = fresh()
      assert.is_nil(next(s))
      assert.is_nil(rawget(s, "type"))
      local _ = s.type
      assert.is_not_nil(next(s))
      assert.equal("object", rawget(s, "type"))
      assert.is_nil(getmetatable(s))
    end)

    it("json.key_order builds it; setting an order first builds it too, and the order set stays", function()
      local s = fresh()
      json.set_key_order(s, { "required", "type" })
      assert.equal("object", rawget(s, "type"))
      assert.equal('{"required":["b"],"type":"object"', json.encode(s):sub(1, 33))
    end)

    it("encodes inside another table, from its text and once read", function()
      local s = fresh()
      local outer = json.encode { schema = s }
      assert.equal('{"schema":' .. json.encode(json.decode(TEXT, true)) .. "}", outer)
      local _ = s.type
      assert.equal(outer, json.encode { schema = s })
    end)

    it("is judged by the normaliser nested in a schema being normalised", function()
      local inner = fresh()
      local schema = assert(core.normalise_schema { type = "object", properties = { p = inner } })
      assert.equal(json.encode(json.decode(TEXT, true)), json.encode(schema.properties.p))
      assert.equal(0, #core.normalise_schema(fresh()).required - 1)
    end)

    it("stays lazy through the normaliser, whose answer is lazy too and reads as the eager answer", function()
      local s = fresh()
      local kept = assert(core.normalise_schema(s))
      assert.is_not_nil(core.lazy_text(s))
      assert.is_not_nil(core.lazy_text(kept))
      local eager = assert(core.normalise_schema(json.decode(TEXT, true)))
      same(kept, eager, "kept")
    end)

    it("imports as an eager listing does (the store keeps the same text)", function()
      local s = fresh()
      local era = require "mcpclient.era"
      local legacy_kept = era.schema_for("legacy")(s)
      assert.equal(json.encode(core.normalise_schema(json.decode(TEXT, true))), json.encode(legacy_kept))
      local modern_kept = era.schema_for("modern")(fresh())
      assert.equal(json.encode(json.decode(TEXT, true)), json.encode(modern_kept))
    end)

    it("each_tool_page hands the same lazy tables", function()
      local fake = Fake.new():will_handshake()
        :will_return_raw('{"jsonrpc":"2.0","id":%ID%,"result":{"tools":[{"name":"t","inputSchema":' .. TEXT .. "}]}}")
      local conn = mcp.connect { url = "https://mcp.example.com/mcp", identifier = "lazy",
        health = mcp.health.discard, transport = fake, clock = fake.clock }
      local seen
      assert(conn:each_tool_page(function(page) seen = page[1].inputSchema end))
      assert.is_not_nil(core.lazy_text(seen))
      assert.equal("integer", seen.properties.b.type)
    end)
  end)
end)
