-- The normaliser's one-pass size measure (csrc/core/measure.c) against the encoder: a schema of every
-- value kind lands exactly on the 16384-byte bound, so a measure one byte off in any kind flips a
-- verdict here. The content avoids '/' and non-ASCII, where the stored-size form and json.encode
-- spell a value alike (schema_spec.lua covers those two escapes at the bound).
local core = require "mcpclient.core"
local json = core.json

local LIMIT = 16384

-- A schema holding every kind the measure counts, with description d.
local function sample(d)
  return {
    type = "object",
    description = d,
    properties = {
      n = { type = "number", minimum = 0.1, maximum = 1e21, default = -0.0, multipleOf = 5.0, exclusiveMinimum = 1e-7 },
      i = { type = "integer", minimum = math.mininteger, maximum = math.maxinteger, default = 0 },
      s = { type = "string", description = 'quote " backslash \\ newline \n tab \t bell \a nul \0 del \127' },
      e = { enum = json.array { 1, "2", json.null, true, false, json.array {}, {} } },
      a = { type = "array", items = { type = "object", properties = {} } },
    },
    required = json.array { "n", "i" },
    additionalProperties = false,
    anyOf = json.array { { required = json.array { "s" } }, { required = json.array { "e" } } },
  }
end

describe("the schema size measure", function()
  local overhead = #json.encode(assert(core.normalise_schema(sample(""))))

  it("accepts exactly up to the bound and refuses one byte past it", function()
    assert.is_not_nil(core.normalise_schema(sample(string.rep("a", LIMIT - overhead))))
    local schema, reason = core.normalise_schema(sample(string.rep("a", LIMIT - overhead + 1)))
    assert.is_nil(schema)
    assert.equal("it exceeds 16384 bytes once stored", reason)
  end)

  it("counts control characters as the encoder escapes them", function()
    local d = "\1\31\b\f\r"
    local size = overhead + #json.encode(d) - 2
    assert.equal(6 + 6 + 2 + 2 + 2, #json.encode(d) - 2)
    assert.is_not_nil(core.normalise_schema(sample(d .. string.rep("a", LIMIT - size))))
    assert.is_nil(core.normalise_schema(sample(d .. string.rep("a", LIMIT - size + 1))))
  end)

  it("still names the first refused keyword in the order the schema is written", function()
    local v = assert(json.decode('{"type":"object","properties":{"b":{"then":1},"a":{"$ref":"#"}}}', true))
    local _, reason = core.normalise_schema(v)
    assert.matches('"then"', reason, 1, true)
  end)
end)
