-- docs/ERRORS.md documents every failure kind, and only those: the registry errors.KINDS is the
-- truth, and a kind added to it (or removed) must be added to (or removed from) the page.
local errors = require "mcpclient.errors"

local PAGE = "docs/ERRORS.md"

-- The kinds the page documents: one "#### `kind`" heading each, with the lines up to the next heading.
local function documented()
  local file = assert(io.open(PAGE, "r"))
  local text = file:read("a")
  file:close()
  local kinds, order, current = {}, {}, nil
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    local kind = line:match("^#### `([%w_]+)`%s*$")
    if kind then
      assert.is_nil(kinds[kind], PAGE .. " documents " .. kind .. " twice")
      current = { lines = {} }
      kinds[kind] = current
      order[#order + 1] = kind
    elseif line:match("^#") then
      current = nil
    elseif current then
      current.lines[#current.lines + 1] = line
    end
  end
  return kinds, order
end

local function sorted(set)
  local list = {}
  for k in pairs(set) do list[#list + 1] = k end
  table.sort(list)
  return list
end

describe("docs/ERRORS.md", function()
  it("documents every kind of errors.KINDS", function()
    local kinds = documented()
    local missing = {}
    for kind in pairs(errors.KINDS) do
      if not kinds[kind] then missing[#missing + 1] = kind end
    end
    table.sort(missing)
    assert.same({}, missing, "kinds in errors.KINDS that " .. PAGE .. " lacks")
  end)

  it("documents no kind errors.KINDS lacks", function()
    local extra = {}
    for _, kind in ipairs(sorted(documented())) do
      if not errors.KINDS[kind] then extra[#extra + 1] = kind end
    end
    assert.same({}, extra, "kinds in " .. PAGE .. " that errors.KINDS lacks")
  end)

  it("gives each kind its cause, what to do, and its fields", function()
    local kinds, order = documented()
    assert.is_true(#order > 0, PAGE .. " documents no kind at all")
    for _, kind in ipairs(order) do
      local body = table.concat(kinds[kind].lines, "\n")
      for _, label in ipairs { "Cause", "Do", "Fields" } do
        assert.is_truthy(body:find("**" .. label .. ":**", 1, true), kind .. " has no " .. label)
      end
    end
  end)

  it("names in each kind's Fields every field errors.KINDS lists for it", function()
    local kinds = documented()
    local listed = 0
    for kind, spec in pairs(errors.KINDS) do
      if spec.fields ~= nil and kinds[kind] then
        local body = table.concat(kinds[kind].lines, "\n")
        local fields_text = assert(body:match("%*%*Fields:%*%*(.*)$"), kind .. " has no Fields")
        for _, field in ipairs(spec.fields) do
          listed = listed + 1
          assert.is_truthy(fields_text:find("`" .. field .. "`", 1, true), kind .. " does not document " .. field)
        end
      end
    end
    assert.is_true(listed > 0, "errors.KINDS lists no fields at all")
  end)

  it("says which field holds the store's SQL code, and that err.code is not it", function()
    local kinds = documented()
    local body = table.concat(kinds.store.lines, "\n")
    assert.is_truthy(body:find("`sql_code`", 1, true))
    assert.is_truthy(body:find("`err.code` is never set by the store", 1, true))
    assert.same({ "operation", "detail", "sql_code" }, errors.KINDS.store.fields)
    -- and the store does as the page says
    local store = require("mcpclient.agent.store")
    local _, _, err = store.open("/nonexistent-dir-of-mcpclient/x.db")
    assert.equal("store", err.kind)
    assert.equal("SQLITE_CANTOPEN", err.sql_code)
    assert.is_nil(err.code)
    for key in pairs(err) do
      local known = key == "kind" or key == "message"
      for _, field in ipairs(errors.KINDS.store.fields) do known = known or key == field end
      assert.is_true(known, "the store's failure carries a field its kind does not list: " .. key)
    end
  end)

  it("gives each fixed run code as errors.KINDS has it, in the failure value and on the page", function()
    local kinds = documented()
    local carried = 0
    for kind, spec in pairs(errors.KINDS) do
      if spec.run_code ~= nil then
        carried = carried + 1
        local body = table.concat(kinds[kind].lines, "\n")
        assert.is_truthy(body:find("`run_code` = " .. spec.run_code, 1, true),
          kind .. " does not give " .. spec.run_code)
        local _, _, err = errors.fail(kind, { detail = "x" })
        assert.equal(spec.run_code, err.run_code)
        assert.is_nil(err.code)
      end
    end
    assert.equal(#errors.CODES.run_code.kinds, carried)
  end)

  it("documents each code field on exactly the kinds errors.CODES names for it", function()
    local kinds = documented()
    for field, entry in pairs(errors.CODES) do
      local named = {}
      for _, kind in ipairs(entry.kinds) do
        named[kind] = true
        local body = table.concat(kinds[kind].lines, "\n")
        assert.is_truthy(body:find("`" .. field .. "`", 1, true), kind .. " does not document " .. field)
      end
      for kind, doc in pairs(kinds) do
        if not named[kind] then
          local body = table.concat(doc.lines, "\n")
          assert.is_falsy(body:find("`" .. field .. "`", 1, true), kind .. " documents " .. field)
        end
      end
    end
  end)

  it("documents no code field errors.CODES lacks", function()
    for kind, doc in pairs(documented()) do
      for field in table.concat(doc.lines, "\n"):gmatch("`([%w_]*_code)`") do
        assert.is_truthy(errors.CODES[field], kind .. " documents " .. field .. ", which errors.CODES lacks")
      end
    end
  end)

  it("puts a JSON-RPC code in rpc_code, and its message says it", function()
    local _, message, err = errors.fail("rpc_error", { server = "s", rpc_code = -32601, detail = "no such method" })
    assert.equal(-32601, err.rpc_code)
    assert.is_nil(err.code)
    assert.truthy(message:find("-32601", 1, true))
    _, message = errors.fail("http_status", { server = "s", status = 400, rpc_code = -32000, detail = "bad" })
    assert.truthy(message:find("JSON-RPC error -32000", 1, true))
  end)
end)

describe("README.md", function()
  it("lists every kind of errors.KINDS in its Errors table, and no other", function()
    local file = assert(io.open("README.md", "r"))
    local text = file:read("a")
    file:close()
    local section = assert(text:match("\n## Errors\n(.-)\n## "), "README.md has no Errors section")
    local listed = {}
    for kind in section:gmatch("\n| `([%w_]+)` |") do listed[kind] = true end
    assert.same(sorted(errors.KINDS), sorted(listed))
  end)
end)
