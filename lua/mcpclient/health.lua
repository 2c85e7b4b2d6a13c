--- Health recorders: where a connection reports each completed operation.
--
-- A recorder is a function (identifier, latency_ms) or a table with
-- :record(identifier, latency_ms). It is called once per completed operation
-- and never for a failed one; whatever it raises is logged as a warning and
-- the operation still returns its answer: a liveness stamp is never worth a
-- lost answer.
local health = {}

--- The explicit "record nothing".
function health.discard() end

--- A recorder that keeps contacts in memory: { {identifier, latency_ms}, ... }.
-- Handy for agents that report liveness themselves, and for specs.
function health.memory()
  local contacts = {}
  return setmetatable(contacts, {
    __index = {
      record = function(self, identifier, latency_ms)
        self[#self + 1] = { identifier = identifier, latency_ms = latency_ms }
      end,
    },
  })
end

return health
