--- A run's audit trail as the specs read it.
local trail = {}

--- The events of run r of one kind ("tool", "input", "reimport", ...), in the trail's order.
function trail.of_kind(r, kind)
  local out = {}
  for _, e in ipairs(assert(r:events())) do
    if e.kind == kind then out[#out + 1] = e end
  end
  return out
end

return trail
