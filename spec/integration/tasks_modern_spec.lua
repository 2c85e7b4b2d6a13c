-- Tasks of the 2026-07-28 extension (io.modelcontextprotocol/tasks) against the hostile server's
-- tasks-modern mode: resultType "task", tasks/get with Mcp-Name, tasks/update for input,
-- tasks/cancel, -32021 without the extension declared, and the bad answers a client must refuse.
local mcp = require "mcpclient"
local hostile = require "support.hostile"

describe("tasks in the 2026-07-28 era", function()
  local server
  local n = 0

  setup(function() server = hostile.start() end)
  teardown(function() hostile.stop(server) end)

  -- each case on its own path: its own tasks and its own record
  local function fresh(extra)
    n = n + 1
    local path = "/tasks-modern/" .. n
    local options = { url = hostile.url(server, path), identifier = "modern", health = mcp.health.discard,
      protocol = "2026-07-28", budget = 10 }
    for k, v in pairs(extra or {}) do options[k] = v end
    return mcp.connect(options), path
  end

  it("a call declared as a task comes back as resultType task and is polled to its result", function()
    local conn <close>, path = fresh()
    local seen = {}
    local outcome = assert(conn:call_tool("slow", { text = "hi", ms = 400 },
      { task = true, on_task = function(h) seen[#seen + 1] = h.status end }))
    assert.equal("slow done: hi", outcome.text)
    assert.same("working", seen[1])
    assert.same("completed", seen[#seen])
    local calls = hostile.requests_of(server, path, "tools/call")
    assert.equal(1, #calls)
    assert.is_true(calls[1].declared)
    local gets = hostile.requests_of(server, path, "tasks/get")
    assert.is_true(#gets >= 2)
    for _, g in ipairs(gets) do
      assert.equal(g.task_id, g.mcp_name)   -- Mcp-Name carries the task id
      assert.is_true(g.declared)
    end
  end)

  it("polls no faster than the server's interval", function()
    local conn <close>, path = fresh()
    local started = mcp.now()
    assert(conn:call_tool("slow", { ms = 900, poll = 300 }, { task = true }))
    local took = mcp.now() - started
    local gets = #hostile.requests_of(server, path, "tasks/get")
    -- 900 ms at 300 ms apart: at most ceil(took / 0.3) polls, never one every few ms
    assert.is_true(gets <= math.ceil(took / 0.3) + 1, gets .. " polls in " .. took .. " s")
    assert.is_true(gets >= 2)
  end)

  it("a zero interval is floored, not a busy loop", function()
    local conn <close>, path = fresh()
    local started = mcp.now()
    assert(conn:call_tool("slow", { ms = 500, poll = 0 }, { task = true }))
    local took = mcp.now() - started
    local gets = #hostile.requests_of(server, path, "tasks/get")
    assert.is_true(gets <= math.ceil(took / 0.05) + 1, gets .. " polls in " .. took .. " s")
  end)

  it("without the extension declared, the server's -32021 is a clear failure, and nothing ran", function()
    local conn <close>, path = fresh()
    local outcome, message, err = conn:call_tool("slow", { text = "x" })
    assert.is_nil(outcome)
    assert.equal("rpc_error", err.kind)
    assert.equal(-32021, err.rpc_code)
    assert.truthy(message:find("task = true", 1, true))
    assert.is_false(hostile.requests_of(server, path, "tools/call")[1].declared)
    -- the declared call on the same connection is answered at once when the tool needs no task
    assert.equal("echo: y", assert(conn:call_tool("echo", { text = "y" }, { task = true })).text)
  end)

  it("tasks = true on connect runs a required tool as a task without asking per call", function()
    local asked = 0
    local conn <close>, path = fresh { tasks = true, on_elicitation = function(request)
      asked = asked + 1
      assert.equal("Pick a colour", request.message)
      return { action = "accept", content = { colour = "teal" } }
    end }
    assert(conn:list_tools())
    local outcome = assert(conn:call_tool("ask", {}))
    assert.equal(1, asked)
    assert.truthy(outcome.text:find("teal", 1, true))
    local updates = hostile.requests_of(server, path, "tasks/update")
    assert.equal(1, #updates)   -- each input key answered once, however many polls saw it
    assert.equal(updates[1].task_id, updates[1].mcp_name)
  end)

  it("detach, then update and status from a handle; cancel ends it", function()
    local conn <close> = fresh()
    local handle = assert(conn:call_tool("ask", {}, { task = true, detach = true }))
    assert.equal("input_required", handle.status)
    assert.equal("modern", handle.era)
    assert.is_nil(handle.session)
    local t = conn:task(handle)
    assert.equal("input_required", assert(t:status()).status)
    assert.is_true(assert(t:update { pick = { action = "accept", content = { colour = "red" } } }))
    assert.equal("completed", assert(t:status()).status)
    local other = assert(conn:call_tool("slow", { ms = 5000 }, { task = true, detach = true }))
    local ot = conn:task(other)
    assert.is_true(assert(ot:cancel()))
    local _, _, err = ot:result()
    assert.equal("task", err.kind)
    assert.equal("cancelled", err.reason)
  end)

  it("an input request without a handler is input_required, the handle kept", function()
    local conn <close> = fresh()
    local _, _, err = conn:call_tool("ask", {}, { task = true })
    assert.equal("input_required", err.kind)
  end)

  it("a failed task is kind task with the server's error", function()
    local conn <close> = fresh()
    local _, message, err = conn:call_tool("fail", {}, { task = true })
    assert.equal("task", err.kind)
    assert.equal("failed", err.reason)
    assert.equal(-32000, err.rpc_code)
    assert.truthy(message:find("boom", 1, true))
  end)

  it("a status going back from its end is malformed", function()
    local conn <close> = fresh()
    local handle = assert(conn:call_tool("backwards", {}, { task = true, detach = true }))
    local t = conn:task(handle)
    local core = require "mcpclient.core"
    local done
    local give_up = core.now() + 30  -- generous: it ends when the task completes
    repeat
      done = assert(t:status())
      if done.status == "completed" then break end
      core.sleep(0.05)
    until core.now() > give_up
    assert.equal("completed", done.status)
    local _, message, err = t:status()
    assert.equal("malformed", err.kind)
    assert.truthy(message:find("went back from completed to working", 1, true))
  end)

  it("a completed task whose result is no tool result is malformed", function()
    local conn <close> = fresh()
    local _, message, err = conn:call_tool("badshape", {}, { task = true })
    assert.equal("malformed", err.kind)
    assert.truthy(message:find("tool result", 1, true))
  end)

  it("an unknown id and an expired handle are kind task; working past the budget is a timeout", function()
    local conn <close> = fresh()
    local _, _, err = conn:task("task-none"):status()
    assert.equal("task", err.kind)
    assert.equal("unknown", err.reason)
    local old = { id = "task-old", expires_at = os.time() - 10 }
    local _, _, gone = conn:task(old):status()
    assert.equal("expired", gone.reason)
    local _, _, slow = conn:call_tool("slow", { ms = 3000 }, { task = true, budget = 0.8 })
    assert.equal("timeout", slow.kind)
    assert.is_string(slow.task_id)
    assert.equal("working", assert(conn:task(slow.task_id):status()).status)
  end)

  it("misuse raises", function()
    local conn <close> = fresh()
    assert.has_error(function() conn:task(42) end)
    assert.has_error(function() conn:task { id = "x", server = "other" } end)
    assert.has_error(function() conn:call_tool("slow", {}, { detach = true }) end)
    assert.has_error(function() conn:task("x"):update "no" end)
  end)
end)
