--- Capture real server answers for the fuzz seed corpora (fuzz/corpus/*/real-*).
--
--   cd /work/main && lua5.4 fuzz/capture-seeds.lua [outdir]   (default: build-fuzz/captured)
--
-- Starts the SDK peer (stateless JSON and session + event stream) and
-- server-everything through spec/support/peers.lua, speaks MCP to each with
-- curl on 127.0.0.1, and saves every answer as two files: <name>.head (status
-- line and headers exactly as received) and <name>.body. fuzz/make-seeds.lua
-- turns those into the per-harness seeds. Re-run it when the peers change.
package.path = "./spec/?.lua;./lua/?.lua;./lua/?/init.lua;" .. package.path
local peers = require "support.peers"

local shell = require "support.shell"
local quote, read = shell.quote, shell.read_all

local out = arg[1] or "build-fuzz/captured"
os.execute("mkdir -p " .. quote(out))

-- POST one JSON-RPC message; returns the head and body text and saves both.
local function post(url, name, body, session, version)
  local head, bodyfile = out .. "/" .. name .. ".head", out .. "/" .. name .. ".body"
  local cmd = "curl -sS --max-time 20 -D " .. quote(head) .. " -o " .. quote(bodyfile)
    .. " -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'"
    .. (session and (" -H " .. quote("Mcp-Session-Id: " .. session)) or "")
    .. (version and (" -H " .. quote("MCP-Protocol-Version: " .. version)) or "")
    .. " --data-binary " .. quote(body) .. " " .. quote(url)
  assert(os.execute(cmd), "curl failed: " .. cmd)
  return read(head), read(bodyfile)
end

local INIT = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
  .. '"capabilities":{},"clientInfo":{"name":"mcpclient-fuzz-seeds","version":"0"}}}'
local INITIALIZED = '{"jsonrpc":"2.0","method":"notifications/initialized"}'

local function call(id, tool, args)
  return '{"jsonrpc":"2.0","id":' .. id .. ',"method":"tools/call","params":{"name":"' .. tool
    .. '","arguments":' .. args .. '}}'
end

local function session(url, prefix, calls)
  local head = post(url, prefix .. "-initialize", INIT)
  local sid = head:match("[Mm]cp%-[Ss]ession%-[Ii]d:%s*([^\r\n]+)")
  post(url, prefix .. "-initialized", INITIALIZED, sid, "2025-06-18")
  post(url, prefix .. "-tools-list", '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}', sid, "2025-06-18")
  for i, c in ipairs(calls) do
    post(url, prefix .. "-call-" .. c[1], call(i + 2, c[1], c[2]), sid, "2025-06-18")
  end
  post(url, prefix .. "-unknown-method", '{"jsonrpc":"2.0","id":99,"method":"no/such","params":{}}', sid, "2025-06-18")
  post(url, prefix .. "-unknown-tool", call(100, "no_such_tool", "{}"), sid, "2025-06-18")
end

local sdk_calls = {
  { "echo", '{"message":"h\\u00e9llo \\ud83d\\ude00 / \\"q\\""}' }, { "add", '{"a":1.5,"b":2}' },
  { "fail", "{}" }, { "image", "{}" }, { "big", '{"bytes":3000}' }, { "count_args", '{"x":[1,{},[]],"y":null}' },
}

for _, kind in ipairs { "sdk-stateless", "sdk-session" } do
  local p = peers.start(kind)
  local ok, err = pcall(session, p.url, kind, sdk_calls)
  p:stop()
  assert(ok, err)
end

local p = peers.start("everything")
local ok, err = pcall(session, p.url, "everything", {
  { "echo", '{"message":"seed"}' }, { "get-sum", '{"a":2,"b":3}' }, { "get-tiny-image", "{}" },
  { "get-annotated-message", '{"messageType":"error","includeImage":true}' },
  { "get-resource-links", '{"count":3}' }, { "get-resource-reference", '{"resourceType":"Text","resourceId":1}' },
  { "get-structured-content", '{"location":"New York"}' }, { "get-env", "{}" },
})
p:stop()
assert(ok, err)
print("captured into " .. out)
