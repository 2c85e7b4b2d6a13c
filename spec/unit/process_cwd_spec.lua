-- A relative program with a cwd: it is looked up where exec will look it up, from the cwd the
-- child enters (a path with a slash) or through the child's PATH (a relative PATH entry from the
-- cwd too), in core.spawn and so in the operator command's check of a command after --.
local core = require "mcpclient.core"
local cli = require "support.cli"
local shell = require "support.shell"
local stdio = require "support.stdio"

-- A fresh directory holding `files` (name = body), each executable.
local function scratch(files)
  local dir = shell.tmpdir()
  assert(os.execute("mkdir " .. shell.quote(dir .. "/bin")))
  for name, body in pairs(files) do
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(body)
    f:close()
    assert(os.execute("chmod +x " .. shell.quote(dir .. "/" .. name)))
  end
  return dir
end

local function remove(dir)
  assert(os.execute("rm -rf " .. shell.quote(dir)))
end

describe("a relative program with cwd", function()
  local dir
  before_each(function()
    dir = scratch {
      ["server.sh"] = "#!/bin/sh\necho here\n",
      ["bin/tool.sh"] = "#!/bin/sh\necho on the relative PATH\n",
      ["plain.txt"] = "not executable\n",
      ["server-real.sh"] = string.format("#!/bin/sh\nexec lua5.4 %s legacy\n",
        shell.quote(stdio.command("legacy")[2])),
    }
    os.execute("chmod -x " .. shell.quote(dir .. "/plain.txt"))
  end)
  after_each(function()
    remove(dir)
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)

  it("is found in the cwd when it has a slash", function()
    local proc <close> = assert(core.spawn { argv = { "./server.sh" }, cwd = dir })
    assert.equal("here", proc:read_line(5000))
  end)

  it("is found through a relative PATH entry, from the cwd", function()
    local proc <close> = assert(core.spawn { argv = { "tool.sh" }, cwd = dir, env = { PATH = "bin:/usr/bin:/bin" } })
    assert.equal("on the relative PATH", proc:read_line(5000))
  end)

  it("is still refused when the cwd holds no such program, or one that cannot run", function()
    for _, program in ipairs { "./missing.sh", "./plain.txt", "server.sh" } do
      local none, kind, detail = core.spawn { argv = { program }, cwd = dir }
      assert.is_nil(none)
      assert.equal("transport", kind)
      assert.matches("was not found on PATH or is not executable", detail, 1, true)
    end
    -- without a cwd, the host's directory is where it is looked for (the spec runs elsewhere)
    assert.is_nil((core.spawn { argv = { "./server.sh" } }))
  end)

  it("is checked by the operator command with --cwd", function()
    local args = { "check", "--cwd", dir }
    -- the module path, and under the sanitizer run the runtimes the ASan build needs
    for _, name in ipairs { "LUA_CPATH", "ASAN_OPTIONS", "LD_PRELOAD", "UBSAN_OPTIONS" } do
      local value = stdio.env()[name]
      if value then args[#args + 1], args[#args + 2] = "--env", name .. "=" .. value end
    end
    args[#args + 1], args[#args + 2] = "--", "./server-real.sh"
    local code, out, err = cli.run(cli.command(nil, nil, table.unpack(args)))
    assert.equal(0, code, out .. err)
    assert.matches("^passed%s+handshake", out)
  end)
end)
