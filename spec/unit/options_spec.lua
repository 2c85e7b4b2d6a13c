-- One home per rule in the agent host: the option validator every constructor uses (store.open,
-- policy.new, run.start raise in its words), the trim of settings and operator input, and the
-- rounding of an audited duration.
local options = require "mcpclient.agent.options"
local policy = require "mcpclient.agent.policy"
local run = require "mcpclient.agent.run"
local store = require "mcpclient.agent.store"

describe("agent options", function()
  it("policy.new and run.start refuse unknown keys and wrong types in the validator's words", function()
    local registry = { get = function() return nil end, names = function() return {} end }
    assert.has_error(function() policy.new { registry = registry, colour = 1 } end,
      'policy.new: unknown option "colour"')
    assert.has_error(function() policy.new { registry = 7 } end, "policy.new: registry must be a table")
    assert.has_error(function() run.start({}, { colour = 1 }) end, 'run.start: unknown option "colour"')
    assert.has_error(function() run.start({}, { owner = 3 }) end, "run.start: owner must be a string")
    assert.has_error(function() run.start({}, 5) end, "run.start: options must be a table")
  end)

  it("trims what a file, a form or a shell leaves around a value", function()
    assert.equal("observe", options.trim(" \t\r\n\v\0observe\0 \n"))
    assert.equal("a b", options.trim("a b"))
    assert.equal("", options.trim(" \0 "))
    assert.equal("observe", policy.mode(" observe\0"))
  end)

  it("rounds an audited duration to a hundredth of a millisecond, one way", function()
    assert.equal(12.35, store.audit_duration(12.345))
    assert.equal(0, store.audit_duration(0.004))
    assert.equal(1000.5, store.audit_duration(1000.499))
  end)
end)
