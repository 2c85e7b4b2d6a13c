-- mcp.uri_template: RFC 6570 expansion at every level, checked against every example of the RFC's
-- sections 1.2 (the levels) and 3.2.1 to 3.2.9 (the operators), and the templates it refuses.
local mcp = require "mcpclient"
local json = require "mcpclient.json"
local ut = require "mcpclient.uri_template"

-- The variables of section 1.2. `keys` is an associative array whose order matters to the
-- examples, so it is given as a list of pairs.
local KEYS = { { "semi", ";" }, { "dot", "." }, { "comma", "," } }
local LEVELS = {
  var = "value", hello = "Hello World!", path = "/foo/bar", empty = "", x = "1024", y = "768",
  list = { "red", "green", "blue" }, keys = KEYS,
}

local SECTION_1_2 = {
  -- Level 1
  { "{var}", "value" },
  { "{hello}", "Hello%20World%21" },
  -- Level 2
  { "{+var}", "value" },
  { "{+hello}", "Hello%20World!" },
  { "{+path}/here", "/foo/bar/here" },
  { "here?ref={+path}", "here?ref=/foo/bar" },
  { "X{#var}", "X#value" },
  { "X{#hello}", "X#Hello%20World!" },
  -- Level 3
  { "map?{x,y}", "map?1024,768" },
  { "{x,hello,y}", "1024,Hello%20World%21,768" },
  { "{+x,hello,y}", "1024,Hello%20World!,768" },
  { "{+path,x}/here", "/foo/bar,1024/here" },
  { "{#x,hello,y}", "#1024,Hello%20World!,768" },
  { "{#path,x}/here", "#/foo/bar,1024/here" },
  { "X{.var}", "X.value" },
  { "X{.x,y}", "X.1024.768" },
  { "{/var}", "/value" },
  { "{/var,x}/here", "/value/1024/here" },
  { "{;x,y}", ";x=1024;y=768" },
  { "{;x,y,empty}", ";x=1024;y=768;empty" },
  { "{?x,y}", "?x=1024&y=768" },
  { "{?x,y,empty}", "?x=1024&y=768&empty=" },
  { "?fixed=yes{&x}", "?fixed=yes&x=1024" },
  { "{&x,y,empty}", "&x=1024&y=768&empty=" },
  -- Level 4
  { "{var:3}", "val" },
  { "{var:30}", "value" },
  { "{list}", "red,green,blue" },
  { "{list*}", "red,green,blue" },
  { "{keys}", "semi,%3B,dot,.,comma,%2C" },
  { "{keys*}", "semi=%3B,dot=.,comma=%2C" },
  { "{+path:6}/here", "/foo/b/here" },
  { "{+list}", "red,green,blue" },
  { "{+list*}", "red,green,blue" },
  { "{+keys}", "semi,;,dot,.,comma,," },
  { "{+keys*}", "semi=;,dot=.,comma=," },
  { "{#path:6}/here", "#/foo/b/here" },
  { "{#list}", "#red,green,blue" },
  { "{#list*}", "#red,green,blue" },
  { "{#keys}", "#semi,;,dot,.,comma,," },
  { "{#keys*}", "#semi=;,dot=.,comma=," },
  { "X{.var:3}", "X.val" },
  { "X{.list}", "X.red,green,blue" },
  { "X{.list*}", "X.red.green.blue" },
  { "X{.keys}", "X.semi,%3B,dot,.,comma,%2C" },
  { "X{.keys*}", "X.semi=%3B.dot=..comma=%2C" },
  { "{/var:1,var}", "/v/value" },
  { "{/list}", "/red,green,blue" },
  { "{/list*}", "/red/green/blue" },
  { "{/list*,path:4}", "/red/green/blue/%2Ffoo" },
  { "{/keys}", "/semi,%3B,dot,.,comma,%2C" },
  { "{/keys*}", "/semi=%3B/dot=./comma=%2C" },
  { "{;hello:5}", ";hello=Hello" },
  { "{;list}", ";list=red,green,blue" },
  { "{;list*}", ";list=red;list=green;list=blue" },
  { "{;keys}", ";keys=semi,%3B,dot,.,comma,%2C" },
  { "{;keys*}", ";semi=%3B;dot=.;comma=%2C" },
  { "{?var:3}", "?var=val" },
  { "{?list}", "?list=red,green,blue" },
  { "{?list*}", "?list=red&list=green&list=blue" },
  { "{?keys}", "?keys=semi,%3B,dot,.,comma,%2C" },
  { "{?keys*}", "?semi=%3B&dot=.&comma=%2C" },
  { "{&var:3}", "&var=val" },
  { "{&list}", "&list=red,green,blue" },
  { "{&list*}", "&list=red&list=green&list=blue" },
  { "{&keys}", "&keys=semi,%3B,dot,.,comma,%2C" },
  { "{&keys*}", "&semi=%3B&dot=.&comma=%2C" },
}

-- The variables of section 3.2 (undef is left out: undefined).
local OPERATORS = {
  count = { "one", "two", "three" }, dom = { "example", "com" }, dub = "me/too", hello = "Hello World!",
  half = "50%", var = "value", who = "fred", base = "http://example.com/home/", path = "/foo/bar",
  list = { "red", "green", "blue" }, keys = KEYS, v = "6", x = "1024", y = "768", empty = "",
  empty_keys = {},
}

local SECTION_3_2 = {
  ["3.2.1 variable expansion"] = {
    { "{count}", "one,two,three" },
    { "{count*}", "one,two,three" },
    { "{/count}", "/one,two,three" },
    { "{/count*}", "/one/two/three" },
    { "{;count}", ";count=one,two,three" },
    { "{;count*}", ";count=one;count=two;count=three" },
    { "{?count}", "?count=one,two,three" },
    { "{?count*}", "?count=one&count=two&count=three" },
    { "{&count*}", "&count=one&count=two&count=three" },
  },
  ["3.2.2 simple string expansion"] = {
    { "{var}", "value" },
    { "{hello}", "Hello%20World%21" },
    { "{half}", "50%25" },
    { "O{empty}X", "OX" },
    { "O{undef}X", "OX" },
    { "{x,y}", "1024,768" },
    { "{x,hello,y}", "1024,Hello%20World%21,768" },
    { "?{x,empty}", "?1024," },
    { "?{x,undef}", "?1024" },
    { "?{undef,y}", "?768" },
    { "{var:3}", "val" },
    { "{var:30}", "value" },
    { "{list}", "red,green,blue" },
    { "{list*}", "red,green,blue" },
    { "{keys}", "semi,%3B,dot,.,comma,%2C" },
    { "{keys*}", "semi=%3B,dot=.,comma=%2C" },
  },
  ["3.2.3 reserved expansion"] = {
    { "{+var}", "value" },
    { "{+hello}", "Hello%20World!" },
    { "{+half}", "50%25" },
    { "{base}index", "http%3A%2F%2Fexample.com%2Fhome%2Findex" },
    { "{+base}index", "http://example.com/home/index" },
    { "O{+empty}X", "OX" },
    { "O{+undef}X", "OX" },
    { "{+path}/here", "/foo/bar/here" },
    { "here?ref={+path}", "here?ref=/foo/bar" },
    { "up{+path}{var}/here", "up/foo/barvalue/here" },
    { "{+x,hello,y}", "1024,Hello%20World!,768" },
    { "{+path,x}/here", "/foo/bar,1024/here" },
    { "{+path:6}/here", "/foo/b/here" },
    { "{+list}", "red,green,blue" },
    { "{+list*}", "red,green,blue" },
    { "{+keys}", "semi,;,dot,.,comma,," },
    { "{+keys*}", "semi=;,dot=.,comma=," },
  },
  ["3.2.4 fragment expansion"] = {
    { "{#var}", "#value" },
    { "{#hello}", "#Hello%20World!" },
    { "{#half}", "#50%25" },
    { "foo{#empty}", "foo#" },
    { "foo{#undef}", "foo" },
    { "{#x,hello,y}", "#1024,Hello%20World!,768" },
    { "{#path,x}/here", "#/foo/bar,1024/here" },
    { "{#path:6}/here", "#/foo/b/here" },
    { "{#list}", "#red,green,blue" },
    { "{#list*}", "#red,green,blue" },
    { "{#keys}", "#semi,;,dot,.,comma,," },
    { "{#keys*}", "#semi=;,dot=.,comma=," },
  },
  ["3.2.5 label expansion with dot-prefix"] = {
    { "{.who}", ".fred" },
    { "{.who,who}", ".fred.fred" },
    { "{.half,who}", ".50%25.fred" },
    { "www{.dom*}", "www.example.com" },
    { "X{.var}", "X.value" },
    { "X{.empty}", "X." },
    { "X{.undef}", "X" },
    { "X{.var:3}", "X.val" },
    { "X{.list}", "X.red,green,blue" },
    { "X{.list*}", "X.red.green.blue" },
    { "X{.keys}", "X.semi,%3B,dot,.,comma,%2C" },
    { "X{.keys*}", "X.semi=%3B.dot=..comma=%2C" },
    { "X{.empty_keys}", "X" },
    { "X{.empty_keys*}", "X" },
  },
  ["3.2.6 path segment expansion"] = {
    { "{/who}", "/fred" },
    { "{/who,who}", "/fred/fred" },
    { "{/half,who}", "/50%25/fred" },
    { "{/who,dub}", "/fred/me%2Ftoo" },
    { "{/var}", "/value" },
    { "{/var,empty}", "/value/" },
    { "{/var,undef}", "/value" },
    { "{/var,x}/here", "/value/1024/here" },
    { "{/var:1,var}", "/v/value" },
    { "{/list}", "/red,green,blue" },
    { "{/list*}", "/red/green/blue" },
    { "{/list*,path:4}", "/red/green/blue/%2Ffoo" },
    { "{/keys}", "/semi,%3B,dot,.,comma,%2C" },
    { "{/keys*}", "/semi=%3B/dot=./comma=%2C" },
  },
  ["3.2.7 path-style parameter expansion"] = {
    { "{;who}", ";who=fred" },
    { "{;half}", ";half=50%25" },
    { "{;empty}", ";empty" },
    { "{;v,empty,who}", ";v=6;empty;who=fred" },
    { "{;v,bar,who}", ";v=6;who=fred" },
    { "{;x,y}", ";x=1024;y=768" },
    { "{;x,y,empty}", ";x=1024;y=768;empty" },
    { "{;x,y,undef}", ";x=1024;y=768" },
    { "{;hello:5}", ";hello=Hello" },
    { "{;list}", ";list=red,green,blue" },
    { "{;list*}", ";list=red;list=green;list=blue" },
    { "{;keys}", ";keys=semi,%3B,dot,.,comma,%2C" },
    { "{;keys*}", ";semi=%3B;dot=.;comma=%2C" },
  },
  ["3.2.8 form-style query expansion"] = {
    { "{?who}", "?who=fred" },
    { "{?half}", "?half=50%25" },
    { "{?x,y}", "?x=1024&y=768" },
    { "{?x,y,empty}", "?x=1024&y=768&empty=" },
    { "{?x,y,undef}", "?x=1024&y=768" },
    { "{?var:3}", "?var=val" },
    { "{?list}", "?list=red,green,blue" },
    { "{?list*}", "?list=red&list=green&list=blue" },
    { "{?keys}", "?keys=semi,%3B,dot,.,comma,%2C" },
    { "{?keys*}", "?semi=%3B&dot=.&comma=%2C" },
  },
  ["3.2.9 form-style query continuation"] = {
    { "{&who}", "&who=fred" },
    { "{&half}", "&half=50%25" },
    { "?fixed=yes{&x}", "?fixed=yes&x=1024" },
    { "{&x,y,empty}", "&x=1024&y=768&empty=" },
    { "{&var:3}", "&var=val" },
    { "{&list}", "&list=red,green,blue" },
    { "{&list*}", "&list=red&list=green&list=blue" },
    { "{&keys}", "&keys=semi,%3B,dot,.,comma,%2C" },
    { "{&keys*}", "&semi=%3B&dot=.&comma=%2C" },
  },
}

describe("mcp.uri_template", function()
  it("is loaded on first use from the library's table", function()
    assert.equal(ut, mcp.uri_template)
  end)

  it("expands every example of section 1.2 (levels 1 to 4)", function()
    for _, case in ipairs(SECTION_1_2) do
      assert.equal(case[2], ut.expand(case[1], LEVELS), case[1])
    end
    assert.equal(66, #SECTION_1_2)
  end)

  local total = 0
  for _, name in ipairs { "3.2.1 variable expansion", "3.2.2 simple string expansion", "3.2.3 reserved expansion",
    "3.2.4 fragment expansion", "3.2.5 label expansion with dot-prefix", "3.2.6 path segment expansion",
    "3.2.7 path-style parameter expansion", "3.2.8 form-style query expansion",
    "3.2.9 form-style query continuation" } do
    total = total + #SECTION_3_2[name]
    it("expands every example of section " .. name, function()
      for _, case in ipairs(SECTION_3_2[name]) do
        assert.equal(case[2], ut.expand(case[1], OPERATORS), case[1])
      end
    end)
  end
  it("holds all 114 examples of sections 3.2.1 to 3.2.9", function()
    assert.equal(114, total)
  end)

  it("expands the example of its documentation", function()
    assert.equal("file:///a/b?q=x%20y", ut.expand("file:///{+path}{?q,lang}", { path = "a/b", q = "x y" }))
  end)
end)

describe("uri_template.expand's values", function()
  it("orders a table with string keys by sorted key", function()
    local keys = { semi = ";", dot = ".", comma = "," }
    assert.equal("comma,%2C,dot,.,semi,%3B", ut.expand("{keys}", { keys = keys }))
    assert.equal("?comma=%2C&dot=.&semi=%3B", ut.expand("{?keys*}", { keys = keys }))
  end)

  it("writes numbers and booleans as text, and takes json.null and empty tables as undefined", function()
    assert.equal("/7/1.5/true", ut.expand("{/a,b,c}", { a = 7, b = 1.5, c = true }))
    assert.equal("X", ut.expand("X{?a,b,c}", { a = json.null, b = json.array {}, c = {} }))
    assert.equal("/x/a/", ut.expand("{/x,list*}", { x = "x", list = { "a", "" } }))
    assert.equal("?l=a&l=", ut.expand("{?l*}", { l = { "a", "" } }))
    assert.equal(";l=a;l", ut.expand("{;l*}", { l = { "a", "" } }))
    assert.equal("k=", ut.expand("{m*}", { m = { { "k", "" } } }))
  end)

  it("encodes UTF-8 byte by byte and counts a prefix in characters", function()
    local word = "h\195\169llo \226\130\172"  -- "héllo €"
    assert.equal("h%C3%A9llo%20%E2%82%AC", ut.expand("{w}", { w = word }))
    assert.equal("h%C3%A9", ut.expand("{w:2}", { w = word }))
    assert.equal("h%C3%A9llo%20%E2%82%AC", ut.expand("{w:7}", { w = word }))
    assert.equal("%E2%82%AC", ut.expand("{w:1}", { w = "\226\130\172x" }))
  end)

  it("keeps pct-encoded triplets for + and #, and encodes a lone % everywhere", function()
    assert.equal("a%20b%25", ut.expand("{+v}", { v = "a%20b%" }))
    assert.equal("#a%2Fb%25zz", ut.expand("{#v}", { v = "a%2Fb%zz" }))
    assert.equal("a%2520b", ut.expand("{v}", { v = "a%20b" }))
  end)

  it("copies literals a URI may hold, encodes the others, and keeps their triplets", function()
    assert.equal("'value'", ut.expand("'{var}'", { var = "value" }))
    assert.equal("a%20b%C3%A9/%41?", ut.expand("a b\195\169/%41?", {}))
    assert.equal("100%25", ut.expand("100%", {}))
  end)

  it("takes pct-encoded and dotted variable names", function()
    assert.equal("/test/foo", ut.expand("/test{/Some%20Thing}", { ["Some%20Thing"] = "foo" }))
    assert.equal("?last.name=Doe", ut.expand("{?last.name}", { ["last.name"] = "Doe" }))
  end)
end)

describe("uri_template.variables", function()
  it("lists the names in order of first appearance", function()
    assert.same({ "path", "q", "lang" }, ut.variables("file:///{+path}{?q,lang}"))
    assert.same({ "a", "b" }, ut.variables("{a}{/b*,a:3}"))
    assert.same({}, ut.variables("plain"))
  end)
end)

describe("a malformed template", function()
  local CASES = {
    { "{var", 1, "not closed" },
    { "x}", 2, "outside an expression" },
    { "{}", 1, "the expression is empty" },
    { "{=var}", 2, "reserved for future extensions" },
    { "{!var}", 2, "reserved for future extensions" },
    { "{|var}", 2, "reserved for future extensions" },
    { "{@var}", 2, "reserved for future extensions" },
    { "{,var}", 2, "reserved for future extensions" },
    { "{$var}", 2, "cannot start a variable name" },
    { "{va r}", 4, "not allowed in a variable name" },
    { "{var-x}", 5, "not allowed in a variable name" },
    { "{a,}", 4, "a variable name is missing" },
    { "{+}", 3, "a variable name is missing" },
    { "{.a.}", 4, "must be followed by a letter" },
    { "{a..b}", 3, "must be followed by a letter" },
    { "{.a}{a{b}", 7, "inside an expression" },
    { "{var:0}", 6, "a prefix is a number from 1 to 9999" },
    { "{var:}", 6, "a prefix is a number from 1 to 9999" },
    { "{var:10000}", 6, "a prefix is at most 9999" },
    { "{var:3*}", 7, "both a prefix and an explode" },
    { "{var*:3}", 6, "both an explode and a prefix" },
    { "{var**}", 6, "not allowed in a variable name" },
    { "{%2}", 2, "cannot start a variable name" },
  }

  it("is refused with kind template, naming the position", function()
    for _, case in ipairs(CASES) do
      local uri, message, err = ut.expand(case[1], { var = "v", a = "a" })
      assert.is_nil(uri, case[1])
      assert.equal("template", err.kind, case[1])
      assert.equal(case[2], err.position, case[1])
      assert.truthy(err.detail:find(case[3], 1, true), case[1] .. ": " .. err.detail)
      assert.truthy(message:find("at character " .. case[2], 1, true), message)
      local names, _, err2 = ut.variables(case[1])
      assert.is_nil(names)
      assert.same(err, err2)
    end
  end)

  it("is refused when a prefix meets a list or a map", function()
    local _, message, err = ut.expand("x{list:3}", { list = { "a" } })
    assert.equal("template", err.kind)
    assert.equal(2, err.position)
    assert.truthy(message:find("the prefix of list applies to a string, and its value is a list", 1, true))
    _, _, err = ut.expand("{a}{/keys:1}", { keys = { k = "v" } })
    assert.equal(4, err.position)
    assert.truthy(err.detail:find("is a map", 1, true))
  end)

  it("reaches a message only through the text rule", function()
    local _, message, err = ut.expand("\27[31m{x\226\128\174", {})
    assert.is_nil(message:find("\27", 1, true))
    assert.is_nil(message:find("\226\128\174", 1, true))
    assert.equal(6, err.position)
    -- counted in characters: "é" is two bytes, one character
    _, message, err = ut.expand("\195\169{x", {})
    assert.equal(2, err.position)
    assert.truthy(message:find("at character 2", 1, true))
  end)
end)

describe("uri_template misuse", function()
  it("raises for a template that is not a string, values that are not a table, and values of no shape", function()
    assert.has_error(function() ut.expand(nil, {}) end, "uri_template.expand: template must be a string")
    assert.has_error(function() ut.expand("{x}") end, "uri_template.expand: values must be a table")
    assert.has_error(function() ut.variables(42) end, "uri_template.variables: template must be a string")
    assert.has_error(function() ut.expand("{x}", { x = print }) end)
    assert.has_error(function() ut.expand("{x}", { x = { 1, { 2 } } }) end)
    assert.has_error(function() ut.expand("{x}", { x = { a = {} } }) end)
    assert.has_error(function() ut.expand("{x}", { x = { 1, a = 2 } }) end)
  end)

  it("never runs a template: pattern and code characters are plain text", function()
    assert.equal("%25a.%2A%5B%5D%28%29os.exit%28%29", ut.expand("{x}", { x = "%a.*[]()os.exit()" }))
    assert.equal("(.*)%25d", ut.expand("(.*)%d", {}))
  end)
end)
