-- Shared by every script (prepended when the store is built).
-- A key's hash holds its record — `state`, `tok`, `hold` (the claiming process), `fp`, `tool`,
-- `created`, `exp` (the lease's end while in progress, the TTL's end once completed), `res` —
-- and its attempt count: `att`
-- (claims since the last recorded result) and `aexp` (when the count expires). The record is
-- live while now < exp, the count while now < aexp; Redis expires the hash at the later of the
-- two. A released claim keeps its hash with `exp` = 0: no record, and its count.
-- Each script runs the fewest commands its step needs: `TIME`, one read of the hash, and for a
-- change one `HSET` and one `PEXPIREAT` (or a `DEL`). A command inside a script costs the
-- server about as much as the script's own start, so there are no others, and no helper
-- functions a script does not use. A key of another type makes `HMGET` fail, and the script
-- with it: the store reads that failure as what it means for the step.
-- `now`: the server's clock in ms.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function ms(n)
  return string.format('%.0f', n)
end
