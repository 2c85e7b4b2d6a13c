--- Write the fuzz seed corpora (fuzz/corpus/<harness>/) from captured server
--- answers plus hand-written edge cases.
--
--   cd /work/main && lua5.4 fuzz/capture-seeds.lua && make all \
--     && LUA_CPATH='./build/?.so' lua5.4 fuzz/make-seeds.lua [captured-dir]
--
-- Seeds named real-* come from the captures (see capture-seeds.lua); edge-*
-- are written here. Input formats are those of fuzz/lua/*_check.lua.
package.path = "./spec/?.lua;./lua/?.lua;./lua/?/init.lua;" .. package.path
local core = require "mcpclient.core"
local json = core.json
local read = require("support.shell").read_all

local captured = arg[1] or "build-fuzz/captured"

local made = {}
local function write(harness, name, bytes)
  local dir = "fuzz/corpus/" .. harness
  if not made[dir] then
    os.execute("mkdir -p " .. dir)
    made[dir] = true
  end
  local f = assert(io.open(dir .. "/" .. name, "wb"))
  f:write(bytes)
  f:close()
end

local function list(dir)
  local names = {}
  local p = assert(io.popen("ls " .. dir))
  for line in p:lines() do names[#names + 1] = line end
  p:close()
  return names
end

-- the captures: name -> { head, body }
local answers = {}
for _, file in ipairs(list(captured)) do
  local name = file:match("^(.*)%.body$")
  if name then answers[#answers + 1] = { name = name, head = read(captured .. "/" .. name .. ".head"),
    body = read(captured .. "/" .. file) } end
end
assert(#answers > 0, "no captures in " .. captured .. ": run fuzz/capture-seeds.lua first")

-- JSON payloads: a JSON body, or each data field of an event stream
local function payloads(a, streamed)
  if a.body == "" then return {} end
  if streamed then
    local out = {}
    for data in a.body:gmatch("data: ([^\n]*)") do out[#out + 1] = data end
    return out
  end
  return { a.body }
end

local SEEDS = { "\0\0\0\0", "\1\0\0\0", "\7\0\0\0", "\255\255\255\255" }

----------------------------------------------------------------------------- real answers
for _, a in ipairs(answers) do
  local streamed = a.head:lower():find("content%-type: text/event%-stream") ~= nil
  if streamed and a.body ~= "" then
    write("sse", "real-" .. a.name, SEEDS[#a.name % #SEEDS + 1] .. a.body)
  end
  for i, p in ipairs(payloads(a, streamed)) do
    local suffix = i > 1 and ("-" .. i) or ""
    write("json", "real-" .. a.name .. suffix, p)
    local v = json.decode(p, true)
    if v and v.result then
      if v.result.tools then
        write("schema", "real-" .. a.name .. suffix, p)
        for _, tool in ipairs(v.result.tools) do
          write("schema", "real-" .. a.name .. "-" .. tool.name, json.encode(tool.inputSchema))
        end
      end
      if v.result.content then write("text", "real-" .. a.name .. suffix, p) end
    end
  end
  -- response: status 200 (byte 0), flags, the captured header lines, blank line, body
  local lines = {}
  for line in a.head:gmatch("[^\n]*\n") do lines[#lines + 1] = line end
  table.remove(lines, 1)                 -- the status line: the harness supplies its own
  if lines[#lines] == "\r\n" then lines[#lines] = nil end
  local status = tonumber(a.head:match("^HTTP/%S+ (%d+)"))
  local byte = ({ [200] = 0, [202] = 5 })[status] or 0
  local head = table.concat(lines)
  a.body = a.body:gsub('"jsonrpc":"2.0","id":%d+}', '"jsonrpc":"2.0","id":1}') -- the harness's request is id 1
  write("response", "real-" .. a.name, string.char(byte, 0) .. head .. "\r\n" .. a.body)
  if streamed then
    write("response", "real-" .. a.name .. "-chunk7-session", string.char(byte, 0x47) .. head .. "\r\n" .. a.body)
    write("response", "real-" .. a.name .. "-chunk1-ordered", string.char(byte, 0x81) .. head .. "\r\n" .. a.body)
  end
end

----------------------------------------------------------------------------- sse edge cases
local sse = {
  crlf = "event: message\r\nid: 1\r\ndata: {\"a\":1}\r\n\r\n",
  cr = "data: one\rdata: two\r\r",
  bom = "\239\187\191data: after bom\n\n",
  partial_bom = "\239\187data: not a bom\n\n",
  double_bom = "\239\187\191\239\187\191data: x\n\n",
  priming = "id: 0\ndata:\n\n",
  id_nul = "id: a\0b\ndata: x\n\nid\ndata: y\n\n",
  retry = "retry: 1500\n\nretry: 99999999999999999999999\n\nretry: 12a\n\nretry:\n\n",
  comment = ": ping\n\n:\ndata:x\n: more\n\n",
  no_blank_end = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
  no_colon = "data\ndata\n\nevent\ndata: z\n\n",
  multiline = "data: a\ndata:\ndata:  b\n\n",
  fields = "DATA: no\nData: no\ndata : no\nfoo: bar\nid:  space\ndata:x\n\n",
  cr_then_lf = "data: a\r\n\r\ndata: b\n\r\n",
  empty_type = "event:\ndata: x\n\nevent: custom\ndata: y\n\n",
  long_line = "data: " .. string.rep("x", 3000) .. "\n\n",
  ends_in_cr = "data: x\r",
}
for name, body in pairs(sse) do
  for i, seed in ipairs(SEEDS) do
    if i <= 2 then write("sse", "edge-" .. name .. "-" .. i, seed .. body) end
  end
end

----------------------------------------------------------------------------- json edge cases
local deep = string.rep("[", 512) .. string.rep("]", 512)
local json_edges = {
  duplicate = '{"a":1,"a":2}',
  deep_512 = deep,
  deep_513 = "[" .. deep .. "]",
  deep_objects = string.rep('{"a":', 300) .. "1" .. string.rep("}", 300),
  numbers = "[0,-0,-0.0,1e308,1e-320,4.9e-324,9223372036854775807,-9223372036854775808,0.1,1E+2,123456789012345678]",
  too_big_int = "9223372036854775808",
  overflow_real = "1e400",
  strings = '["\\u0000","\\ud83d\\ude00","\\/","\\b\\f\\n\\r\\t","é","\\u00e9\\u2028"]',
  lone_surrogate = '"\\ud800"',
  invalid_utf8 = '"\255\254"',
  overlong = '"\192\175"',
  bom = "\239\187\191{}",
  empty = "",
  blank = " \t\r\n",
  nul_inside = '{"a":1}\0',
  trailing = '{"a":1} x',
  scalars = "null",
  rpc_error = '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad params","data":{"x":[1]}}}',
  rpc_error_null_id = '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}',
  rpc_error_no_code = '{"jsonrpc":"2.0","id":1,"error":{"message":7}}',
  rpc_other_id = '{"jsonrpc":"2.0","id":2,"result":{}}',
  rpc_string_id = '{"jsonrpc":"2.0","id":"1","result":{}}',
  rpc_float_id = '{"jsonrpc":"2.0","id":1.0,"result":{}}',
  rpc_request = '{"jsonrpc":"2.0","id":1,"method":"ping"}',
  rpc_notification = '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}',
  rpc_result_array = '{"jsonrpc":"2.0","id":1,"result":[]}',
  rpc_both = '{"jsonrpc":"2.0","id":1,"result":{"a":1},"error":{"code":1,"message":"m"}}',
  rpc_batch = '[{"jsonrpc":"2.0","id":1,"result":{}}]',
  empty_key = '{"":{"":[{}]}}',
  order = '{"z":1,"a":{"y":[],"b":{}},"m":null}',
}
for name, text in pairs(json_edges) do write("json", "edge-" .. name, text) end

----------------------------------------------------------------------------- schema edge cases
local function nest(n)
  local s = '{"type":"object"}'
  for _ = 2, n do s = '{"type":"object","properties":{"p":' .. s .. "}}" end
  return s
end
local schema_edges = {
  empty = "{}",
  minimal = '{"type":"object"}',
  empty_props = '{"type":"object","properties":{},"required":[]}',
  required_object = '{"type":"object","required":{}}',
  props_array = '{"type":"object","properties":[]}',
  type_array = '{"type":["object","null"]}',
  ref_top = '{"type":"object","$ref":"#/x"}',
  ref_nested = '{"type":"object","properties":{"a":{"anyOf":[{"$ref":"#"}]}}}',
  defs_in_dropped = '{"type":"object","$schema":"x","examples":[{"$ref":1}],"properties":{}}',
  keyword_as_property = '{"type":"object","properties":{"if":{"type":"string"}}}',
  all_keywords = '{"type":"object","allOf":[{"if":{}}],"anyOf":[],"oneOf":[{}],"not":{"then":1}}',
  depth_12 = nest(6),
  depth_13 = nest(7),
  big_description = '{"type":"object","description":"' .. string.rep("\\u00e9", 3000) .. '"}',
  additional = '{"type":"object","additionalProperties":{"type":"string"}}',
  description_number = '{"type":"object","description":5}',
  null_values = '{"type":"object","properties":{"a":null},"required":null}',
  required_mixed = '{"type":"object","required":["a",1]}',
  tools_result = '{"result":{"tools":[{"name":"t","inputSchema":{"type":"object","properties":{"x":{"type":"string"}},'
    .. '"required":["x"],"additionalProperties":false}}]},"jsonrpc":"2.0","id":2}',
}
for name, text in pairs(schema_edges) do write("schema", "edge-" .. name, text) end

----------------------------------------------------------------------------- text edge cases
local text_edges = {
  invalid_utf8 = "a\128b\255c\192\175d\237\160\128e\244\144\128\128f\240\159\152",
  controls = "\27[31mred\27[0m\r\n\tline\0nul\127del\194\133nel",
  spaces = "   lead and trail   ",
  long_ascii = string.rep("abcdefghij", 400),
  long_utf8 = string.rep("\240\159\152\128", 600),
  content = '[{"type":"text","text":"one"},{"type":"image","data":"AA=="},{"type":"text","text":""},'
    .. '{"type":"audio"},{"type":"resource","resource":{}},{"type":"resource_link"},{"type":"video"},'
    .. '{"type":"text"},{"type":"text","text":"two"},7,null,[],{"type":5}]',
  content_text_only = '[{"type":"text","text":"a\\u0000b"},{"type":"text","text":"\\u001b[2J"}]',
  content_empty = "[]",
  content_object = '{"content":[{"type":"image"}]}',
  label_string = '"\\u001b]0;title\\u0007 server name"',
  cut_in_4byte = string.rep("a", 42) .. string.rep("\240\159\152\128", 30),
}
for name, text in pairs(text_edges) do write("text", "edge-" .. name, text) end

----------------------------------------------------------------------------- response edge cases
local function seg(status_byte, flags, head, body)
  return string.char(status_byte, flags) .. head .. "\r\n" .. body
end
local result = '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}}'
local sse_head = "Content-Type: text/event-stream\r\n"
local json_head = "Content-Type: application/json\r\n"
local response_edges = {
  json = seg(0, 0, json_head, result),
  json_charset = seg(0, 0, "content-type: Application/JSON ; charset=utf-8\r\n", result),
  no_type = seg(0, 0, "", result),
  html = seg(0, 0, "Content-Type: text/html\r\n", "<html>\27[2J</html>"),
  status_404_session = seg(15, 0x40, json_head, '{"error":"no session"}'),
  status_400_session = seg(12, 0x40, "Content-Type: text/plain\r\n", "Bad Request: Session not found"),
  status_500 = seg(20, 0, json_head, result),
  empty_200 = seg(0, 0, json_head, ""),
  accepted_202 = seg(5, 0, "", ""),
  rpc_error = seg(0, 0, json_head, '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"\\u001b[31mno\\n"}}'),
  other_id = seg(0, 0, json_head, '{"jsonrpc":"2.0","id":7,"result":{}}'),
  sse = seg(0, 3, sse_head, "event: message\ndata: " .. result .. "\n\n"),
  sse_notification_first = seg(0, 1, sse_head, 'data: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
    .. "data: " .. result .. "\n\n"),
  sse_no_blank = seg(0, 0, sse_head, "data: " .. result),
  sse_two_types = seg(0, 0, sse_head .. json_head, "data: " .. result .. "\n\n"),
  sse_type_vt = seg(0, 0, "Content-Type: text/event-stream\v\r\n", "data: " .. result .. "\n\n"),
  sse_resume = seg(0, 2, sse_head, "id: ev-1\nretry: 0\ndata:\n\n") .. "\30\30"
    .. seg(0, 5, sse_head, "id: ev-2\ndata: " .. result .. "\n\n"),
  sse_resume_twice = seg(0, 0, sse_head, "id: a\nretry: 1\ndata:\n\n") .. "\30\30"
    .. seg(0, 0, sse_head, "id: b\ndata:\n\n") .. "\30\30" .. seg(0, 0, sse_head, "data: " .. result .. "\n\n"),
  sse_resume_long_retry = seg(0, 0, sse_head, "id: a\nretry: 60000\n\n"),
  sse_resume_json = seg(0, 0, sse_head, "id: a\n\n") .. "\30\30" .. seg(0, 0, json_head, result),
  truncated = seg(0, 0x10, sse_head, "data: {\"jsonrpc\":"),
  leg_fails = seg(0, 0x20, "", "connection reset"),
  leg_times_out = seg(0, 0x30, "", "timeout"),
  odd_status = seg(0xF3, 0, json_head, result),
  many_headers = seg(0, 0, string.rep("X-A: b\r\n", 50) .. "Content-Type:text/event-stream;x=y\r\n",
    "data: " .. result .. "\n\n"),
}
for name, bytes in pairs(response_edges) do write("response", "edge-" .. name, bytes) end

----------------------------------------------------------------------------- listing
-- The listing harness reads a body both as it is and placed as a listed
-- tool's schema, so the schema and decode seeds are its seeds too.
for _, harness in ipairs { "schema", "decode" } do
  for _, name in ipairs(list("fuzz/corpus/" .. harness)) do
    local f = assert(io.open("fuzz/corpus/" .. harness .. "/" .. name, "rb"))
    write("listing", harness .. "-" .. name, f:read("a"))
    f:close()
  end
end
write("listing", "edge-escapes", '{"type":"object","description":"\\u00e9\\n\\/\\u200b\\ud83d\\ude00 \194\133",'
  .. '"properties":{"a":{"enum":[-0,1e2,-0.0,1.5E-3,true,null,{},[]]}},"additionalProperties":{}}')
print("seeds written")
