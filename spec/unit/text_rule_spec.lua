-- The text rule at the edges this helper owns: what a server says about
-- itself reaches the operator through core.label without C1 controls or
-- bidi/invisible formatting characters, and what `--json` prints (the JSON
-- encoder) carries those code points only as \uXXXX escapes, equal in value.
local mcp = require "mcpclient"
local core = require "mcpclient.core"

local Fake = require "support.fake_server"

local json = core.json

-- Bytes a terminal would obey or reorder: CSI/OSC/ST in C1, overrides, isolates.
local HOSTILE = { "\u{202E}", "\u{2066}", "\u{2067}", "\u{2068}", "\u{2069}", "\u{9B}", "\u{9D}", "\u{9C}" }

local function carries_hidden(text)
  for _, ch in ipairs(HOSTILE) do
    if text:find(ch, 1, true) then return true end
  end
  return false
end

describe("the text rule", function()
  it("keeps C1 and bidi characters out of the serverInfo a ping reports", function()
    local fake = Fake.new():will_handshake(nil, nil, {
      name = "Docs\u{202E}revres\u{202C} \u{2066}admin\u{2069}", version = "1.0\u{9B}2J\u{9D}0;pwned\u{9C}",
    })
    local conn = mcp.connect { url = "https://mcp.example.com/rpc", identifier = "srv", health = mcp.health.discard,
      transport = fake, clock = fake.clock }
    local status = assert(conn:ping())
    assert.equal("Docs revres   admin", status.server_name)  -- each control run is one space; real spaces stay
    assert.equal("1.0 2J 0;pwned", status.server_version)
    assert.is_false(carries_hidden(status.server_name .. status.server_version))
  end)

  it("escapes them in JSON output, names and descriptions alike", function()
    local tool = { name = "read\u{202E}txt.exe", description = "Reads\u{2067} a page\u{9B}31m \u{2066}x\u{2069}",
      title = "\u{9D}0;title\u{9C}" }
    local text = json.encode(tool)
    assert.is_false(carries_hidden(text))
    assert.matches("read\\u202etxt.exe", text, 1, true)
    assert.matches("\\u009b31m", text, 1, true)
    assert.same(tool, json.decode(text))
  end)
end)
