-- An import keeps a server's resources, templates and prompts beside its tools (up to the caps,
-- reconciled, orphans kept), and a notifications/tools/list_changed marks the stored catalogue
-- stale until the next import; the readout shows it. Over a real store (SQLite, or PostgreSQL
-- with MCPCLIENT_TEST_PG) and a scripted server.
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local operator = require "mcpclient.agent.operator"
local Fake = require "support.fake_server"
local servers = require "support.servers"

local json = core.json

local CAPS = { tools = { listChanged = true }, resources = {}, prompts = {} }

-- A server listing these offers (nil: the kind is not advertised).
local function serving(resources, templates, prompts)
  local caps = { tools = {} }
  if resources or templates then caps.resources = {} end
  if prompts then caps.prompts = {} end
  local fake = Fake.new():will_return({ protocolVersion = "2025-11-25", capabilities = caps,
    serverInfo = { name = "Docs", version = "1" } })
  fake:will_return { tools = json.array {} }
  if caps.resources then
    fake:will_return { resources = json.array(resources or {}) }
    fake:will_return { resourceTemplates = json.array(templates or {}) }
  end
  if caps.prompts then fake:will_return { prompts = json.array(prompts) } end
  return fake
end

local function import(store, uid, fake)
  return catalogue.import(store, assert(store:server(uid)), { transport = fake, clock = fake.clock,
    now = 1700000000, log = function() end })
end

local function idents(rows)
  local out = {}
  for i, r in ipairs(rows) do out[i] = r.ident end
  return out
end

describe("an import keeps what a server offers beside its tools", function()
  local store
  before_each(function() store = servers.open_store() end)
  after_each(function() store:close() end)

  it("stores resources, templates and prompts, display fields under the text rule", function()
    local uid = servers.add(store, { identifier = "docs" })
    local report = import(store, uid, serving(
      { { uri = "file:///b", name = "B\27[31m", mimeType = "text/plain" }, { uri = "file:///a", name = "A" } },
      { { uriTemplate = "file:///{path}", name = "files" } },
      { { name = "greet", description = "Says hello.", arguments = { { name = "who", required = true } } } }))
    assert.is_false(report.refused)
    assert.same({ resource = 2, template = 1, prompt = 1 }, report.offers)
    local resources = assert(store:offers_of(uid, "resource"))
    assert.same({ "file:///a", "file:///b" }, idents(resources))
    assert.equal("B [31m", resources[2].name)
    assert.equal("text/plain", resources[2].mime_type)
    assert.same({ "file:///{path}" }, idents(assert(store:offers_of(uid, "template"))))
    local prompt = assert(store:offers_of(uid, "prompt"))[1]
    assert.equal("greet", prompt.ident)
    assert.equal("who", json.decode(prompt.detail)[1].name)
  end)

  it("reconciles: what the server no longer lists is orphaned, kept, and comes back live", function()
    local uid = servers.add(store, { identifier = "docs" })
    import(store, uid, serving({ { uri = "file:///a" }, { uri = "file:///b" } }, {}, nil))
    import(store, uid, serving({ { uri = "file:///b" } }, {}, nil))
    assert.same({ "file:///b" }, idents(assert(store:offers_of(uid, "resource"))))
    local all = assert(store:offers_of(uid, "resource", true))
    assert.same({ "file:///a", "file:///b" }, idents(all))
    assert.is_true(all[1].orphaned)
    import(store, uid, serving({ { uri = "file:///a" } }, {}, nil))
    assert.same({ "file:///a" }, idents(assert(store:offers_of(uid, "resource"))))
  end)

  it("keeps up to the cap and names the rest; skips an identifier past the byte cap", function()
    local uid = servers.add(store, { identifier = "docs" })
    local listed = { { uri = string.rep("u", catalogue.MAX_IDENT + 1) } }
    for i = 1, catalogue.MAX_OFFERS.prompt + 3 do listed[#listed + 1] = { name = string.format("p%04d", i) } end
    local fake = Fake.new():will_return({ protocolVersion = "2025-11-25", capabilities = CAPS,
      serverInfo = { name = "Docs", version = "1" } })
    fake:will_return { tools = json.array {} }
    fake:will_return { resources = json.array { listed[1] } }
    fake:will_return { resourceTemplates = json.array {} }
    fake:will_return { prompts = json.array { table.unpack(listed, 2) } }
    local report = import(store, uid, fake)
    assert.equal(0, report.offers.resource)
    assert.equal(catalogue.MAX_OFFERS.prompt, report.offers.prompt)
    local reasons = table.concat(report.skip_reasons, "\n")
    assert.truthy(reasons:find("longer than 2048 bytes", 1, true))
    assert.truthy(reasons:find(string.format("the first %d were kept", catalogue.MAX_OFFERS.prompt), 1, true))
    assert.equal("partial", store:server(uid).import_status)
  end)

  it("a failed listing keeps the stored offers of that kind and is named", function()
    local uid = servers.add(store, { identifier = "docs" })
    import(store, uid, serving({ { uri = "file:///a" } }, {}, nil))
    local fake = Fake.new():will_return({ protocolVersion = "2025-11-25", capabilities = { tools = {}, resources = {} },
      serverInfo = { name = "Docs", version = "1" } })
    fake:will_return { tools = json.array {} }
    fake:will_return_rpc_error(-32603, "boom")
    fake:will_return { resourceTemplates = json.array {} }
    local report = import(store, uid, fake)
    assert.truthy(table.concat(report.skip_reasons, "\n"):find("resource listing failed", 1, true))
    assert.same({ "file:///a" }, idents(assert(store:offers_of(uid, "resource"))))
  end)

  it("a tools/list_changed notice marks the catalogue stale; the readout shows it; an import clears it", function()
    local uid = servers.add(store, { identifier = "docs", data_class = "publicContent" })
    import(store, uid, serving(nil, nil, nil))
    local fake = Fake.new():will_return({ protocolVersion = "2025-11-25", capabilities = CAPS,
      serverInfo = { name = "Docs", version = "1" } })
    fake:will_stream { 'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n\n',
      Fake.sse_result { content = { { type = "text", text = "ok" } } } }
    local conn = assert(catalogue.connect(assert(store:server(uid)), { store = store, transport = fake,
      clock = fake.clock }))
    assert(conn:call_tool("t"))
    conn:close()
    assert.is_true(store:server(uid).catalogue_stale)
    local card = assert(operator.readout(store))[1]
    assert.is_true(card.catalogue_stale)
    import(store, uid, serving(nil, nil, nil))
    assert.is_false(store:server(uid).catalogue_stale)
    -- no GET stream was held open for the notices (listen = false)
    for _, r in ipairs(fake.requests) do assert.is_not.equal("GET", r.http_method) end
  end)
end)
