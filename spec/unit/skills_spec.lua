-- Skills over the fake leg: a listing reads no file; loading a skill reads its SKILL.md once and
-- hands it over only when its size, SHA-256 digest and frontmatter are the listing's.
local mcp = require "mcpclient"
local Fake = require "support.fake_server"
local core = require "mcpclient.core"

local SKILL = "---\nname: pdf-processing\ndescription: \"Extract, fill: assemble\"\n---\n\nBody.\n"
local URI = "skill://pdf-processing/SKILL.md"
local FORMS = "skill://pdf-processing/references/FORMS.md"

local function digest(text)
  return "sha256:" .. (core.crypto.sha256(text):gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

local function entry(over)
  local e = { uri = URI, frontmatter = { name = "pdf-processing", description = "Extract, fill: assemble" },
    resources = { { uri = URI, digest = digest(SKILL), size = #SKILL },
      { uri = FORMS, digest = digest("x"), size = 1 } } }
  for k, v in pairs(over or {}) do e[k] = v end
  return e
end

local function listing(entries) return { skills = mcp.json.array(entries) } end
local function read(text) return { contents = { { uri = URI, mimeType = "text/markdown", text = text } } } end

local function connect(fake)
  return mcp.connect { url = "https://mcp.example.com/rpc", identifier = "srv", transport = fake, clock = fake.clock,
    health = mcp.health.discard, protocol = "2025-11-25" }
end

describe("skills", function()
  it("lists the skills and reads none of their files", function()
    local fake = Fake.new():will_handshake():will_return(listing { entry(),
      { uri = "skill://x/SKILL.md", frontmatter = { name = "x" }, resources = {} } })
    local list = assert(connect(fake):skills())
    assert.equal(1, #list)   -- the second names no digest for its SKILL.md: it could never be verified
    assert.equal("pdf-processing", list[1].name)
    assert.equal("Extract, fill: assemble", list[1].description)
    assert.equal(2, #list[1].resources)
    assert.same({ "initialize", "notifications/initialized", "skills/list" }, fake:methods())
  end)

  it("loads a skill whose SKILL.md is the listing's, reading that file only", function()
    local fake = Fake.new():will_handshake():will_return(listing { entry() }):will_return(read(SKILL))
    local skill = assert(connect(fake):read_skill("pdf-processing"))
    assert.equal(SKILL, skill.text)
    assert.same({ name = "pdf-processing", description = "Extract, fill: assemble" }, skill.frontmatter)
    assert.same({ "initialize", "notifications/initialized", "skills/list", "resources/read" }, fake:methods())
    assert.equal(URI, fake.requests[4].body.params.uri)
  end)

  local tampered = {
    { "another digest", SKILL:gsub("Body", "Evil"), "digest" },
    { "another size", SKILL .. "more\n", "bytes where the listing says" },
    { "other frontmatter", SKILL:gsub("Extract, fill: assemble", "Exfiltrate"), "frontmatter differs" },
    { "a field the listing lacks", SKILL:gsub("\n%-%-%-\n\n", "\nextra: yes\n---\n\n", 1), "frontmatter differs" },
    { "nested frontmatter", SKILL:gsub("\n%-%-%-\n\n", "\nmeta:\n  a: b\n---\n\n", 1), "does not compare" },
    { "no frontmatter", "Body only.\n", "does not open with a frontmatter" },
  }
  for _, case in ipairs(tampered) do
    it("refuses a SKILL.md with " .. case[1] .. ", handing nothing over", function()
      local text, why = case[2], case[3]
      local e = entry()
      if why ~= "digest" and why ~= "bytes where the listing says" then
        e.resources[1] = { uri = URI, digest = digest(text), size = #text }   -- only the frontmatter is off
      end
      local fake = Fake.new():will_handshake():will_return(listing { e }):will_return(read(text))
      local skill, message, err = connect(fake):read_skill("pdf-processing")
      assert.is_nil(skill)
      assert.equal("integrity", err.kind)
      assert.equal(URI, err.uri)
      assert.truthy(message:find(why, 1, true), message)
      assert.is_nil(message:find("Evil", 1, true))
      assert.equal(4, #fake.requests)   -- the listing and the one read; no other file
    end)
  end

  it("names an unknown skill, and misuse raises", function()
    local fake = Fake.new():will_handshake():will_return(listing { entry() })
    local conn = connect(fake)
    local skill, _, err = conn:read_skill("nope")
    assert.is_nil(skill)
    assert.equal("unknown_skill", err.kind)
    assert.equal("nope", err.name)
    assert.has_error(function() conn:read_skill(7) end, "read_skill: name must be a string")
  end)
end)
