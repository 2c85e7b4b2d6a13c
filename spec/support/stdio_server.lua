--- A scripted MCP server over stdio, honest or hostile, for the stdio specs.
--
--   lua5.4 spec/support/stdio_server.lua MODE [ARG]
--
-- It needs mcpclient.core on LUA_CPATH (the specs pass it in `env`: the
-- child inherits no LUA_* variable). Modes:
--   legacy        a 2025-era server: server/discover is "method not found"
--   modern        a 2026-07-28 server: server/discover answers, no initialize
--   exit_on_probe a 2025-era server that exits when it sees server/discover
--   silent_probe  a 2025-era server that never answers server/discover
--   garbage       answers tools/call with a line that is not JSON
--   huge          answers tools/call with a 3 MiB line
--   deaf          answers the opening, then never reads stdin again
--   flood         writes ARG MiB to stderr before each answer
--   partial       writes each answer in pieces, with pauses between them
--   refuse_listen a 2026-07-28 server announcing tools.listChanged and resources.subscribe that
--                 refuses subscriptions/listen (method not found)
--   mute_listen   the same, that takes subscriptions/listen and never acknowledges it
--   counting      keeps the id of every request and counts the lines it could not read; its tools
--                 also digest {tag, data} (answers "<tag> <bytes> ok" when data is pattern(tag) that
--                 long, else "... bad") and received (what it kept, as JSON: { ids, tags (of the
--                 digests, in order), unreadable })
--   duplicate     writes every tools/call answer twice
--   garbage_open  answers initialize with a line that is not JSON
--   changing      announces resources.listChanged and lists one resource per change so far;
--                 tool change {delay}: answers, then (after delay seconds) writes
--                 notifications/resources/list_changed
--   escape        its grandchild tool starts a sleeper that leaves the group and the session
--                 (a double fork and setsid), ignores SIGTERM and holds the server's stdout
-- Every mode has the tools: echo {message}, die {status} (exits before
-- answering), slow {seconds} (answers after that, or says it was cancelled),
-- progress (two progress notices first), elicit (asks the client, 2025 era),
-- env {name} (the value of a variable, or "unset"), cwd, grandchild (starts a
-- process in its group that ignores SIGTERM; answers its pid), pid, notices
-- (the notifications received so far, as "method:requestId"), asked (the methods of the
-- requests received so far, this one excepted), ask {method, params} (sends that request to the
-- client, 2025 era, and answers "answered <the client's answer as JSON, without jsonrpc>"),
-- opening (the capabilities the initialize request declared, as JSON).
local core = require "mcpclient.core"
local json = core.json

local mode, arg = arg[1] or "legacy", arg[2]
local modern = mode == "modern" or mode == "refuse_listen" or mode == "mute_listen"
local out = io.stdout
out:setvbuf("no")

-- What the counting mode keeps: every request id, in the order received, and the lines it
-- could not read (any mode counts them).
local received, tags, unreadable = {}, {}, 0

-- The data of digest for `tag`, `size` bytes long: "tag;" repeated and cut (the soak makes the same).
local function pattern(tag, size)
  local unit = tag .. ";"
  return unit:rep(size // #unit + 1):sub(1, size)
end

-- How many resources the changing mode lists: one more after each change.
local changes = 0

local function send(message)
  local text = json.encode(message)
  if mode == "flood" then
    local chunk = string.rep("x", 1023) .. "\n"
    for _ = 1, (tonumber(arg) or 1) * 1024 do io.stderr:write(chunk) end
  end
  if mode == "partial" then
    local third = #text // 3
    out:write(text:sub(1, third)); core.sleep(0.02)
    out:write(text:sub(third + 1, 2 * third)); core.sleep(0.02)
    out:write(text:sub(2 * third + 1) .. "\n")
    return
  end
  out:write(text .. "\n")
end

local function result(id, value)
  if modern then value.resultType = "complete" end
  send { jsonrpc = "2.0", id = id, result = value }
end

local function text(id, words)
  result(id, { content = { { type = "text", text = words } } })
end

local TOOLS = {}
for _, name in ipairs { "echo", "die", "slow", "progress", "elicit", "env", "cwd", "grandchild", "pid", "notices",
  "asked", "ask", "opening" } do
  TOOLS[#TOOLS + 1] = { name = name, description = "the " .. name .. " tool",
    inputSchema = { type = "object", properties = {} } }
end
if mode == "counting" then
  for _, name in ipairs { "digest", "received" } do
    TOOLS[#TOOLS + 1] = { name = name, description = "the " .. name .. " tool",
      inputSchema = { type = "object", properties = {} } }
  end
end

-- The notifications the client sent, as "method:requestId", for the tool "notices".
local notices = {}
-- The methods of the requests received, for the tool "asked".
local asked = {}
-- The capabilities the initialize request declared, for the tool "opening".
local declared = nil

-- Read one line within `seconds` without blocking the answer: a cancel
-- notice that arrives meanwhile is remembered.
local function read_message()
  local line = io.read("l")
  if not line then return nil end
  local ok, message = pcall(json.decode, line)
  if not ok or type(message) ~= "table" then
    unreadable = unreadable + 1
    io.stderr:write("not JSON: ", line:sub(1, 200), "\n")
    return {}
  end
  return message
end

local function call(id, params)
  local name, args = params.name, params.arguments or {}
  if mode == "garbage" then out:write("this is not json {\n") return end
  if mode == "huge" then out:write('{"jsonrpc":"2.0","id":' .. id .. ',"result":{"content":[{"type":"text","text":"'
    .. string.rep("a", 3 * 1024 * 1024) .. '"}]}}\n') return end
  if mode == "duplicate" then
    local answer = { jsonrpc = "2.0", id = id, result = { content = { { type = "text", text = "twice" } } } }
    send(answer)
    return send(answer)
  end
  if mode == "counting" and name == "digest" then
    local data = type(args.data) == "string" and args.data or ""
    tags[#tags + 1] = tostring(args.tag)
    return text(id, string.format("%s %d %s", tostring(args.tag), #data,
      data == pattern(tostring(args.tag), #data) and "ok" or "bad"))
  end
  if mode == "counting" and name == "received" then
    return text(id, json.encode { ids = json.array(received), tags = json.array(tags), unreadable = unreadable })
  end
  if mode == "changing" and name == "change" then
    changes = changes + 1
    text(id, "changed")
    if (args.delay or 0) > 0 then core.sleep(args.delay) end
    return send { jsonrpc = "2.0", method = "notifications/resources/list_changed" }
  end
  if name == "echo" then return text(id, "Echo: " .. tostring(args.message)) end
  if name == "die" then io.stderr:write("dying as asked\n") os.exit(args.status or 3) end
  if name == "slow" then
    core.sleep(args.seconds or 1)
    return text(id, "slept")
  end
  if name == "notices" then
    return text(id, table.concat(notices, " "))
  end
  if name == "asked" then
    return text(id, table.concat(asked, " ", 1, #asked - 1))
  end
  if name == "progress" then
    local token = params._meta and params._meta.progressToken
    local method = "notifications/progress"
    send { jsonrpc = "2.0", method = method, params = { progressToken = token, progress = 1, total = 2,
      message = "half\27[31m" } }
    send { jsonrpc = "2.0", method = method, params = { progressToken = token, progress = 2, total = 2 } }
    return text(id, "done")
  end
  if name == "elicit" then
    send { jsonrpc = "2.0", id = "e1", method = "elicitation/create",
      params = { message = "Your name?", requestedSchema = { type = "object", properties = {} } } }
    local answer = read_message()
    return text(id, "elicited " .. json.encode(answer and answer.result or json.null))
  end
  if name == "ask" then
    send { jsonrpc = "2.0", id = "s1", method = args.method, params = args.params }
    local answer = read_message() or {}
    answer.jsonrpc = nil
    return text(id, "answered " .. json.encode(answer))
  end
  if name == "opening" then return text(id, json.encode(declared or json.null)) end
  if name == "env" then return text(id, os.getenv(args.name) or "unset") end
  if name == "cwd" then
    local p = io.popen("pwd")
    local dir = p:read("l")
    p:close()
    return text(id, dir)
  end
  if name == "pid" then
    local f = io.open("/proc/self/stat")
    local pid = f:read("l"):match("^(%d+)")
    f:close()
    return text(id, pid)
  end
  if name == "grandchild" and mode == "escape" then
    -- os.execute's shell starts the sleeper in the background and ends: the sleeper is orphaned,
    -- in a session of its own, its stdout and stderr still the server's
    local file = os.tmpname()
    os.execute("setsid sh -c 'trap \"\" TERM; echo $$ > \"$1\"; exec sleep 1000' sleeper " .. file .. " &")
    local pid
    for _ = 1, 500 do
      local f = io.open(file)
      pid = f and f:read("l")
      if f then f:close() end
      if pid then break end
      core.sleep(0.01)
    end
    os.remove(file)
    return text(id, pid or "none")
  end
  if name == "grandchild" then
    local p = io.popen("sh -c 'trap \"\" TERM; exec sleep 1000' >/dev/null 2>&1 </dev/null & echo $!")
    local pid = p:read("l")
    p:close()
    return text(id, pid)
  end
  return send { jsonrpc = "2.0", id = id, error = { code = -32602, message = "unknown tool" } }
end

local deaf = false
while true do
  if deaf then core.sleep(1000) end
  local message = read_message()
  if not message then os.exit(0) end
  local id, method = message.id, message.method
  if id ~= nil and method then asked[#asked + 1] = method end
  if mode == "counting" and id ~= nil and method then received[#received + 1] = id end
  if method == "server/discover" then
    if mode == "exit_on_probe" then os.exit(1) end
    if modern then
      local announced = mode == "modern" and { tools = {} }
        or { tools = { listChanged = true }, resources = { subscribe = true } }
      result(id, { supportedVersions = { "2026-07-28" }, capabilities = announced, ttlMs = 0,
        cacheScope = "private", _meta = { ["io.modelcontextprotocol/serverInfo"] = { name = "stdio-fake",
        version = "1" } } })
    elseif mode ~= "silent_probe" then
      send { jsonrpc = "2.0", id = id, error = { code = -32601, message = "Method not found" } }
    end
  elseif method == "initialize" and mode == "garbage_open" then
    out:write("starting up... this is not json\n")
  elseif method == "initialize" then
    declared = type(message.params) == "table" and message.params.capabilities or nil
    local capabilities = { tools = {} }
    if mode == "changing" then capabilities.resources = { listChanged = true } end
    result(id, { protocolVersion = "2025-11-25", capabilities = capabilities,
      serverInfo = { name = "stdio-fake", version = "1" } })
    if mode == "deaf" then deaf = true end
  elseif method == "tools/list" then
    result(id, { tools = TOOLS })
  elseif method == "tools/call" then
    call(id, message.params)
  elseif method == "ping" then
    result(id, {})
  elseif method == "resources/list" and mode == "changing" then
    local listed = {}
    for i = 0, changes do listed[#listed + 1] = { uri = "file:///r" .. i, name = "r" .. i } end
    result(id, { resources = listed })
  elseif method == "subscriptions/listen" and mode == "mute_listen" then  -- luacheck: ignore 542
    -- taken, never acknowledged

  elseif id == nil and method then
    local params = message.params or {}
    notices[#notices + 1] = method .. (params.requestId and (":" .. tostring(params.requestId)) or "")
  elseif id ~= nil and method then
    send { jsonrpc = "2.0", id = id, error = { code = -32601, message = "Method not found" } }
  end
end
