--- Certificates made by the openssl command for a spec run, in a temporary
-- directory (never committed): a private CA and leaves it signs.
local shell = require "support.shell"

local quote = shell.quote

local certs = {}

local CA_EXTENSIONS = "[req]\ndistinguished_name = dn\n[dn]\n[v3]\nbasicConstraints = critical, CA:TRUE\n"
  .. "keyUsage = critical, keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\n"

local function sh(command)
  assert(shell.run(command), "failed: " .. command)
end

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

--- A self-signed CA `name` in `dir`: name.pem, name.key.
function certs.ca(dir, name, subject)
  local ext = dir .. "/" .. name .. ".ext"
  write_file(ext, CA_EXTENSIONS)
  sh(string.format("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj %s -keyout %s -out %s -extensions v3 "
    .. "-config %s", quote(subject), quote(dir .. "/" .. name .. ".key"), quote(dir .. "/" .. name .. ".pem"),
    quote(ext)))
end

--- A key and a certificate `name` signed by the CA `ca`, valid for `days` days
--- (a negative number gives one whose end lies before its start: expired).
function certs.leaf(dir, name, subject, extensions, ca, days)
  local file = function(suffix) return quote(dir .. "/" .. suffix) end
  write_file(dir .. "/" .. name .. ".ext", extensions)
  sh(string.format("openssl req -newkey rsa:2048 -nodes -subj %s -keyout %s -out %s", quote(subject),
    file(name .. ".key"), file(name .. ".csr")))
  sh(string.format("openssl x509 -req -in %s -CA %s -CAkey %s -CAcreateserial -days %d -extfile %s -out %s",
    file(name .. ".csr"), file(ca .. ".pem"), file(ca .. ".key"), days or 1, file(name .. ".ext"),
    file(name .. ".pem")))
end

certs.SERVER = "basicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n"
certs.CLIENT = "basicConstraints = CA:FALSE\nextendedKeyUsage = clientAuth\n"

return certs
