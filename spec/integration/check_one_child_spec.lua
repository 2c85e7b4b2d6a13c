-- The live conformance run (mcpclient.agent.check) starts a stdio server once for the whole run:
-- the opening check opens the connection, every later check uses it, and the run closes it. Each
-- start of the scripted server is counted by the command that starts it (one line a start).
local mcp = require "mcpclient"
local check = require "mcpclient.agent.check"
local stdio = require "support.stdio"

-- A command that writes one line to `count_file`, then becomes the scripted server in `mode`.
local function counted(mode, count_file)
  local server = stdio.command(mode)
  return { "/bin/sh", "-c", 'echo started >> "$0"; exec "$@"', count_file, table.unpack(server) }
end

local function starts(count_file)
  local f = io.open(count_file)
  if not f then return 0 end
  local n = select(2, f:read("a"):gsub("\n", ""))
  f:close()
  return n
end

describe("check on a stdio server", function()
  for _, mode in ipairs { "legacy", "modern" } do
    it("starts the " .. mode .. " server once for the whole run, and every check still holds", function()
      local count_file = os.tmpname()
      os.remove(count_file)
      local opens = 0
      local results, summary = check.run(function(recorder, budget)
        opens = opens + 1
        return mcp.connect { command = counted(mode, count_file), env = stdio.env(), identifier = "one",
          health = recorder, budget = budget or 10 }
      end, { call = { name = "echo", arguments = { message = "hi" } } })
      local statuses = {}
      for _, r in ipairs(results) do
        statuses[#statuses + 1] = r.id .. "=" .. r.status
        assert.is_not.equal(check.FAILED, r.status, r.id .. ": " .. r.detail)
      end
      assert.is_true(summary.ok, table.concat(statuses, " "))
      assert.equal(1, opens)
      assert.equal(1, starts(count_file), table.concat(statuses, " "))
      -- every check that applies passed, the call and the budget among them
      for _, r in ipairs(results) do
        if r.id == "call" or r.id == "health" or r.id == "session" then assert.equal(check.PASSED, r.status) end
      end
      os.remove(count_file)
    end)
  end
end)
