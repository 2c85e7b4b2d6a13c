-- The conformance suite: every check of spec/conformance/checks.lua, once per connection profile
-- of spec/conformance/profiles.lua, so a client that only works with one kind of server fails.
-- docs/CONFORMANCE.md lists the numbered checks and where each one stands.
local checks = require "conformance.checks"
local profiles = require "conformance.profiles"
local policy = require "mcpclient.agent.policy"

describe("conformance profiles", function()
  it("carry only operator configuration and session behaviour", function()
    for _, profile in ipairs(profiles.list) do
      for key in pairs(profile) do
        assert.is_true(profiles.KEYS[key] == true, profile.identifier .. " has a key of its own: " .. key)
      end
      assert.is_function(profile.frame)
    end
  end)

  -- A check that hard-codes a class or a flag fails in every profile that differs from it. The six
  -- data classes are all in use, so a later profile takes one again, with the approval flag
  -- opposite to the profile it shares the class with: no two profiles are configured alike.
  it("cover every data class and both approval flags, no two configured alike", function()
    local configured, classes, approvals, identifiers = {}, {}, {}, {}
    for _, profile in ipairs(profiles.list) do
      local pair = profile.data_class .. "/" .. profile.requires_approval
      assert.is_nil(configured[pair], "configured alike: " .. pair)
      assert.is_nil(identifiers[profile.identifier])
      configured[pair], identifiers[profile.identifier] = true, true
      classes[profile.data_class], approvals[profile.requires_approval] = true, true
    end
    for _, class in ipairs(policy.DATA_CLASSES) do assert.is_true(classes[class], "no profile has " .. class) end
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
