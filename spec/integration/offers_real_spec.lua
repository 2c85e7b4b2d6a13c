-- Resources, templates, prompts, completion, subscriptions and change notices against servers
-- nobody here wrote, started by this spec on 127.0.0.1 and stopped by their PIDs:
-- server-everything (the 2025 era over a session and its GET stream) and the SDK v2 server in the
-- 2026-07-28 era (spec/peers/sdk2-server.mjs: a resource, a blob, a template, a prompt, a tool
-- returning links, and `touch`, which publishes change events to subscriptions/listen streams).
-- A run then reads a resource_link a tool returned through its gate.
local mcp = require "mcpclient"
local catalogue = require "mcpclient.agent.catalogue"
local run = require "mcpclient.agent.run"
local cli = require "support.cli"
local peers = require "support.peers"
local servers = require "support.servers"

-- `lua5.4 bin/mcpclient --db <db> <args...>` → exit code, stdout.
local mcpclient = cli.mcpclient

local function connect(url, extra)
  local options = { url = url, identifier = "peer", health = mcp.health.memory() }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

local function uris(list, field)
  local out = {}
  for i, e in ipairs(list) do out[i] = e[field or "uri"] end
  return out
end

describe("server-everything's offers (2025 era) #integration", function()
  local peer
  setup(function()
    peers.require_available()
    peer = peers.start("everything")
  end)
  teardown(function() if peer then peer.stop() end end)

  it("lists resources and templates, reads text, and names what is not text", function()
    local conn <close> = connect(peer.url)
    local resources, listing = assert(conn:list_resources())
    assert.equal("legacy", listing.era)
    assert.is_true(#resources > 0)
    for _, r in ipairs(resources) do assert.is_string(r.uri) end
    local templates = assert(conn:list_resource_templates())
    assert.is_true(#templates > 0)
    assert.is_string(templates[1].uriTemplate)
    local read = assert(conn:read_resource(resources[1].uri))
    assert.is_true(#read.contents >= 1)
    assert.equal(resources[1].uri, read.contents[1].uri)
    assert.is_true(#read.text > 0 and #read.text <= 50000)
  end)

  it("lists prompts, gets one with its arguments, and completes an argument", function()
    local conn <close> = connect(peer.url)
    local prompts = assert(conn:list_prompts())
    local by_name = {}
    for _, p in ipairs(prompts) do by_name[p.name] = p end
    assert.truthy(by_name["simple-prompt"])
    local simple = assert(conn:get_prompt("simple-prompt"))
    assert.truthy(simple.text:find("^user: "))
    local args = assert(by_name["args-prompt"], "args-prompt")
    local given = {}
    for _, a in ipairs(args.arguments) do given[a.name] = "x" end
    local got = assert(conn:get_prompt("args-prompt", given))
    assert.is_true(#got.messages > 0)
    local completable = assert(by_name["completable-prompt"], "completable-prompt")
    local out = assert(conn:complete({ type = "ref/prompt", name = "completable-prompt" },
      { name = completable.arguments[1].name, value = "" }))
    assert.is_table(out.values)
    assert.is_boolean(out.has_more)
  end)

  it("subscribes: resources/updated arrives on the GET stream held open during a call", function()
    local seen = {}
    local conn <close> = connect(peer.url, { on_change = function(kind, uri) seen[#seen + 1] = { kind, uri } end })
    local resources = assert(conn:list_resources())
    local uri = resources[1].uri
    assert.is_true(conn:subscribe(uri))
    -- the server sends one update at once, then one every 5 s, until toggled off
    assert(conn:call_tool("toggle-subscriber-updates", {}))
    assert(conn:call_tool("toggle-subscriber-updates", {}))
    assert.same({ "resource", uri }, seen[1])
    assert.is_true(conn:unsubscribe(uri))
  end)

  it("an import keeps its resources, templates and prompts beside its tools", function()
    local store = servers.open_store()
    local uid = servers.add(store, { identifier = "every", url = peer.url, data_class = "publicContent" })
    local report = catalogue.import(store, assert(store:server(uid)), { log = function() end })
    assert.is_false(report.refused)
    assert.is_true(report.offers.resource > 0 and report.offers.template > 0 and report.offers.prompt > 0)
    assert.equal(report.offers.resource, #assert(store:offers_of(uid, "resource")))
    assert.truthy(#assert(store:offers_of(uid, "prompt")) >= 4)
    store:close()
  end)

  it("mcpclient resources, read and prompts against it, text and --json", function()
    local path = os.tmpname()
    os.remove(path)
    local db = path .. ".db"
    assert.equal(0, (mcpclient(db, "add", "--identifier", "every", "--name", "Everything", "--url", peer.url,
      "--data-class", "publicContent", "--enabled")))
    local code, out = mcpclient(db, "--json", "resources", "every")
    assert.equal(0, code, out)
    local listed = mcp.json.decode(out)
    assert.is_true(#listed.resources > 0 and #listed.templates > 0)
    code, out = mcpclient(db, "read", "every", listed.resources[1].uri)
    assert.equal(0, code, out)
    assert.is_true(#out > 0)
    assert.falsy(out:gsub("\n", ""):find("%c"))
    code, out = mcpclient(db, "prompts", "every")
    assert.equal(0, code, out)
    assert.truthy(out:find("simple-prompt", 1, true))
    for _, suffix in ipairs { "", "-wal", "-shm", "-journal" } do os.remove(db .. suffix) end
  end)

  it("a tool result's resource links are kept and named", function()
    local conn <close> = connect(peer.url)
    local linked = assert(conn:call_tool("get-resource-links", { count = 2 }))
    local links = 0
    for _, block in ipairs(linked.content) do
      if block.type == "resource_link" then links = links + 1 end
    end
    assert.is_true(links >= 1)
    assert.truthy(linked.note:find("The result names", 1, true))
  end)
end)

describe("the SDK v2 server's offers in the 2026-07-28 era #integration", function()
  local peer
  setup(function()
    peers.require_available()
    peer = peers.start("sdk2-modern", { log = true })
  end)
  teardown(function() if peer then peer.stop() end end)

  it("lists, reads and gets with the freshness hint; a missing resource is the server's error", function()
    local conn <close> = connect(peer.url)
    local resources, listing = assert(conn:list_resources())
    assert.equal("modern", listing.era)
    assert.is_number(listing.ttl_ms)
    assert.same({ "doc://readme", "doc://logo" }, uris(resources))
    assert.same({ "doc://pages/{page}" }, uris(assert(conn:list_resource_templates()), "uriTemplate"))
    assert.equal("# Peer\nA test server.", assert(conn:read_resource("doc://readme")).text)
    local logo = assert(conn:read_resource("doc://logo"))
    assert.equal("iVBORw0KGgo=", logo.contents[1].blob)
    assert.truthy(logo.text:find("(image)", 1, true))
    assert.equal("page 7", assert(conn:read_resource("doc://pages/7")).text)
    local missing, _, err = conn:read_resource("doc://none")
    assert.is_nil(missing)
    assert.equal("rpc_error", err.kind)
    assert.equal("user: Hello Ada", assert(conn:get_prompt("greet", { who = "Ada" })).text)
    local done = assert(conn:complete({ type = "ref/prompt", name = "greet" }, { name = "who", value = "A" }))
    assert.same({ "Ada", "Alan" }, done.values)
  end)

  it("hears list_changed and resources/updated through subscriptions/listen beside a request", function()
    local seen = {}
    local conn <close> = connect(peer.url, { on_change = function(kind, uri)
      seen[#seen + 1] = kind .. (uri and (" " .. uri) or "")
    end })
    assert.is_true(conn:subscribe("doc://readme"))
    assert.equal("touched", assert(conn:call_tool("touch", {})).text)
    assert.same({ "resources", "resource doc://readme" }, seen)
    local listened = 0
    for _, line in ipairs(peer.log_lines()) do
      if line:find("^POST subscriptions/listen 2026%-07%-28") then listened = listened + 1 end
    end
    assert.is_true(listened >= 1)
  end)

  it("keeps a listing with cache = true until its list_changed notice", function()
    local conn <close> = connect(peer.url, { cache = true })
    assert(conn:list_prompts())
    local _, again = assert(conn:list_prompts())
    -- the SDK's ttlMs is 0: the listing is stale at once and asked again
    assert.is_nil(again.cached)
  end)

  it("a run reads the resource_link a tool returned, through the gate, recorded", function()
    local store = servers.open_store()
    servers.add(store, { identifier = "v2", url = peer.url, data_class = "publicContent",
      requires_approval = "0" })
    local r = assert(run.start(store, { user = { name = "ops", uid = 1, admin = true },
      configuration = { identifier = "c", provider = "p" }, providers = { p = { zone = "local" } },
      tools = {}, log = function() end }))
    local conn <close> = connect(peer.url)
    local linked = assert(conn:call_tool("links", {}))
    local link
    for _, block in ipairs(linked.content) do
      if block.type == "resource_link" then link = block.uri end
    end
    local result = r:read_resource("v2", link)
    assert.is_false(result.is_error, result.text)
    assert.equal("# Peer\nA test server.", result.text)
    local events = assert(r:events())
    assert.equal("resource", events[#events].kind)
    assert.equal(link, events[#events].data.target)
    r:finish()
    store:close()
  end)
end)
