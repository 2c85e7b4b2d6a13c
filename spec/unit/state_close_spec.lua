-- What the C modules hold for a Lua state is freed when the state closes. The engine (core) and
-- the HTTP driver's multi handle (net, loaded on first use) live in the registry until then, and
-- their finalizers free them; a finalizer that raises frees nothing, and Lua only says so as a
-- warning (`lua5.4 -W`), so each case runs in a child interpreter with warnings on and must
-- print none. A registry slot named like its object's metatable replaced that metatable, and the
-- finalizer's own type check then refused the object: the multi handle and its connection cache
-- (35 KB) were lost at every exit of an HTTP client, the engine's table of owned descriptors at
-- every exit of a stdio client (valgrind's "definitely lost" in `make soak`).
local quote = require("support.shell").quote

-- Runs body in `lua5.4 -W` with the C modules this suite loads, closing the state at the end;
-- returns what it printed (stdout and stderr) and whether it exited 0.
local function at_close(body)
  local script = string.format("package.cpath = %q\n", package.cpath)
    .. 'local core = require "mcpclient.core"\n' .. body .. "\nos.exit(0, true)\n"
  local pipe = assert(io.popen("lua5.4 -W -e " .. quote(script) .. " 2>&1"))
  local out = pipe:read("a")
  return out, pipe:close()
end

describe("closing the Lua state", function()
  it("runs the finalizers of the engine and the HTTP driver without a raise", function()
    local out, ok = at_close("local leg = core.http_leg(core.http_pool())")
    assert.is_true(ok, out)
    -- was: Lua warning: error in __gc (bad argument #1 to '__gc' (mcpclient.http_multi expected, ...))
    assert.equal("", out)
  end)

  it("runs the engine's finalizer when it owned a child's pipes", function()
    -- the child is left running: the state's close ends it, and the engine's table goes with it
    local out, ok = at_close('local proc = assert(core.spawn { argv = { "cat" } })')
    assert.is_true(ok, out)
    -- was: Lua warning: error in __gc (bad argument #1 to '__gc' (mcpclient.engine expected, ...))
    assert.equal("", out)
  end)

  it("keeps every registry-held object's metatable where its finalizer looks for it", function()
    local out, ok = at_close([[
      local leg = core.http_leg(core.http_pool())
      local proc = assert(core.spawn { argv = { "cat" } })
      local registry = debug.getregistry()
      for key, value in pairs(registry) do
        local mt = type(value) == "userdata" and getmetatable(value)
        if type(key) == "string" and type(mt) == "table" and mt.__gc and mt.__name then
          if registry[mt.__name] ~= mt then print(key .. " hides the metatable " .. mt.__name) end
        end
      end
      proc:close()]])
    assert.is_true(ok, out)
    assert.equal("", out)
  end)
end)
