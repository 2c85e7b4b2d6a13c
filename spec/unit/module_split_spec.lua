-- The three C modules: a program that only requires mcpclient and uses JSON
-- (or speaks stdio) maps neither libcurl, nor libcrypto, nor libidn2; the
-- first HTTP use loads mcpclient.net through the core's table, unchanged for
-- its callers.
local core = require "mcpclient.core"

-- Run a Lua chunk in a fresh lua5.4 (the built modules, the tree's Lua); what it printed.
local function child(chunk)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(chunk)
  f:close()
  local pipe = assert(io.popen("LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' LUA_CPATH='./build/?.so;;' lua5.4 "
    .. path .. " 2>&1"))
  local out = pipe:read("a")
  pipe:close()
  os.remove(path)
  return out
end

local MAPPED = [[
local function mapped()
  local seen = {}
  for line in io.lines("/proc/self/maps") do
    for _, lib in ipairs { "libcurl", "libcrypto", "libidn2", "libssl", "mcpclient/net.so" } do
      if line:find(lib, 1, true) then seen[lib] = true end
    end
  end
  local names = {}
  for lib in pairs(seen) do names[#names + 1] = lib end
  table.sort(names)
  return table.concat(names, ",")
end
]]

describe("the module split", function()
  it("require 'mcpclient' and JSON map no network library; the first HTTP use does", function()
    local out = child(MAPPED .. [[
local mcp = require "mcpclient"
assert(mcp.json.decode(mcp.json.encode { a = { 1, 2 } }).a[2] == 2)
local core = require "mcpclient.core"
assert(core.engine_step(0) == 0)
local r, w = core.pipe()
core.fd_close(r); core.fd_close(w)
print("before:" .. mapped())
local leg = core.http_leg()
leg:close()
print("after:" .. mapped())
]])
    assert.truthy(out:find("before:\n", 1, true), out)
    assert.truthy(out:find("after:libcrypto,libcurl,libidn2,libssl,mcpclient/net.so", 1, true), out)
  end)

  it("gives every name of mcpclient.net through the core's table, the same functions", function()
    local net = require "mcpclient.net"
    local names = 0
    for name, value in pairs(net) do
      if name ~= "version" then
        names = names + 1
        assert.equal(value, core[name], name)
      end
    end
    assert.is_true(names >= 8)
    assert.equal(core.version, net.version)
    assert.is_nil(core.no_such_name)
    assert.is_nil(core[1])
  end)
end)
