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

  -- body.c and utf8.c are compiled into both core and net: neither module can call the other.
  local SHARED = { ["csrc/shared/body.c"] = true, ["csrc/shared/utf8.c"] = true }

  it("compiles every C file under csrc/ into exactly one of the three C modules (or core and net)", function()
    local modules, sources, seen = rockspec().build.modules, {}, {}
    for _, name in ipairs { "mcpclient.core", "mcpclient.net", "mcpclient.db" } do
      for _, source in ipairs(modules[name].sources) do
        local twice = seen[source]
        seen[source] = (seen[source] or 0) + 1
        if twice then
          assert.is_true(SHARED[source] and name == "mcpclient.net", source .. " is in two modules")
        else
          sources[#sources + 1] = source
        end
      end
    end
    for source in pairs(SHARED) do assert.equal(2, seen[source], source) end
    table.sort(sources)
    assert.same(lines("ls csrc/*/*.c"), sources)
  end)

  it("takes each module's sources from its own folder of csrc/ (and shared/, which core and net both compile)",
    function()
      local modules = rockspec().build.modules
      for name, folder in pairs { ["mcpclient.core"] = "core", ["mcpclient.net"] = "net", ["mcpclient.db"] = "db" } do
        for _, source in ipairs(modules[name].sources) do
          local where = source:match("^csrc/([%w_]+)/[%w_]+%.c$")
          assert.is_true(where == folder or (where == "shared" and name ~= "mcpclient.db"), name .. ": " .. source)
        end
      end
    end)

  it("links each module's libraries into it only: core needs jansson alone", function()
    local modules = rockspec().build.modules
    local function sorted(list)
      table.sort(list)
      return list
    end
    assert.same({ "pq", "sqlite3" }, sorted(modules["mcpclient.db"].libraries))
    assert.same({ "crypto", "curl", "idn2" }, sorted(modules["mcpclient.net"].libraries))
    assert.same({ "jansson" }, modules["mcpclient.core"].libraries)
  end)

  it("installs the operator command", function()
    assert.equal("bin/mcpclient", rockspec().build.install.bin.mcpclient)
  end)
end)
