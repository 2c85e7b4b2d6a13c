-- The rockspec builds what the tree holds: every Lua module and every C file.
local function rockspec()
  local env = {}
  assert(loadfile("mcpclient-scm-1.rockspec", "t", env))()
  return env
end

local function lines(command)
  local found, pipe = {}, assert(io.popen(command))
  for line in pipe:lines() do found[#found + 1] = line end
  pipe:close()
  table.sort(found)
  return found
end

describe("the rockspec", function()
  it("lists every Lua module under lua/", function()
    local listed = {}
    for name, source in pairs(rockspec().build.modules) do
      if type(source) == "string" then listed[#listed + 1] = name .. "=" .. source end
    end
    table.sort(listed)
    local present = {}
    for _, f in ipairs(lines("find lua -name '*.lua'")) do
      local m = f:gsub("^lua/", ""):gsub("/init%.lua$", ""):gsub("%.lua$", ""):gsub("/", ".")
      present[#present + 1] = m .. "=" .. f
    end
    table.sort(present)
    assert.same(present, listed)
  end)

  it("compiles every C file under csrc/", function()
    local sources = rockspec().build.modules["mcpclient.core"].sources
    table.sort(sources)
    assert.same(lines("ls csrc/*.c"), sources)
  end)

  it("installs the operator command", function()
    assert.equal("bin/mcpclient", rockspec().build.install.bin.mcpclient)
  end)
end)
