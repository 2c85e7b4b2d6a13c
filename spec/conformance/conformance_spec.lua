-- The conformance suite: every check of spec/conformance/checks.lua, once per connection profile
-- of spec/conformance/profiles.lua, so a client that only works with one kind of server fails.
-- docs/CONFORMANCE.md lists the numbered checks and where each one stands.
local checks = require "conformance.checks"
local profiles = require "conformance.profiles"

describe("conformance profiles", function()
  it("carry only operator configuration and session behaviour", function()
    for _, profile in ipairs(profiles.list) do
      for key in pairs(profile) do
        assert.is_true(profiles.KEYS[key] == true, profile.identifier .. " has a key of its own: " .. key)
      end
      assert.is_function(profile.frame)
    end
  end)

  it("differ in data class and hold opposite approval flags, so no check asserts one constant twice", function()
    local classes, approvals, identifiers = {}, {}, {}
    for _, profile in ipairs(profiles.list) do
      assert.is_nil(classes[profile.data_class], "data class shared: " .. profile.data_class)
      assert.is_nil(identifiers[profile.identifier])
      classes[profile.data_class], identifiers[profile.identifier] = true, true
      approvals[profile.requires_approval] = true
    end
    assert.is_true(approvals["0"] and approvals["1"])
  end)
end)

for _, profile in ipairs(profiles.list) do
  describe("conformance " .. profile.identifier .. " (" .. profile.description .. ")", function()
    for _, check in ipairs(checks.list) do
      -- a check of one era's own mechanics (the handshake, sessions, resumption) runs for that era
      local era_ok = check.era == nil or check.era == (profile.era or "legacy")
      if era_ok and (check.channel == nil or check.channel == (profile.channel or "http")) then
        it(check.name, function()
          check.run(checks.harness(profile))
        end)
      end
    end
  end)
end
