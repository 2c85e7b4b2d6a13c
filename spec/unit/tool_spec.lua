-- Local names and the tool wrapper: what the gate and the model see of an
-- imported tool, and the ToolResult its execution hands back.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local names = require "mcpclient.agent.names"
local tool = require "mcpclient.agent.tool"
local Fake = require "support.fake_server"

describe("local names", function()
  it("joins prefix, identifier and remote name without rewriting", function()
    assert.equal("mcp_typo3_get_page_tree", names.local_name("typo3", "get_page_tree"))
    assert.equal("mcp_srv2_list-items9", names.local_name("srv2", "list-items9"))
    assert.equal("mcp_a_", names.local_name("a", "")) -- valid: nameless tools are the import's to refuse
  end)

  it("accepts exactly 64 characters and refuses 65", function()
    local remote64 = string.rep("x", 64 - #"mcp_id_")
    assert.equal(64, #names.local_name("id", remote64))
    assert.is_nil(names.local_name("id", remote64 .. "x"))
  end)

  it("refuses what it would have to rewrite", function()
    for _, remote in ipairs { "a.b", "a/b", "a b", "seitenbäume", "tail\n", "" .. "\0" } do
      assert.is_nil(names.local_name("srv", remote), remote)
    end
    assert.is_nil(names.local_name("my.srv", "tool"))
    assert.is_nil(names.local_name("srv", 42))
  end)

  it("names the group after the identifier", function()
    assert.equal("mcp_docs", names.group("docs"))
  end)
end)

describe("an imported tool", function()
  local server = { identifier = "docs", name = "Docs server", data_class = "internalConfiguration",
    requires_approval = "0" }

  local function make(fake, spec)
    local conn = mcp.connect { url = "https://mcp.example.com/rpc", identifier = "docs", transport = fake,
      clock = fake.clock, health = mcp.health.discard }
    spec = spec or {}
    return tool.new {
      server = spec.server or server,
      local_name = "mcp_docs_read_page", remote_name = "read_page",
      description = spec.description, parameters = core.normalise_schema { type = "object", properties = {} },
      connection = function() return conn end,
    }
  end

  it("declares what the operator's record says, never what the server claims", function()
    local t = make(Fake.new(), { description = "  Reads a page.  " })
    assert.equal('[via the external MCP server "Docs server"] Reads a page.', t.description)
    assert.equal("internalConfiguration", t.data_class)
    assert.is_false(t.requires_approval)
    assert.equal("non_idempotent_write", t.effect)
    assert.is_true(t.requires_admin)
    assert.is_false(t.enabled_by_default)
    assert.equal("mcp_docs", t.group)
    assert.is_true(t.remote)
    assert.equal('{"type":"object","properties":{}}', mcp.json.encode(t:spec().parameters))
  end)

  it("states the origin alone when the server gave no description", function()
    assert.equal('[via the external MCP server "Docs server"]', make(Fake.new()).description)
  end)

  it("requires approval unless the stored flag is literally 0", function()
    for value, expected in pairs { ["1"] = true, [""] = true, maybe = true, ["2"] = true, ["0.0"] = true,
      ["0"] = false } do
      local t = make(Fake.new(), { server = { identifier = "docs", name = "D", data_class = "publicContent",
        requires_approval = value } })
      assert.equal(expected, t.requires_approval, value)
    end
  end)

  it("executes under the remote name and returns a text result", function()
    local fake = Fake.new():will_handshake()
      :will_return { content = { { type = "text", text = "page 3 reads: hello" } } }
    local result = make(fake):execute({ uid = 3 })
    assert.same({ text = "page 3 reads: hello", is_error = false }, result)
    local call = fake.requests[3]
    assert.equal("read_page", call.body.params.name)
    assert.equal(3, call.body.params.arguments.uid)
  end)

  it("returns the server's isError as an error result", function()
    local fake = Fake.new():will_handshake()
      :will_return { content = { { type = "text", text = "page 3 does not exist" } }, isError = true }
    local result = make(fake):execute({ uid = 3 })
    assert.is_true(result.is_error)
    assert.truthy(result.text:find("page 3 does not exist", 1, true))
  end)

  it("offers a model a 1.5 MB description with escape sequences bounded and stripped", function()
    local chunk = "\27[2J\27]0;owned\7 Reads a page.\r\n\u{9B}31m"
    local huge = string.rep(chunk, math.ceil(1.5 * 1024 * 1024 / #chunk))
    local offered = make(Fake.new(), { description = huge }):spec()
    assert.is_true(#offered.description <= tool.DESCRIPTION_MAX_BYTES, #offered.description)
    assert.is_true(#offered.description > tool.DESCRIPTION_MAX_BYTES - 64, #offered.description)
    assert.is_nil(offered.description:find("[%c\127]"))
    assert.is_nil(offered.description:find("\u{9B}", 1, true))
    assert.truthy(offered.description:find('^%[via the external MCP server "Docs server"%] '))
    assert.equal("\u{2026}", offered.description:sub(-3))
    assert.truthy(utf8.len(offered.description))
  end)

  it("cuts a long description at a character boundary", function()
    for shift = 0, 3 do
      local text = string.rep("x", shift) .. string.rep("\u{1F600}", 2000)
      local description = make(Fake.new(), { description = text }).description
      assert.is_true(#description <= tool.DESCRIPTION_MAX_BYTES, #description)
      assert.truthy(utf8.len(description), "invalid UTF-8 at shift " .. shift)
    end
  end)

  it("strips control characters from the server's name in the origin", function()
    local t = make(Fake.new(), { server = { identifier = "docs", name = "Docs\27[31m\nserver",
      data_class = "publicContent", requires_approval = "0" }, description = "Reads." })
    assert.equal('[via the external MCP server "Docs [31m server"] Reads.', t:spec().description)
  end)

  it("carries the connection's failure value unchanged in the error result", function()
    local fake = Fake.new():will_handshake():will_return_raw("{}", 502)
    local t = make(fake)
    local result = t:execute({})
    assert.is_true(result.is_error)
    assert.equal("http_status", result.err.kind)
    assert.equal(502, result.err.status)
    assert.equal("docs", result.err.server)
    assert.equal(result.err.message, result.text)
  end)

  it("gives an isError answer and a refused argument list no failure value", function()
    local fake = Fake.new():will_handshake()
      :will_return { content = { { type = "text", text = "no" } }, isError = true }
    local t = make(fake)
    assert.is_nil(t:execute({}).err)
    assert.is_nil(t:execute(mcp.json.array { 1 }).err)
  end)

  it("returns every transport failure as an error result naming the server, never raising", function()
    local scripts = {
      function(f) f:will_return_raw("{}", 503) end,
      function(f) f:will_fail("transport", "connection reset by peer") end,
      function(f) f:will_return_raw("<html>", 200, "text/html") end,
    }
    for _, script in ipairs(scripts) do
      local fake = Fake.new():will_handshake()
      script(fake)
      local result = make(fake):execute({})
      assert.is_true(result.is_error)
      assert.truthy(result.text:find('"docs"', 1, true), result.text)
    end
  end)

  it("carries the cancel hook and the budget through", function()
    local fake = Fake.new():will_handshake():will_hang(0.01)
    local n = 0
    -- polled before the era probe, initialize, initialized and the call, then while it hangs
    local result = make(fake):execute({}, { cancel = function() n = n + 1; return n > 4 end, budget = 7 })
    assert.is_true(result.is_error)
    assert.truthy(result.text:find("cancelled in flight", 1, true))
    assert.truthy(result.text:find("may already have acted", 1, true))
    assert.equal("cancelled", result.err.kind)
    assert.is_true(result.err.in_flight)
    assert.equal(7000, fake.requests[1].timeout_ms)
  end)

  it("refuses a list as arguments with an error result and sends nothing: [], [1, 2], a Lua sequence", function()
    local fake = Fake.new():will_handshake():will_return { content = {} }
    local t = make(fake)
    for _, args in ipairs { mcp.json.array { 1, 2 }, mcp.json.array {}, { 1, 2 }, { "a", b = 1 }, { [2] = "x" } } do
      local result = t:execute(args)
      assert.is_true(result.is_error)
      assert.truthy(result.text:find("takes named arguments (a JSON object), not a list", 1, true), result.text)
    end
    assert.is_true(t:execute("text").is_error)
    assert.equal(0, #fake.requests)
    assert.is_false(t:execute({}).is_error)
    assert.truthy(fake.requests[#fake.requests].raw:find('"arguments":{}', 1, true))
  end)
end)
