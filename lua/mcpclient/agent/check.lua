--- The live conformance run: the per-connection checks a real server can
--- answer, run through the whole client (gate, transport, session, schema
--- normalisation, health) against one configured server.
--
--   local check = require "mcpclient.agent.check"
--   local results, summary = check.run(function(recorder)
--     return mcp.connect { url = url, identifier = "mine", health = recorder }
--   end, { call = { name = "echo", arguments = { message = "hi" } } })
--   for _, r in ipairs(results) do print(r.id, r.status, r.detail) end
--
-- The run opens one connection through `open`, for the opening (the
-- "handshake" check, on a fresh connection: nothing before it), and the
-- checks after it use that same connection, closed at the end: a server
-- started over stdio is started once for the whole run, not once a check
-- (eight `npx` starts were ten seconds). Every later check is one a live
-- connection must pass anyway (a second operation, a listing, a call, an
-- unknown tool, a tiny budget, a cancel, one health contact per operation,
-- counted from the recorder's length before it); one that leaves the
-- connection broken shows in its own result, and the next operation opens
-- the server again as any operation would (a stdio child at most once).
-- A check ends "passed", "failed" or
-- "not applicable", each with a one-line reason. Nothing here calls a tool
-- that could change something on the server unless the caller names it
-- (options.call) or the server declares it read-only and it needs no
-- argument: a conformance run must be safe to point at production.
--
-- The scripted checks of the busted suite (spec/conformance/) cover what only
-- a scripted server can provoke (lost sessions, hostile bytes, exact budgets);
-- spec/conformance/live_spec.lua runs this list against a live URL.
local core = require "mcpclient.core"
local era = require "mcpclient.era"
local health = require "mcpclient.health"

local check = {}

check.PASSED, check.FAILED, check.NA = "passed", "failed", "not applicable"

-- A budget for the checks that test the budget itself: far below any real
-- round trip's, so the operation must end as the budget's own outcome or
-- finish inside it.
local TINY_BUDGET = 0.001
-- How late a budget-bound operation may return before the check calls it
-- unbounded: the per-leg floor plus scheduling slack.
local BUDGET_SLACK = 2.0

-- What far-side text may look like inside a reason: one clipped line.
local function shown(text, limit)
  return core.clip(tostring(text or ""), limit or 120)
end

local function passed(detail) return check.PASSED, detail end
local function failed(detail) return check.FAILED, detail end
local function na(detail) return check.NA, detail end

-- A connection from the run's opener, with a fresh recorder, or nil, why.
local function opened(ctx)
  local recorder = health.memory()
  local conn, message = ctx.open(recorder, ctx.budget)
  if not conn then return nil, message end
  return conn, recorder
end

-- Run `body(conn, recorder)` on the run's connection: the one the opening
-- made (kept open for the checks after it, closed by check.run), or, when
-- there is none yet, a fresh one that becomes it. The opening itself
-- (`fresh`) always starts a connection of its own.
local function with_connection(ctx, body, fresh)
  if fresh or not ctx.conn then
    if ctx.conn then ctx.conn:close() end
    ctx.conn, ctx.recorder = nil, nil
    local conn, recorder = opened(ctx)
    if not conn then return failed(recorder) end
    ctx.conn, ctx.recorder = conn, recorder
  end
  local ok, status, detail = pcall(body, ctx.conn, ctx.recorder)
  if not ok then return failed("the client raised: " .. shown(status, 300)) end
  return status, detail
end

---------------------------------------------------------------------------
-- The checks
---------------------------------------------------------------------------

check.list = {}

local function add(id, name, run, needs)
  check.list[#check.list + 1] = { id = id, name = name, run = run, needs = needs }
end

add("handshake", "the opening: initialize, a revision this client speaks and notifications/initialized "
  .. "(2025 era), or server/discover naming 2026-07-28",
  function(ctx)
    return with_connection(ctx, function(conn)
      local report, message = conn:ping()
      if not report then return failed(message) end
      local s = conn:server()
      ctx.server = s
      return passed(string.format("%sprotocol %s, %s %s, %d ms",
        era.named(report.era).discovered and "server/discover, no initialize: " or "",
        report.protocol_version, report.server_name ~= "" and report.server_name or "(unnamed server)",
        report.server_version, report.latency_ms))
    end, true)
  end)

-- The 2026-07-28 era has neither a session nor ping: what a second
-- operation does there is server/discover again, and the detail says so.
add("session", "the session is carried: a second operation is an MCP ping on it, not a new handshake "
  .. "(2026-07-28: no session, the second operation is server/discover again)",
  function(ctx)
    return with_connection(ctx, function(conn)
      local first, message = conn:ping()
      if not first then return failed(message) end
      local second
      second, message = conn:ping()
      if era.named(first.era).discovered then
        if not second then return failed("the second server/discover failed: " .. message) end
        return passed(string.format("no session in the %s era: a second server/discover answered in %d ms",
          first.protocol_version, second.latency_ms))
      end
      if not second then return failed("the ping on the session failed: " .. message) end
      return passed(string.format("ping on the session in %d ms", second.latency_ms))
    end)
  end, "handshake")

add("capabilities", "the server's capabilities are read and the tools capability is declared",
  function(ctx)
    local caps = ctx.server.capabilities or {}
    local declared = {}
    for name in pairs(caps) do declared[#declared + 1] = shown(name, 40) end
    table.sort(declared)
    local list = #declared > 0 and table.concat(declared, ", ") or "none"
    if type(caps.tools) ~= "table" then return na("no tools capability declared (declared: " .. list .. ")") end
    return passed("declared: " .. list)
  end, "handshake")

add("discovery", "paged discovery: tools/list followed to its last page",
  function(ctx)
    if type((ctx.server.capabilities or {}).tools) ~= "table" then return na("the server offers no tools") end
    return with_connection(ctx, function(conn)
      -- the import's reading of the schemas: each judged as the pages are read
      local tools, message = conn:list_tools { schemas = "kept" }
      if not tools then return failed(message) end
      ctx.tools = tools
      return passed(string.format("%d tool(s) listed", #tools))
    end)
  end, "handshake")

-- Every listed tool's input schema through the normaliser an import uses.
add("schemas", "schema normalisation of the real catalogue: every input schema is one an import accepts",
  function(ctx)
    if not ctx.tools then return na("no catalogue was listed") end
    if #ctx.tools == 0 then return na("the catalogue is empty") end
    local refused = {}
    for _, entry in ipairs(ctx.tools) do
      local kept = entry.inputSchema -- the kept text, or { refused = reason }
      if type(kept) ~= "string" then
        local reason = type(kept) == "table" and kept.refused or "no inputSchema"
        refused[#refused + 1] = shown(entry.name, 64) .. " (" .. shown(reason, 100) .. ")"
      end
    end
    if #refused > 0 then
      return failed(string.format("%d of %d refused: %s", #refused, #ctx.tools, table.concat(refused, "; ")))
    end
    return passed(string.format("%d of %d normalised", #ctx.tools, #ctx.tools))
  end, "discovery")

-- The tool the run may call: the one the caller named, else one the server
-- declares read-only that needs no argument.
local function callable(ctx)
  if ctx.call then return ctx.call.name, ctx.call.arguments, "named by the operator" end
  for _, entry in ipairs(ctx.tools or {}) do
    -- the kept schema's text (a refused one says nothing of what the tool requires)
    local kept = entry.inputSchema
    local schema = kept == nil and {} or type(kept) == "string" and core.json.decode(kept) or nil
    local required = type(schema) == "table" and type(schema.required) == "table" and #schema.required or 0
    local hints = type(entry.annotations) == "table" and entry.annotations or {}
    if schema and hints.readOnlyHint == true and required == 0 and type(entry.name) == "string" then
      return entry.name, {}, "declared read-only"
    end
  end
  return nil
end

add("call", "a tool call returns an outcome, with its latency",
  function(ctx)
    local name, arguments, why = callable(ctx)
    if not name then
      return na("no tool is declared read-only without required arguments; name one with --call NAME")
    end
    return with_connection(ctx, function(conn)
      local outcome, message = conn:call_tool(name, arguments)
      if not outcome then return failed(message) end
      if type(outcome.text) ~= "string" or math.type(outcome.latency_ms) == nil then
        return failed("the outcome lacks its text or latency")
      end
      -- the tool the operator named must work: its error is the check's failure, in its own words
      if ctx.call and outcome.is_error then
        return failed(string.format('"%s" answered with a tool error: %s', shown(name, 64), shown(outcome.text, 500)))
      end
      return passed(string.format('"%s" (%s)%s in %d ms', shown(name, 64), why,
        outcome.is_error and " answered with a tool error" or " answered", math.floor(outcome.latency_ms + 0.5)))
    end)
  end, "discovery")

-- A name no server has: the client must get a failure value of a known kind
-- (a JSON-RPC error, or a tool-level error result) and keep the connection.
add("error-shape", "a call to an unknown tool is a JSON-RPC error or an error result, and the connection serves on",
  function(ctx)
    if type((ctx.server.capabilities or {}).tools) ~= "table" then return na("the server offers no tools") end
    return with_connection(ctx, function(conn)
      local outcome, message, err = conn:call_tool("mcpclient-check-no-such-tool", {})
      local shape
      if outcome and outcome.is_error then
        shape = "an error result"
      elseif not outcome and err and err.kind == "rpc_error" then
        shape = string.format("JSON-RPC error %s", tostring(err.rpc_code))
      elseif outcome then
        return failed("the unknown tool answered as if it existed")
      else
        return failed(message)
      end
      local report
      report, message = conn:ping()
      if not report then return failed(shape .. ", then the connection failed: " .. message) end
      return passed(shape .. "; the connection still serves")
    end)
  end, "handshake")

-- A budget far below the round trip: the operation must come back promptly,
-- done or as the budget's own outcome (never a hang, never another kind).
add("budget", "an operation's budget bounds it: a 1 ms budget ends promptly as the budget's outcome",
  function(ctx)
    return with_connection(ctx, function(conn)
      local started = core.now()
      local report, message, err = conn:ping { budget = TINY_BUDGET }
      local took = core.now() - started
      if took > TINY_BUDGET + BUDGET_SLACK then
        return failed(string.format("took %.1f s under a %g s budget", took, TINY_BUDGET))
      end
      if report then return passed(string.format("done inside the budget (%.0f ms)", took * 1000)) end
      if err.kind ~= "deadline" and err.kind ~= "timeout" then return failed(message) end
      return passed(string.format("ended as %s after %.0f ms", err.kind, took * 1000))
    end)
  end, "handshake")

add("cancel", "a cancel hook raised before sending ends the operation as cancelled; the connection serves on",
  function(ctx)
    return with_connection(ctx, function(conn)
      local report, message, err = conn:ping { cancel = function() return true end }
      if report then return failed("the operation ran although its cancel hook fired") end
      if err.kind ~= "cancelled" then return failed(message) end
      report, message = conn:ping()
      if not report then return failed("after the cancel, the connection failed: " .. message) end
      return passed("cancelled, then served")
    end)
  end, "handshake")

add("health", "health: one contact per completed operation with an integer latency, none for a failed one",
  function(ctx)
    return with_connection(ctx, function(conn, recorder)
      local before = #recorder  -- the contacts of the checks before this one
      local report, message = conn:ping()
      if not report then return failed(message) end
      conn:ping { cancel = function() return true end }
      local count = #recorder - before
      if count ~= 1 then return failed(string.format("%d contacts for one completed operation", count)) end
      local contact = recorder[before + 1]
      if math.type(contact.latency_ms) ~= "integer" or contact.latency_ms < 0 then
        return failed("the contact's latency is not a non-negative integer")
      end
      return passed(string.format("one contact, %d ms", contact.latency_ms))
    end)
  end, "handshake")

---------------------------------------------------------------------------
-- The run
---------------------------------------------------------------------------

-- One check's result, run unless what it needs failed.
local function run_one(ctx, entry, outcome)
  local status, detail
  if entry.needs and outcome[entry.needs] ~= check.PASSED then
    status, detail = check.NA, string.format('the "%s" check did not pass', entry.needs)
  else
    local ok
    ok, status, detail = pcall(entry.run, ctx)
    if not ok then status, detail = check.FAILED, "the check raised: " .. shown(status, 300) end
  end
  outcome[entry.id] = status
  return { id = entry.id, name = entry.name, status = status, detail = detail or "" }
end

--- Run every check against one server.
-- @param open function(recorder, budget) -> connection | nil, message: a fresh connection whose
--   health recorder is `recorder` (called once for the run, by the opening check; again only when
--   there is no connection yet)
-- @param options { call = { name, arguments } (a tool the run may call), budget = seconds per operation,
--   progress = function(text) (called before each check) }
-- @return results { { id, name, status, detail }, ... }, summary { passed, failed, not_applicable, ok }
function check.run(open, options)
  if type(open) ~= "function" then error("check.run: open must be a function", 2) end
  options = options or {}
  local ctx = { open = open, call = options.call, budget = options.budget, server = {} }
  local results, outcome = {}, {}
  local summary = { passed = 0, failed = 0, not_applicable = 0 }
  for i, entry in ipairs(check.list) do
    if options.progress then options.progress(string.format("check %d of %d: %s", i, #check.list, entry.id)) end
    results[i] = run_one(ctx, entry, outcome)
    local key = results[i].status == check.NA and "not_applicable" or results[i].status
    summary[key] = summary[key] + 1
  end
  if ctx.conn then ctx.conn:close() end
  summary.ok = summary.failed == 0
  return results, summary
end

check.TINY_BUDGET = TINY_BUDGET

return check
