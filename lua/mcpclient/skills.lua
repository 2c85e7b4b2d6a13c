--- Skills a server offers (the io.modelcontextprotocol/skills extension):
--- what `conn:skills()` and `conn:read_skill(name)` do.
--
-- A server lists its skills with `skills/list`: each entry names the skill's
-- SKILL.md (`uri`), the frontmatter that file must carry, and every file of
-- the skill with its SHA-256 digest and size in bytes. Listing reads no file:
-- a skill's files are fetched only when the host loads that skill, never on
-- connection, listing or approval. Loading reads the SKILL.md through
-- `resources/read` and verifies it before anything of it is handed over: its
-- size, then its digest, then its frontmatter field by field against the
-- entry. Content that fails any of them is refused whole (kind `integrity`)
-- and no other file of that skill is read.
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"

local fail = errors.fail

local skills = {}

skills.METHOD = "skills/list"
skills.MAX_PAGES = 50          -- pages of a listing, at most (as a tool listing)
skills.MAX_SKILLS = 500        -- entries kept from one listing, at most
skills.MAX_FRONTMATTER = 64    -- frontmatter fields compared, at most

local function hex(bytes)
  return (bytes:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

-- An entry's resource line: { uri, digest = "sha256:<64 hex>", size } or nil.
local function resource_of(value)
  if type(value) ~= "table" or type(value.uri) ~= "string" then return nil end
  local digest = type(value.digest) == "string" and value.digest:lower() or nil
  if not (digest and digest:match("^sha256:" .. string.rep("%x", 64) .. "$")) then return nil end
  if math.type(value.size) ~= "integer" or value.size < 0 then return nil end
  return { uri = value.uri, digest = digest, size = value.size }
end

--[[
One listed skill, as far as it can be verified later: { uri, name,
description, frontmatter (the server's table), resources = { resource_of… } },
or nil when the entry names no SKILL.md, no frontmatter, or no resource line
for its own SKILL.md (such a skill could never be verified, so it is not
offered).
]]
function skills.entry(value)
  if type(value) ~= "table" or type(value.uri) ~= "string" or type(value.frontmatter) ~= "table" then return nil end
  local list, own = {}, nil
  for _, item in ipairs(type(value.resources) == "table" and value.resources or {}) do
    local resource = resource_of(item)
    if resource then
      list[#list + 1] = resource
      if resource.uri == value.uri then own = resource end
    end
  end
  if not own then return nil end
  local frontmatter = value.frontmatter
  return {
    uri = value.uri, resources = list, frontmatter = frontmatter,
    name = type(frontmatter.name) == "string" and core.label(frontmatter.name) or nil,
    description = type(frontmatter.description) == "string" and core.clip(frontmatter.description, 1024) or nil,
  }
end

-- A YAML scalar as written on one line: quotes taken off, nothing else read.
local function scalar(text)
  text = text:match("^%s*(.-)%s*$")
  local quoted = text:match('^"(.*)"$') or text:match("^'(.*)'$")
  if quoted then return quoted end
  if text == "" or text:find("^[%[{>|&*!%%@`]") or text:find(" #", 1, true) then return nil end
  return text
end

--[[
The frontmatter of a SKILL.md: the lines between a first line "---" and the
next "---", each `key: value` with a scalar value. Anything else (nesting,
lists, block scalars, anchors) is not compared by this client, so it is no
frontmatter it can verify: nil, why.
]]
function skills.frontmatter(text)
  local body = text:match("^%-%-%-\r?\n(.-\r?\n)%-%-%-\r?\n") or text:match("^%-%-%-\r?\n(.-\r?\n)%-%-%-$")
  if not body then return nil, "the SKILL.md does not open with a frontmatter block" end
  local fields, count = {}, 0
  for line in body:gmatch("([^\n]*)\n") do
    line = line:gsub("\r$", "")
    if not line:match("^%s*$") and not line:match("^#") then
      local key, rest = line:match("^([%w_%-]+):(.*)$")
      local value = key and scalar(rest)
      if not value then return nil, "the frontmatter holds a line this client does not compare" end
      if fields[key] ~= nil then return nil, "the frontmatter names a field twice" end
      count = count + 1
      if count > skills.MAX_FRONTMATTER then return nil, "the frontmatter has too many fields" end
      fields[key] = value
    end
  end
  return fields
end

-- Does the file's frontmatter say exactly what the entry says, field by field?
local function same_frontmatter(listed, read)
  for key, value in pairs(listed) do
    if type(value) ~= "string" or read[key] ~= value then return false end
  end
  for key in pairs(read) do
    if listed[key] == nil then return false end
  end
  return true
end

--[[
Verify a file read for `resource` (its entry line): size, then digest. For
the skill's SKILL.md also the frontmatter against `entry`. Returns the
frontmatter (SKILL.md) or true, or the failure triple (kind integrity).
]]
function skills.verify(server, entry, resource, text)
  local function refuse(detail)
    return fail("integrity", { server = server, uri = core.clip(resource.uri, 200), detail = detail })
  end
  if #text ~= resource.size then
    return refuse(string.format("it is %d bytes where the listing says %d", #text, resource.size))
  end
  if "sha256:" .. hex(core.crypto.sha256(text)) ~= resource.digest then
    return refuse("its SHA-256 digest is not the one the listing names")
  end
  if resource.uri ~= entry.uri then return true end
  local fields, why = skills.frontmatter(text)
  if not fields then return refuse(why) end
  if not same_frontmatter(entry.frontmatter, fields) then
    return refuse("its frontmatter differs from the one the listing names")
  end
  return fields
end

--- The text of a resources/read result for `uri`: the first text content
--- naming that URI, or nil.
function skills.text_of(result, uri)
  for _, content in ipairs(type(result) == "table" and type(result.contents) == "table" and result.contents or {}) do
    if type(content) == "table" and content.uri == uri and type(content.text) == "string" then
      return content.text
    end
  end
  return nil
end

return skills
