--- One time budget per operation (REFERENCE §3, DESIGN D12).
--
-- Opened when a public operation starts; every leg asks it first. A leg is
-- refused once nothing is left, and otherwise gets the remaining budget as its
-- libcurl timeout in whole milliseconds, rounded up and never 0 (which libcurl
-- reads as "no timeout").
local Deadline = {}
Deadline.__index = Deadline

--- @param total seconds (fractions allowed), > 0
--- @param clock function returning monotonic seconds
function Deadline.open(total, clock)
  return setmetatable({ total = total, clock = clock, start = clock() }, Deadline)
end

--- Seconds left; negative once overspent.
function Deadline:remaining()
  return self.total - (self.clock() - self.start)
end

function Deadline:exhausted()
  return self:remaining() <= 0
end

--- The timeout a leg sent now may run for, in milliseconds (>= 1), rounded
--- up — less a nanosecond, so float noise in clock arithmetic never adds one.
function Deadline:leg_timeout_ms()
  return math.max(1, math.ceil(self:remaining() * 1000 - 1e-6))
end

--- A connect timeout that never outlives the budget.
function Deadline:connect_timeout_ms(connect_seconds)
  return math.max(1, math.min(math.ceil(connect_seconds * 1000), self:leg_timeout_ms()))
end

return Deadline
