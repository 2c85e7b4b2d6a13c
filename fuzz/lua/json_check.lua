--- Checker of fuzz/json_fuzz.c: the JSON codec and rpc_classify (csrc/core/json.c).
--
-- For a body that decodes: the value re-encodes (it came from JSON, so JSON
-- has a form for it), and encode -> decode -> encode is byte-stable, sorted
-- and key-ordered, plain and in the ASCII measure; try_encode agrees with
-- encode. rpc_classify(body, 1) returns exactly one of its four shapes,
-- calls malformed exactly what decode refuses (or what is blank), and when it
-- returns a result that result encodes to the bytes of the decoded body's own
-- "result" member. rpc_request(id, method, params) writes exactly what
-- joining the encoded pieces gives, with the decoded value as params and the
-- body itself as the method name (or refuses where try_encode refuses).
local core = require "mcpclient.core"

local json = core.json
local ascii_encode = _G.fuzz_ascii_encode

local check = require "check"

-- encode(v) must succeed; returns the text.
local function encode(v, what)
  local ok, text = pcall(json.encode, v)
  check(ok, "%s: a decoded value does not encode: %s", what, tostring(text))
  local again, why = json.try_encode(v)
  check(again == text, "%s: try_encode differs from encode (%s)", what, tostring(why))
  return text
end

-- decode -> encode -> decode -> encode with one encoder.
local function stable(text, ordered, enc, what)
  local v, err = json.decode(text, ordered)
  check(v ~= nil or type(err) == "string", "%s: decode returned nil without a message", what)
  if v == nil then return nil end
  local e1, why = enc(v, what)
  check(e1 ~= nil, "%s: does not encode: %s", what, tostring(why))
  local v2, err2 = json.decode(e1, ordered)
  check(v2 ~= nil, "%s: own output %q does not decode: %s", what, e1, tostring(err2))
  local e2 = enc(v2, what)
  check(e1 == e2, "%s: unstable round trip:\n%q\n%q", what, e1, e2)
  return v, e1
end

local KINDS = { result = true, error = true, other = true, malformed = true }

local function classify(body, ordered, decoded)
  local kind, a, b = core.rpc_classify(body, 1, ordered)
  check(KINDS[kind], "rpc_classify returned kind %s", tostring(kind))
  if kind == "result" then
    check(type(a) == "table" and b == nil, "result: not one table")
  elseif kind == "error" then
    check(math.type(a) == "integer" and type(b) == "string", "error: not integer code and string message")
  else
    check(type(a) == "string" and b == nil, "%s: not one reason string", kind)
  end
  local blank = not body:find("[^ \t\n\r%z\v]")
  if decoded == nil or blank then
    check(kind == "malformed", "undecodable or blank body classified %s", kind)
    return
  end
  -- the classifier decides on jansson's tree; the same decisions on the decoded value
  local function object(v) return type(v) == "table" and not json.is_array(v) end
  local want, wa, wb
  local ours = object(decoded) and math.type(decoded.id) == "integer" and decoded.id == 1
  if not object(decoded) then
    want = "malformed"
  elseif decoded.method ~= nil then
    want = "other"
  elseif object(decoded.error) then
    if ours or decoded.id == json.null then
      local e = decoded.error
      want, wa = "error", math.type(e.code) == "integer" and e.code or 0
      wb = type(e.message) == "string" and e.message or "no message"
    else
      want = "other"
    end
  elseif object(decoded.result) then
    want = ours and "result" or "other"
  else
    want = "malformed"
  end
  check(kind == want, "rpc_classify says %s where the decoded body says %s", kind, want)
  if kind == "error" then
    check(a == wa and b == wb, "error %s %q where the decoded body holds %s %q", a, b, wa, wb)
  elseif kind == "result" then
    check(encode(a, "classified result") == encode(decoded.result, "decoded result"),
      "the classified result differs from the decoded body's result")
  end
end

-- The request rpc_request writes against the one the encoded pieces make.
local function request(body, value)
  local id = #body - 3
  local text, why = core.rpc_request(id, body, value)
  local method, method_why = json.try_encode(body)
  local params, params_why = json.try_encode(value)
  if method == nil or params == nil then
    check(text == nil and why == (params_why or method_why), "rpc_request: %s where try_encode refuses: %s",
      tostring(why), tostring(params_why or method_why))
    return
  end
  check(text == '{"jsonrpc":"2.0","id":' .. id .. ',"method":' .. method .. ',"params":' .. params .. "}",
    "rpc_request differs from the joined pieces")
end

return function(body, oom)
  local plain, plain_text = stable(body, false, encode, "sorted")
  local ordered = stable(body, true, encode, "ordered")
  stable(body, false, ascii_encode, "ascii")
  stable(body, true, ascii_encode, "ascii ordered")
  if plain ~= nil and not oom then
    -- the two encodings are two spellings of one value
    local a = json.decode(ascii_encode(plain))
    check(encode(a, "ascii decoded") == plain_text, "ASCII and plain encodings decode differently")
  end
  classify(body, false, plain)
  classify(body, true, ordered)
  if not oom then
    request(body, plain)
    if ordered ~= nil then request(body, ordered) end
  end
end
