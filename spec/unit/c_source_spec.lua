-- The C sources say what the code does: core.h's registrar list names every function the module
-- offers and nothing else, in the order core.c calls the registrars; and every section banner has
-- the one form docs/ARCHITECTURE.md shows (a title between two rule lines, 74 columns).
local core = require "mcpclient.core"

local function read(path)
  local file = assert(io.open(path, "r"))
  local text = file:read("a")
  file:close()
  return text
end

describe("csrc/include/core.h", function()
  local header = read("csrc/include/core.h")
  -- the declarations of the Registrars section (from the first one to the next banner)
  local section = assert(header:match("/%* Registrars[^\n]*\n.-\n(void mcp_register.-)/%* ====="),
    "no Registrars section")
  local core_part, net_part = section:match("^(.-)(/%* mcpclient%.net.*)$")

  -- every name a module offers against the names core.h gives it (`prefix`.name, and the members
  -- of its sub-tables `prefix`.sub.{...})
  local function same_names(module, prefix, text)
    local named = { version = true }  -- each module sets its own version
    for name in text:gmatch(prefix .. "%.([%w_]+)") do named[name] = true end
    local offered = {}
    for name in pairs(module) do offered[name] = true end
    local missing, extra = {}, {}
    for name in pairs(offered) do if not named[name] then missing[#missing + 1] = name end end
    for name in pairs(named) do if not offered[name] then extra[#extra + 1] = name end end
    table.sort(missing)
    table.sort(extra)
    assert.same({}, missing, prefix .. ": offered by the module, not named in core.h")
    assert.same({}, extra, prefix .. ": named in core.h, not offered by the module")
    for sub, list in text:gmatch(prefix .. "%.([%w_]+)%.{(.-)}") do
      local members, actual = {}, {}
      for name in list:gmatch("[%w_]+") do members[#members + 1] = name end
      for name in pairs(module[sub]) do actual[#actual + 1] = name end
      table.sort(members)
      table.sort(actual)
      assert.same(actual, members, prefix .. "." .. sub)
    end
  end

  it("names every function of mcpclient.core and mcpclient.net, and no other", function()
    assert.is_string(core_part, "no mcpclient.net part in the Registrars section")
    local net = require "mcpclient.net"
    local own = {}  -- core's own names: net's join its table on first use
    for name, value in pairs(core) do
      if name == "version" or net[name] == nil then own[name] = value end
    end
    same_names(own, "core", core_part)
    same_names(net, "net", net_part)
  end)

  it("lists the registrars in the order core.c and net.c call them", function()
    for _, part in ipairs { { core_part, "csrc/core/core.c" }, { net_part, "csrc/net/net.c" } } do
      local declared, called = {}, {}
      for name in part[1]:gmatch("void (mcp_register_[%w_]+)%(") do declared[#declared + 1] = name end
      for name in read(part[2]):gmatch("\n%s+(mcp_register_[%w_]+)%(L%);") do called[#called + 1] = name end
      assert.is_true(#declared > 0)
      assert.same(called, declared, part[2])
    end
  end)
end)

describe("C section banners", function()
  local RULE = "/* " .. string.rep("=", 68) .. " */"

  it("have one form in every file: a title between two rule lines of 74 columns", function()
    local pipe = assert(io.popen("ls csrc/*/*.c csrc/*/*.h"))
    local bad = {}
    for path in pipe:lines() do
      local lines = {}
      for line in (read(path) .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
      local i = 1
      while i <= #lines do
        local line = lines[i]
        if line:find("^/%*%s*===") or line:find("^%*%*%s*===") then
          local title = lines[i + 1] or ""
          local ok = line == RULE and #title == #RULE and title:find("^/%* %S.- %*/$") and lines[i + 2] == RULE
          if not ok then bad[#bad + 1] = path .. ":" .. i end
          i = i + 3
        else
          i = i + 1
        end
      end
    end
    pipe:close()
    assert.same({}, bad)
  end)
end)
