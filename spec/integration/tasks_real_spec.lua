-- Tasks against a real peer nobody here wrote: server-everything's simulate-research-query
-- (2025-11-25 tasks: taskSupport "required", four stages of about a second, pollInterval 1000),
-- over Streamable HTTP, started by this spec on 127.0.0.1 and stopped by its PID.
local mcp = require "mcpclient"
local peers = require "support.peers"

describe("tasks against server-everything (2025-11-25)", function()
  local peer

  setup(function()
    peers.require_available()
    peer = peers.start("everything")
  end)

  teardown(function()
    if peer then peer.stop() end
    peers.stop_all()
  end)

  local function connect(extra)
    local options = { url = peer.url, identifier = "everything", health = mcp.health.discard,
      protocol = "2025-11-25", budget = 30 }
    for k, v in pairs(extra or {}) do options[k] = v end
    return mcp.connect(options)
  end

  local function research_tool(conn)
    local tools = assert(conn:list_tools())
    for _, t in ipairs(tools) do
      if t.name == "simulate-research-query" then return t end
    end
  end

  it("lists the tool as taskSupport required and calls it as a task, polling at the server's interval", function()
    local conn <close> = connect { tasks = true }
    local tool = assert(research_tool(conn))
    assert.equal("required", tool.execution.taskSupport)
    local seen, started = {}, mcp.now()
    local outcome, message = conn:call_tool("simulate-research-query", { topic = "lua" },
      { on_task = function(h) seen[#seen + 1] = h end })
    assert.is_truthy(outcome, message)
    assert.is_false(outcome.is_error)
    assert.truthy(outcome.text:find("lua", 1, true))
    -- the handle came first (working, the server's interval and ttl), then its end
    assert.equal("working", seen[1].status)
    assert.equal(1000, seen[1].poll_ms)
    assert.is_string(seen[1].session)
    assert.is_true(seen[1].expires_at > os.time())
    assert.is_true(mcp.now() - started >= 3)
  end)

  it("detaches: a handle at once, then status and result from another connection under its session",
    function()
      local conn <close> = connect { tasks = true }
      assert(research_tool(conn))
      local started = mcp.now()
      local handle = assert(conn:call_tool("simulate-research-query", { topic = "detached" },
        { task = true, detach = true }))
      assert.is_true(mcp.now() - started < 1)
      assert.equal("working", handle.status)
      assert.equal("legacy", handle.era)
      -- another connection (as another process would): no handshake, the handle's session
      local other <close> = connect()
      local t = other:task(handle)
      local now = assert(t:status())
      assert.equal(handle.id, now.id)
      assert.is_truthy(now.status == "working" or now.status == "completed")
      local outcome = assert(t:result { budget = 20 })
      assert.truthy(outcome.text:find("detached", 1, true))
    end)

  it("the ambiguous path: input_required goes through on_elicitation, then the task completes", function()
    local asked = {}
    local conn <close> = connect { tasks = true, on_elicitation = function(request)
      asked[#asked + 1] = request
      return { action = "accept", content = { interpretation = "technical" } }
    end }
    assert(research_tool(conn))
    local statuses = {}
    local outcome, message = conn:call_tool("simulate-research-query", { topic = "bats", ambiguous = true },
      { on_task = function(h) statuses[#statuses + 1] = h.status end })
    assert.is_truthy(outcome, message)
    assert.equal(1, #asked)
    assert.is_string(asked[1].message)
    assert.is_false(outcome.is_error)
    assert.truthy(outcome.text:find("bats", 1, true))
    local saw_input = false
    for _, s in ipairs(statuses) do saw_input = saw_input or s == "input_required" end
    assert.is_true(saw_input)
  end)

  it("a task still working when the budget ends is a timeout whose handle stays valid", function()
    local conn <close> = connect { tasks = true }
    assert(research_tool(conn))
    local handle
    local outcome, _, err = conn:call_tool("simulate-research-query", { topic = "slow" },
      { budget = 1.5, on_task = function(h) handle = handle or h end })
    assert.is_nil(outcome)
    assert.equal("timeout", err.kind)
    assert.equal(handle.id, err.task_id)
    local later = assert(conn:task(handle):result { budget = 20 })
    assert.truthy(later.text:find("slow", 1, true))
  end)

  it("an unknown task id, a cancelled task, and a second cancel are each a clear failure", function()
    local conn <close> = connect { tasks = true }
    assert(research_tool(conn))
    local _, message, err = conn:task("no-such-task"):status()
    assert.equal("task", err.kind)
    assert.equal("unknown", err.reason)
    assert.equal("no-such-task", err.task_id)
    assert.truthy(message:find("no-such-task", 1, true))
    local handle = assert(conn:call_tool("simulate-research-query", { topic = "cancel me" },
      { task = true, detach = true }))
    local t = conn:task(handle)
    assert.is_true(assert(t:cancel()))
    local _, _, ended = t:result { budget = 5 }
    assert.equal("task", ended.kind)
    assert.equal("cancelled", ended.reason)
    local _, _, again = t:cancel()
    assert.equal("task", again.kind)
  end)

  it("without tasks asked for, the required tool is called plainly and the server's refusal is the answer",
    function()
      local conn <close> = connect()
      assert(research_tool(conn))
      local outcome = assert(conn:call_tool("simulate-research-query", { topic = "plain" }))
      assert.is_true(outcome.is_error)
    end)
end)
