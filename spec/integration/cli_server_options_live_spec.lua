-- What `mcpclient add --header/--proxy/--root` stores reaches real servers: the operator's
-- commands (in this process, on the suite's backend) against servers each started here and
-- stopped by its PID, on 127.0.0.1: a server that prints the headers each request carried
-- (spec/support/headers_server.mjs), the same behind tinyproxy (whose own log shows the
-- requests), and server-filesystem over stdio, which works only in the roots its client gives.
local backends = require "support.backends"
local catalogue = require "mcpclient.agent.catalogue"
local cli = require "support.cli"
local peers = require "support.peers"
local proxies = require "support.proxies"
local stdio = require "support.stdio"
local wait_for = require("support.wait").for_value

local MODULES = peers.node_modules .. "/@modelcontextprotocol/"

-- Start the headers server; fn(url) runs; the server is stopped by its PID; its request lines.
local function with_headers_server(fn)
  local pipe = assert(io.popen("exec sh -c 'echo $$; exec node \"$0\"' spec/support/headers_server.mjs"))
  local pid = assert(tonumber(pipe:read("l")), "no pid from the server's shell")
  local port = assert(tonumber(pipe:read("l")), "the server printed no port")
  local ok, err = pcall(fn, "http://127.0.0.1:" .. port .. "/mcp", port)
  os.execute("kill " .. pid)
  local lines = {}
  for l in pipe:lines() do lines[#lines + 1] = l end
  pipe:close()
  assert(ok, err)
  return lines
end

local function tmpdir()
  local p = assert(io.popen("mktemp -d"))
  local dir = p:read("l")
  p:close()
  return dir
end

describe("a server's stored headers, proxy and roots on the wire #integration", function()
  local store

  setup(function() peers.require_available() end)
  before_each(function() store = backends.open_store() end)
  after_each(function() store:close() end)

  local function run(...)
    return cli.main({ ... }, { store = store })
  end

  it("--header goes with every request `test` makes; --proxy none still reaches the server", function()
    local lines = with_headers_server(function(url)
      assert.equal(0, (run("add", "--identifier", "hdr", "--name", "Headers", "--url", url, "--header",
        "X-Tenant=acme", "--header", "X-Trace=op 1", "--proxy", "none")))
      local code, out, err = run("test", "hdr")
      assert.equal(0, code, err)
      assert.matches("Reachable", out)
    end)
    local posts = 0
    for _, l in ipairs(lines) do
      if l:find("^POST ") and not l:find("^POST server/discover") then
        posts = posts + 1
        assert.truthy(l:find("x%-tenant=acme x%-trace=op 1 auth=no"), l)
      end
    end
    assert.is_true(posts >= 1, table.concat(lines, "\n"))
  end)

  it("--proxy sends the server's requests through that proxy (its log shows them), headers included", function()
    local dir = tmpdir()
    local tinyproxy = proxies.tinyproxy(dir)
    finally(function()
      proxies.stop(tinyproxy)
      os.execute("rm -rf '" .. dir .. "'")
    end)
    local port
    local lines = with_headers_server(function(url, p)
      port = p
      assert.equal(0, (run("add", "--identifier", "via", "--name", "Via", "--url", url, "--proxy", tinyproxy.url,
        "--header", "X-Tenant=proxied")))
      local code, _, err = run("test", "via")
      assert.equal(0, code, err)
    end)
    assert.is_true(#proxies.lines(tinyproxy, "POST http://127.0.0.1:" .. port .. "/mcp") >= 1,
      "the proxy's log shows no request: " .. table.concat(proxies.lines(tinyproxy, ""), "\n"))
    local seen = false
    for _, l in ipairs(lines) do
      if l:find("^POST initialize") then
        seen = true
        assert.truthy(l:find("x%-tenant=proxied"), l)
      end
    end
    assert.is_true(seen, table.concat(lines, "\n"))
  end)

  it("--root gives a stdio server its roots: server-filesystem works there and only there", function()
    local a, b = tmpdir(), tmpdir()
    finally(function() os.execute("rm -rf '" .. a .. "' '" .. b .. "'") end)
    assert.equal(0, (run("add", "--identifier", "fs", "--name", "Files", "--root", "file://" .. a .. "=a", "--",
      "node", MODULES .. "server-filesystem/dist/index.js")))
    do
      local conn <close> = assert(catalogue.connect(assert(store:servers())[1], { budget = 30 }))
      wait_for("the stored roots to reach server-filesystem", 10, function()
        local out = assert(conn:call_tool("list_allowed_directories", {}))
        return out.text:find(a, 1, true) and not out.text:find(b, 1, true)
      end)
    end
    collectgarbage()
    collectgarbage()
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)
end)
