--- One time budget per operation, spent by all of its legs together.
--
-- Opened when a public operation starts; every leg asks it first. A leg is
-- refused once nothing is left, and otherwise gets the remaining budget as its
-- libcurl timeout in whole milliseconds, rounded up and never 0 (which libcurl
-- reads as "no timeout"). The connect timeout never outlives the budget.
local ceil, floor = math.ceil, math.floor

local Deadline = {}
Deadline.__index = Deadline

--- @param total seconds (fractions allowed), > 0
--- @param clock function returning monotonic seconds
function Deadline.open(total, clock)
  return setmetatable({ total = total, clock = clock, start = clock() }, Deadline)
end

--- Seconds left; zero or negative once spent.
function Deadline:remaining()
  return self.total - (self.clock() - self.start)
end

--- Whole milliseconds left, rounded up and never 0 (a wait of 0 would not
--- wait), or nil once spent: what a wait on a pipe may take.
function Deadline:left_ms()
  local left = self.total - (self.clock() - self.start)
  if left <= 0 then return nil end
  local ms = floor(left * 1000 + 0.999)
  return ms < 1 and 1 or ms
end

--- What a leg sent now may take, read off the clock once:
--- timeout_ms, connect_timeout_ms — or nil when the budget is spent.
-- Rounded up less a nanosecond, so float noise in clock arithmetic never adds one.
-- Every leg asks, so this stays a few plain operations.
function Deadline:leg(connect_seconds)
  local left = self.total - (self.clock() - self.start)
  if left <= 0 then return nil end
  local timeout_ms = ceil(left * 1000 - 1e-6)
  if timeout_ms < 1 then timeout_ms = 1 end
  local connect_ms = ceil(connect_seconds * 1000)
  if connect_ms > timeout_ms then connect_ms = timeout_ms end
  return timeout_ms, connect_ms
end

return Deadline
