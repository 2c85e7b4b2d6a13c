-- read_skill is one operation with one budget: the listing it reads first (when none is held)
-- and the SKILL.md's read share one deadline, on the fake leg's clock (no real waiting).
local mcp = require "mcpclient"
local Fake = require "support.fake_server"
local core = require "mcpclient.core"

local SKILL = "---\nname: pdf-processing\ndescription: Extract\n---\n\nBody.\n"
local URI = "skill://pdf-processing/SKILL.md"

local function listing()
  local sha = core.crypto.sha256(SKILL):gsub(".", function(c) return string.format("%02x", c:byte()) end)
  return { skills = mcp.json.array { { uri = URI, frontmatter = { name = "pdf-processing", description = "Extract" },
    resources = { { uri = URI, digest = "sha256:" .. sha, size = #SKILL } } } } }
end

local function connect(fake)
  return mcp.connect { url = "https://mcp.example.com/rpc", identifier = "srv", transport = fake, clock = fake.clock,
    health = mcp.health.discard, protocol = "2025-11-25" }
end

describe("read_skill's budget", function()
  it("is spent by the listing and the read together", function()
    -- the handshake's two legs take no time, the listing 0.7 s; the read never answers
    local fake = Fake.new():will_handshake():will_return(listing()):will_hang(0.01):take(0, 0, 0.7)
    local conn <close> = connect(fake)
    local start = fake.now
    local skill, message, err = conn:read_skill("pdf-processing", { budget = 1 })
    assert.is_nil(skill)
    assert.equal("timeout", err.kind, message)
    -- the read abandoned at the budget is cancelled on the wire
    assert.same({ "initialize", "notifications/initialized", "skills/list", "resources/read",
      "notifications/cancelled" }, fake:methods())
    local took = fake.now - start
    assert.is_true(took <= 1.05, "the failure came after " .. took .. " s of a 1 s budget")
    local granted = fake:granted_timeouts()
    assert.is_true(granted[4] <= 300, "the read was granted " .. granted[4] .. " ms")
  end)

  it("still reads the skill when both fit in it", function()
    local fake = Fake.new():will_handshake():will_return(listing())
      :will_return({ contents = { { uri = URI, text = SKILL } } }):take(0, 0, 0.4, 0.4)
    local conn <close> = connect(fake)
    local skill = assert(conn:read_skill("pdf-processing", { budget = 1 }))
    assert.equal(SKILL, skill.text)
  end)
end)
