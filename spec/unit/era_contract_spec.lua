-- The protocol revisions: one file each under lua/mcpclient/era/, every one filling the one contract
-- era/init.lua names (era.CONTRACT), nothing outside it; and a third revision is one new file: a copy
-- of an era file under another revision is negotiated like the others.
local core = require "mcpclient.core"
local era = require "mcpclient.era"

local json = core.json

-- The era files: every file of lua/mcpclient/era/ named by a revision (YYYY_MM_DD.lua).
local function era_files()
  local files, pipe = {}, assert(io.popen("ls lua/mcpclient/era"))
  for name in pipe:lines() do
    if name:find("^%d%d%d%d_%d%d_%d%d%.lua$") then files[#files + 1] = name end
  end
  pipe:close()
  table.sort(files)
  return files
end

local function slots()
  local list = {}
  for slot in pairs(era.CONTRACT) do list[#list + 1] = slot end
  table.sort(list)
  return list
end

-- A copy of the 2026-07-28 era file as another revision: the same text, another name.
local function third_revision(revision)
  local f = assert(io.open("lua/mcpclient/era/2026_07_28.lua"))
  local text = f:read("a"):gsub("2026%-07%-28", revision):gsub('this%.name = "modern"', 'this.name = "next"')
  f:close()
  return assert(load(text, "=era/" .. revision:gsub("%-", "_") .. ".lua"))()
end

-- A host over a scripted server: each request answered by `answer(method, params, state)`, every
-- request and notice recorded.
local function host_of(answer, protocol)
  local host = { identifier = "srv", protocol = protocol or "auto", sent = {} }
  function host.send(_, state, method, params)
    host.sent[#host.sent + 1] = { method = method, version = state and state.version, params = params }
    return answer(method, params, state)
  end
  function host.notify(_, _, message)
    host.sent[#host.sent + 1] = { method = message.method }
    return true
  end
  return host
end

local function reply(result, extra)
  local r = { result = result }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

local function discover_result(versions)
  return { supportedVersions = json.array(versions), capabilities = { tools = {} },
    _meta = { ["io.modelcontextprotocol/serverInfo"] = { name = "Fake", version = "1" } } }
end

local function refusal(kind, fields)
  fields.server = "srv"
  local _, message, err = require("mcpclient.errors").fail(kind, fields)
  return nil, message, err
end

describe("the era contract", function()
  it("names every slot with the type of its value", function()
    local TYPES = { string = true, boolean = true, table = true, ["function"] = true }
    assert.is_true(#slots() > 20)
    for _, slot in ipairs(slots()) do assert.is_true(TYPES[era.CONTRACT[slot]], slot) end
  end)

  it("has one era file per revision, each named by the revision it holds", function()
    local files = era_files()
    assert.same({ "2025_11_25.lua", "2026_07_28.lua" }, files)
    for _, file in ipairs(files) do
      local e = require("mcpclient.era." .. file:gsub("%.lua$", ""))
      assert.equal(file:gsub("%.lua$", ""):gsub("_", "-"), e.revision)
      assert.equal(e.revision, e.versions[1])
    end
  end)

  for _, file in ipairs(era_files()) do
    local name = file:gsub("%.lua$", "")
    it(name .. " fills every slot with a value of its type, and nothing outside the contract", function()
      local e = require("mcpclient.era." .. name)
      for _, slot in ipairs(slots()) do
        assert.equal(era.CONTRACT[slot], type(e[slot]), name .. " slot " .. slot)
      end
      for key in pairs(e) do
        assert.is_not_nil(era.CONTRACT[key], name .. " has a slot outside the contract: " .. key)
      end
    end)
  end

  it("knows every era of era.ERAS by its name and by the state an opening leaves", function()
    for _, e in ipairs(era.ERAS) do
      assert.equal(e, era.named(e.name))
      assert.equal(e, era.speaking(e.revision))
    end
    assert.equal(era.named("legacy"), era.of({ id = "a session kept by a handle" }))
  end)

  it("every era declares exactly what the host gave (answers), and says whether a roots change is announced",
    function()
      local handler = function() end
      local expected = {
        legacy = { none = {}, all = { elicitation = {}, sampling = {}, roots = { listChanged = true } },
          notice = true },
        modern = { none = nil, all = { elicitation = { form = {}, url = {} }, sampling = {}, roots = {} },
          notice = false },
      }
      for _, e in ipairs(era.ERAS) do
        local want = expected[e.name]
        assert.same(want.none, e.capabilities({}))
        assert.same(want.all, e.capabilities({ elicitation = handler, sampling = handler, roots = {} }))
        local only = e.capabilities({ roots = {} })
        assert.is_nil(only.sampling)
        assert.is_nil(only.elicitation)
        assert.is_not_nil(only.roots)
        assert.equal(want.notice, e.roots_notice)
      end
    end)
end)

describe("negotiation (era.negotiate)", function()
  local next_era = third_revision("2027-03-01")
  local ERAS = { next_era, era.named("modern"), era.named("legacy") }

  it("a copy of an era file under a third revision fills the contract", function()
    for _, slot in ipairs(slots()) do assert.equal(era.CONTRACT[slot], type(next_era[slot]), slot) end
    assert.equal("2027-03-01", next_era.revision)
  end)

  it("opens the third revision with a server that speaks it: its discovery, its state, its envelope", function()
    local host = host_of(function()
      return reply(discover_result { "2027-03-01", "2026-07-28" })
    end)
    local opened, state = era.negotiate(host, {}, ERAS)
    assert.is_not_nil(opened)
    assert.equal(next_era, state.era)
    assert.equal("2027-03-01", state.version)
    assert.same({ "server/discover" }, { host.sent[1].method, host.sent[2] })
    assert.equal("2027-03-01", host.sent[1].version)
    local params = state.era.envelope({}, state.version)
    assert.equal("2027-03-01", params._meta["io.modelcontextprotocol/protocolVersion"])
  end)

  it("falls back from the third revision to 2026-07-28 when the server names only that", function()
    local host = host_of(function(_, _, state)
      if state.version == "2027-03-01" then
        return refusal("protocol_version", { requested = "2027-03-01", offered = "2026-07-28",
          offered_list = { "2026-07-28" }, supported = "2027-03-01" })
      end
      return reply(discover_result { "2026-07-28" })
    end)
    local _, state = era.negotiate(host, {}, ERAS)
    assert.equal(era.named("modern"), state.era)
    assert.same({ "2027-03-01", "2026-07-28" }, { host.sent[1].version, host.sent[2].version })
  end)

  it("opens a 2025 server with initialize once discovery is refused as no method", function()
    local host = host_of(function(method)
      if method == "server/discover" then return refusal("rpc_error", { rpc_code = -32601, detail = "no" }) end
      return reply({ protocolVersion = "2025-11-25", capabilities = {}, serverInfo = { name = "Old" } },
        { session_id = "abc" })
    end)
    local _, state = era.negotiate(host, {}, ERAS)
    assert.equal(era.named("legacy"), state.era)
    assert.equal("abc", state.id)
    local methods = {}
    for i, sent in ipairs(host.sent) do methods[i] = sent.method end
    assert.same({ "server/discover", "initialize", "notifications/initialized" }, methods)
  end)

  it("a pinned 2025 revision opens with initialize at once; a pinned third revision is refused by a 2025 server",
    function()
      local host = host_of(function()
        return reply({ protocolVersion = "2025-11-25", capabilities = {} })
      end, "2025-11-25")
      local _, state = era.negotiate(host, {}, ERAS)
      assert.equal("initialize", host.sent[1].method)
      assert.equal(era.named("legacy"), state.era)
      host = host_of(function() return refusal("rpc_error", { rpc_code = -32601, detail = "no" }) end, "2027-03-01")
      local opened, _, err = era.negotiate(host, {}, ERAS)
      assert.is_nil(opened)
      assert.equal("rpc_error", err.kind)
      assert.equal(1, #host.sent)
    end)
end)

describe("the host's settings in each era (with_settings, set_level)", function()
  local settings = { log_level = "warning", client_info = { name = "me", version = "2" } }

  it("2026-07-28: each request's envelope names the log level and the client's identity", function()
    local modern = era.named("modern")
    local params = modern.with_settings(modern.envelope({ a = 1 }, "2026-07-28"), settings)
    assert.equal("warning", params._meta["io.modelcontextprotocol/logLevel"])
    assert.same({ name = "me", version = "2" }, params._meta["io.modelcontextprotocol/clientInfo"])
    assert.equal(1, params.a)
    local plain = modern.with_settings(modern.envelope({}, "2026-07-28"), {})
    assert.is_nil(plain._meta["io.modelcontextprotocol/logLevel"])
    assert.same({ name = "mcpclient", version = core.version }, plain._meta["io.modelcontextprotocol/clientInfo"])
    assert.is_true(modern.set_level())
  end)

  it("2025: nothing per request; the handshake names the client and asks for the level when logging is declared",
    function()
      local legacy = era.named("legacy")
      local params = { a = 1 }
      assert.equal(params, legacy.with_settings(params, settings))
      for _, logging in ipairs { true, false } do
        local host = host_of(function(method)
          if method == "initialize" then
            return reply({ protocolVersion = "2025-11-25", capabilities = { logging = logging and {} or nil } })
          end
          return reply({})
        end, "2025-11-25")
        host.settings = settings
        assert(era.negotiate(host, {}))
        assert.same({ name = "me", version = "2" }, host.sent[1].params.clientInfo)
        local last = host.sent[#host.sent]
        if logging then
          assert.same({ "logging/setLevel", { level = "warning" } }, { last.method, last.params })
        else
          assert.equal("notifications/initialized", last.method)
        end
      end
    end)

  it("2025: set_level is logging/setLevel, not_offered when the server declares no logging", function()
    local legacy = era.named("legacy")
    local host = host_of(function() return reply({}) end)
    assert.is_true(legacy.set_level(host, {}, { capabilities = { logging = {} } }, "error"))
    assert.same({ method = "logging/setLevel", params = { level = "error" } },
      { method = host.sent[1].method, params = host.sent[1].params })
    local ok, _, err = legacy.set_level(host, {}, { capabilities = {} }, "error")
    assert.is_nil(ok)
    assert.equal("not_offered", err.kind)
    assert.equal(1, #host.sent)
  end)
end)
