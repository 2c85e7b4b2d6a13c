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

  it("compiles every C file under csrc/ into exactly one of the two C modules", function()
    local modules, sources = rockspec().build.modules, {}
    for _, name in ipairs { "mcpclient.core", "mcpclient.db" } do
      for _, source in ipairs(modules[name].sources) do sources[#sources + 1] = source end
    end
    table.sort(sources)
    assert.same(lines("ls csrc/*.c"), sources)
  end)

  it("links the database libraries into mcpclient.db only", function()
    local modules = rockspec().build.modules
    table.sort(modules["mcpclient.db"].libraries)
    assert.same({ "pq", "sqlite3" }, modules["mcpclient.db"].libraries)
    for _, library in ipairs(modules["mcpclient.core"].libraries) do
      assert.is_nil(({ pq = true, sqlite3 = true })[library], library)
    end
  end)

  it("installs the operator command", function()
    assert.equal("bin/mcpclient", rockspec().build.install.bin.mcpclient)
  end)
end)
