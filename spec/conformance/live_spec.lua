-- The live conformance run (mcpclient.agent.check, `mcpclient check`) from busted: every check of the
-- per-connection suite that a real server can answer, one `it` each, through the whole client.
--
-- Against your own server:
--   MCPCLIENT_CHECK_URL=https://mcp.example.com/mcp busted spec/conformance/live_spec.lua
-- (optional: MCPCLIENT_CHECK_CALL=<tool> and MCPCLIENT_CHECK_ARGUMENTS='<JSON object>' name a tool the
-- run may call; MCPCLIENT_CHECK_BUDGET=<seconds>). A check that does not apply is reported pending,
-- with its reason. Without MCPCLIENT_CHECK_URL, the run goes against the official SDK server and
-- server-everything (spec/support/peers.lua), as part of the integration specs.
local mcp = require "mcpclient"
local check = require "mcpclient.agent.check"

local json = mcp.json

-- Run every check against `url`; each result becomes an `it`.
-- `known` maps a check id to a text its failure must name: a finding about that server, asserted so the
-- spec turns red when the finding goes away and the entry must be removed.
local function live(label, url_of, call, known)
  describe("live conformance against " .. label, function()
    local results
    local function results_for()
      if results then return results end
      local url = url_of()
      results = check.run(function(recorder, budget)
        return mcp.connect { url = url, identifier = "live", health = recorder,
          budget = budget or tonumber(os.getenv("MCPCLIENT_CHECK_BUDGET") or "") }
      end, { call = call })
      return results
    end
    for i, entry in ipairs(check.list) do
      it(entry.id .. ": " .. entry.name, function()
        local r = results_for()[i]
        if r.status == check.NA then return pending(r.detail) end
        if known and known[entry.id] then
          assert.equal(check.FAILED, r.status, "the known finding is gone: " .. r.detail)
          assert.truthy(r.detail:find(known[entry.id], 1, true), r.detail)
          return
        end
        assert.equal(check.PASSED, r.status, r.detail)
      end)
    end
  end)
end

local url = os.getenv("MCPCLIENT_CHECK_URL")
if url and url ~= "" then
  local call
  local name = os.getenv("MCPCLIENT_CHECK_CALL")
  if name and name ~= "" then
    call = { name = name, arguments = json.decode(os.getenv("MCPCLIENT_CHECK_ARGUMENTS") or "{}") }
  end
  live(url, function() return url end, call)
  return
end

local peers = require "support.peers"

for _, case in ipairs {
  { kind = "everything" },
  -- The SDK's count_args tool (z.object({}).passthrough()) declares "additionalProperties": {},
  -- which the normaliser reads as true: every check passes here too.
  { kind = "sdk-session", call = { name = "echo", arguments = { message = "hi" } } },
} do
  describe("#integration", function()
    local peer
    setup(function()
      peers.require_available()
      peer = peers.start(case.kind)
    end)
    teardown(function() if peer then peer:stop() end end)
    live(case.kind, function() return peer.url end, case.call, case.known)
  end)
end
