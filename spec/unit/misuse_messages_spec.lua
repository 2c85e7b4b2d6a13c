-- What a newcomer's misuse of the library reads as: each message names the fix. A string where
-- call_tool's arguments go, a command written as one string, an option by another SDK's name (or
-- misspelt) each raise, naming the table, the argv form, or the option meant.
local mcp = require "mcpclient"
local suggest = require "mcpclient.suggest"

local function url_connect(extra)
  local options = { url = "http://127.0.0.1:9/mcp", identifier = "x", health = mcp.health.discard }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

describe("misuse messages", function()
  it("call_tool with a string for arguments says they must be a table (an object)", function()
    local conn = url_connect()
    assert.has_error(function() conn:call_tool("echo", "hi") end,
      "call_tool: arguments must be a table (an object) of named arguments, not a string")
    assert.has_error(function() conn:call_tool("echo", 7) end,
      "call_tool: arguments must be a table (an object) of named arguments, not a number")
    conn:close()
  end)

  it("a command given as one string raises with connect: and the argv form", function()
    assert.has_error(function()
      mcp.connect { command = "npx -y @modelcontextprotocol/server-memory", identifier = "m",
        health = mcp.health.discard }
    end, 'connect: command must be an argv table, e.g. { "npx", "-y", "…" }, never a string')
  end)

  it("an unknown option names the one meant: another SDK's timeout is the budget, a typo its word", function()
    assert.has_error(function() url_connect { timeout = 5 } end,
      'connect: unknown option "timeout" (did you mean "budget"?)')
    assert.has_error(function() url_connect { identifer = "y" } end,
      'connect: unknown option "identifer" (did you mean "identifier"?)')
    assert.has_error(function() url_connect { zzzzzz = 1 } end, 'connect: unknown option "zzzzzz"')
    local conn = url_connect()
    assert.has_error(function() conn:call_tool("echo", {}, { timeout = 5 }) end,
      'unknown option "timeout" (did you mean "budget"?)')
    assert.has_error(function() conn:ping { budgte = 5 } end, 'unknown option "budgte" (did you mean "budget"?)')
    conn:close()
    assert.has_error(function() url_connect { auth = { credentail = "env:X" } } end,
      'auth: unknown option "credentail" (did you mean "credential"?)')
  end)

  it("suggests only what is close", function()
    assert.equal("budget", suggest.closest("budgte", { "budget", "cancel" }))
    assert.is_nil(suggest.closest("colour", { "budget", "cancel" }))
    assert.is_nil(suggest.option("timeout", { url = true }))
  end)
end)

describe("a failure's message", function()
  local errors = require "mcpclient.errors"

  it("for HTTP 404 says to check the URL's path, as the CLI does", function()
    local _, message = errors.fail("http_status", { server = "docs", status = 404 })
    assert.equal('MCP server "docs" answered with HTTP status 404: nothing answers at that path; check the '
      .. "URL's path (an MCP endpoint is often …/mcp).", message)
    _, message = errors.fail("http_status", { server = "docs", status = 500 })
    assert.equal('MCP server "docs" answered with HTTP status 500.', message)
  end)
end)

describe("a JSON-RPC refusal's message", function()
  local errors = require "mcpclient.errors"

  it("names the code once when the server wrote it into its message again", function()
    local _, message, err = errors.fail("rpc_error", { server = "ev", rpc_code = -32602,
      detail = "MCP error -32602: Resource file:///x not found" })
    assert.equal('MCP server "ev" refused the call with JSON-RPC error -32602: Resource file:///x not found', message)
    assert.equal("MCP error -32602: Resource file:///x not found", err.detail)
  end)
end)
