-- A stdio server that dies at start: its exit and stderr reach the caller once, in the failure
-- value's message, not first as a warning on the log and then again as the message.
local mcp = require "mcpclient"
local stdio = require "support.stdio"

describe("a stdio server that dies at start", function()
  it("is said once: in the failure, with no warning repeating it", function()
    local logged = {}
    local conn <close> = mcp.connect { identifier = "dies", health = mcp.health.discard, env = stdio.env(),
      command = { "lua5.4", "-e", "io.stderr:write('boom at start: no config\\n') os.exit(3)" },
      log = function(_, text) logged[#logged + 1] = text end, budget = 10 }
    local report, message, err = conn:ping()
    assert.is_nil(report)
    assert.equal("transport", err.kind)
    assert.truthy(message:find("boom at start: no config", 1, true), message)
    assert.truthy(message:find("exited with status 3", 1, true), message)
    for _, line in ipairs(logged) do assert.is_nil(line:find("boom at start", 1, true), line) end
  end)
end)
