-- Resources, prompts, completion, subscriptions and tasks over stdio, against a server nobody
-- here wrote: server-everything in stdio mode (2025 era, tasks of 2025-11-25), started by the
-- connection itself (argv, no shell) and stopped by its close, checked gone by its PID.
local mcp = require "mcpclient"
local peers = require "support.peers"
local stdio = require "support.stdio"

local EVERYTHING = peers.node_modules .. "/@modelcontextprotocol/server-everything/dist/"

local function connect(extra)
  local options = { identifier = "everything", command = { "node", EVERYTHING .. "index.js", "stdio" },
    health = mcp.health.discard, protocol = "2025-11-25", budget = 30 }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

local function file_text(path)
  local f = assert(io.open(path))
  local text = f:read("a")
  f:close()
  return text
end

local function by(list, field)
  local out = {}
  for _, e in ipairs(list) do out[e[field]] = e end
  return out
end

describe("server-everything's offers and tasks over stdio #integration", function()
  setup(function() peers.require_available() end)
  after_each(function()
    collectgarbage()
    collectgarbage()
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)

  it("lists resources (page by page and whole alike) and templates, reads text and a blob", function()
    local conn <close> = connect()
    local resources, listing = assert(conn:list_resources())
    assert.equal("legacy", listing.era)
    local paged, pages = {}, 0
    assert(conn:each_resource_page(function(page)
      pages = pages + 1
      for _, r in ipairs(page) do paged[#paged + 1] = r.uri end
    end))
    assert.is_true(pages >= 1)
    local whole = {}
    for i, r in ipairs(resources) do whole[i] = r.uri end
    assert.same(whole, paged)
    -- the static documents are the files of its docs directory, read as they are on disk
    local uri = "demo://resource/static/document/instructions.md"
    assert.truthy(by(resources, "uri")[uri])
    local read = assert(conn:read_resource(uri))
    assert.equal(uri, read.contents[1].uri)
    assert.equal(file_text(EVERYTHING .. "docs/instructions.md"), read.contents[1].text)
    local templates = by(assert(conn:list_resource_templates()), "uriTemplate")
    assert.truthy(templates["demo://resource/dynamic/text/{resourceId}"])
    assert.truthy(templates["demo://resource/dynamic/blob/{resourceId}"])
    local text = assert(conn:read_resource("demo://resource/dynamic/text/7"))
    assert.truthy(text.contents[1].text:find("^Resource 7: This is a plaintext resource created at "))
    assert.equal(text.contents[1].text, text.text)
    local blob = assert(conn:read_resource("demo://resource/dynamic/blob/7"))
    assert.equal("demo://resource/dynamic/blob/7", blob.contents[1].uri)
    -- base64 of "Resource 7: This is a base64 blob" (33 bytes: no padding), then its timestamp
    assert.equal("UmVzb3VyY2UgNzogVGhpcyBpcyBhIGJhc2U2NCBibG9i", blob.contents[1].blob:sub(1, 44))
    assert.is_nil(blob.contents[1].text)
    local missing, _, err = conn:read_resource("demo://resource/dynamic/text/")
    assert.is_nil(missing)
    assert.equal("rpc_error", err.kind)
  end)

  it("lists prompts, gets one with its arguments, and completes an argument with its context", function()
    local conn <close> = connect()
    local prompts = by(assert(conn:list_prompts()), "name")
    assert.truthy(prompts["simple-prompt"])
    local args = by(assert(prompts["args-prompt"]).arguments, "name")
    assert.is_true(args.city.required)
    assert.equal("user: What's weather in Paris, Texas?",
      assert(conn:get_prompt("args-prompt", { city = "Paris", state = "Texas" })).text)
    assert.equal("user: What's weather in Oslo?", assert(conn:get_prompt("args-prompt", { city = "Oslo" })).text)
    local ref = { type = "ref/prompt", name = "completable-prompt" }
    assert.same({ "Sales", "Support" }, assert(conn:complete(ref, { name = "department", value = "S" })).values)
    assert.same({ "Eve" }, assert(conn:complete(ref, { name = "name", value = "E" },
      { department = "Sales" })).values)
  end)

  it("subscribes: resources/updated arrives on the same pipe during a call; unsubscribes", function()
    local seen = {}
    local conn <close> = connect { on_change = function(kind, uri) seen[#seen + 1] = { kind, uri } end }
    local uri = "demo://resource/static/document/instructions.md"
    assert.is_true(conn:subscribe(uri))
    -- the server sends one update at once for each subscribed URI, then one every 5 s, until toggled off
    assert(conn:call_tool("toggle-subscriber-updates", {}))
    assert(conn:call_tool("toggle-subscriber-updates", {}))
    -- beside it, the tools/list_changed the server sends once it has registered its optional tools
    local updates = {}
    for _, notice in ipairs(seen) do
      if notice[1] ~= "tools" then updates[#updates + 1] = notice end
    end
    assert.same({ { "resource", uri } }, updates)
    assert.is_true(conn:unsubscribe(uri))
  end)

  it("calls simulate-research-query as a task and returns its final outcome", function()
    local conn <close> = connect { tasks = true }
    local tools = by(assert(conn:list_tools()), "name")
    assert.equal("required", tools["simulate-research-query"].execution.taskSupport)
    local seen = {}
    local outcome, message = conn:call_tool("simulate-research-query", { topic = "lua" },
      { on_task = function(h) seen[#seen + 1] = h end })
    assert.is_truthy(outcome, message)
    assert.is_false(outcome.is_error)
    assert.truthy(outcome.text:find("lua", 1, true))
    assert.equal("working", seen[1].status)
    assert.equal(1000, seen[1].poll_ms)
  end)

  it("detaches: a handle at once, then the result through conn:task(handle):result()", function()
    local conn <close> = connect { tasks = true }
    assert(conn:list_tools())
    local handle = assert(conn:call_tool("simulate-research-query", { topic = "detached" },
      { task = true, detach = true }))
    assert.equal("working", handle.status)
    assert.equal("legacy", handle.era)
    local t = conn:task(handle)
    local now = assert(t:status())
    assert.equal(handle.id, now.id)
    local outcome = assert(t:result { budget = 20 })
    assert.is_false(outcome.is_error)
    assert.truthy(outcome.text:find("detached", 1, true))
  end)

  it("the ambiguous path: input_required answered through on_elicitation, then the task completes", function()
    local asked = {}
    local conn <close> = connect { tasks = true, on_elicitation = function(request)
      asked[#asked + 1] = request
      return { action = "accept", content = { interpretation = "technical" } }
    end }
    assert(conn:list_tools())
    local statuses = {}
    local outcome, message = conn:call_tool("simulate-research-query", { topic = "bats", ambiguous = true },
      { on_task = function(h) statuses[#statuses + 1] = h.status end })
    assert.is_truthy(outcome, message)
    assert.equal(1, #asked)
    assert.is_string(asked[1].message)
    assert.is_false(outcome.is_error)
    assert.truthy(outcome.text:find("bats", 1, true))
    assert.truthy(outcome.text:find("technical", 1, true))
    local saw_input = false
    for _, s in ipairs(statuses) do saw_input = saw_input or s == "input_required" end
    assert.is_true(saw_input)
  end)

  it("leaves no process behind: the child, alive while open, is gone by its PID after close", function()
    local conn = connect { tasks = true }
    assert(conn:call_tool("simulate-research-query", { topic = "left" }, { task = true, detach = true }))
    local pid = conn:server().pid
    assert.is_number(pid)
    assert.is_true(stdio.running(pid))
    conn:close()
    assert.is_false(stdio.running(pid))
  end)
end)
