-- mcpclient resources / read / prompts over an injected store and a scripted server: what is
-- printed (far-side text inert, in text and in --json), and a refusal.
local cli = require "support.cli"
local core = require "mcpclient.core"
local Fake = require "support.fake_server"
local servers = require "support.servers"

local json = core.json

local CAPS = { tools = {}, resources = {}, prompts = {} }

local function opening(caps)
  return Fake.new():will_return({ protocolVersion = "2025-11-25", capabilities = caps or CAPS,
    serverInfo = { name = "Docs", version = "1" } })
end

-- Only the line breaks the command writes; no control character a server sent.
local function no_escapes(text)
  assert.falsy(text:gsub("\n", ""):find("%c"), "control characters in: " .. text)
  assert.falsy(text:find("\226\128\174", 1, true), "a bidi override in: " .. text)
end

describe("the offers commands", function()
  local store
  before_each(function()
    store = servers.open_store()
    servers.add(store, { identifier = "docs" })
  end)
  after_each(function() store:close() end)

  local function run(argv, fake)
    return cli.main(argv, { store = store, options = { transport = fake, clock = fake.clock } })
  end

  it("resources: a table of resources and templates, inert", function()
    local fake = opening()
      :will_return { resources = json.array { { uri = "file:///a\27[2J", name = "Alpha\226\128\174",
        mimeType = "text/plain", description = "first\nline" } } }
      :will_return { resourceTemplates = json.array { { uriTemplate = "file:///{p}", name = "files" } } }
    local code, out, err = run({ "resources", "docs" }, fake)
    assert.equal(0, code, err)
    assert.truthy(out:find("URI", 1, true))
    assert.truthy(out:find("file:///{p}", 1, true))
    assert.truthy(out:find("template", 1, true))
    no_escapes(out)
  end)

  it("resources --json: every field under the text rule", function()
    local fake = opening()
      :will_return { resources = json.array { { uri = "file:///a", name = "A\27]0;t\7", size = 12 } } }
      :will_return { resourceTemplates = json.array {} }
    local code, out = run({ "--json", "resources", "docs" }, fake)
    assert.equal(0, code)
    local data = json.decode(out)
    assert.equal("file:///a", data.resources[1].uri)
    assert.equal(12, data.resources[1].size)
    assert.falsy(data.resources[1].name:find("%c"))
    assert.equal(0, #data.templates)
  end)

  it("read: the text a model reads, the note first, each line inert", function()
    local fake = opening():will_return { contents = json.array { { uri = "file:///a", text = "one\27[31m\ntwo" },
      { uri = "file:///a.png", mimeType = "image/png", blob = "AAAA" } } }
    local code, out = run({ "read", "docs", "file:///a" }, fake)
    assert.equal(0, code)
    -- the escape sequence goes whole (the read's text is inert), not only its ESC
    assert.equal("[mcpclient reads text only and dropped 1 non-text content block (image).]\none\ntwo\n", out)
    no_escapes(out)
    fake = opening():will_return { contents = json.array { { uri = "file:///a.png", mimeType = "image/png",
      blob = "AAAA" } } }
    code, out = run({ "--json", "read", "docs", "file:///a.png" }, fake)
    assert.equal(0, code)
    local data = json.decode(out)
    assert.equal(4, data.contents[1].blob_bytes)
    assert.equal(json.null, data.contents[1].text)
  end)

  it("prompts: names and arguments, required marked", function()
    local fake = opening():will_return { prompts = json.array {
      { name = "greet", description = "Says\27[1m hello.", arguments = json.array { { name = "who", required = true },
        { name = "tone" } } } } }
    local code, out = run({ "prompts", "docs" }, fake)
    assert.equal(0, code)
    assert.truthy(out:find("greet", 1, true))
    assert.truthy(out:find("who* tone", 1, true))
    no_escapes(out)
  end)

  it("a server without prompts or resources lists none, exit 0, nothing asked", function()
    local fake = opening { tools = {} }
    local code, out, err = run({ "prompts", "docs" }, fake)
    assert.equal(0, code, err)
    assert.equal("The server offers no prompts.\n", out)
    assert.equal("", err)
    code, out = run({ "--json", "prompts", "docs" }, opening { tools = {} })
    assert.equal(0, code)
    assert.equal(0, #json.decode(out))
    code, out = run({ "resources", "docs" }, opening { tools = {} })
    assert.equal(0, code)
    assert.equal("The server offers no resources.\n", out)
    assert.same({ "initialize", "notifications/initialized" }, fake:methods())
  end)

  it("read of a URI the server does not have: no such resource, its code said once", function()
    local fake = opening():will_return_rpc_error(-32602, "MCP error -32602: Resource file:///nope not found")
    local code, out, err = run({ "read", "docs", "file:///nope" }, fake)
    assert.equal(1, code)
    assert.equal("", out)
    assert.equal('docs has no such resource: "file:///nope" (its resources: `mcpclient resources docs`). '
      .. "It said: Resource file:///nope not found\n", err)
  end)

  it("refuses a read without a URI and an unknown server", function()
    local code, out, err = run({ "read", "docs" }, opening())
    assert.equal("", out)
    assert.equal(2, code)
    assert.truthy(err:find("needs a server and a resource URI", 1, true))
    code, out = run({ "--json", "resources", "nope" }, opening())
    assert.equal(1, code)
    assert.equal("unknown_server", json.decode(out).kind)
  end)
end)
