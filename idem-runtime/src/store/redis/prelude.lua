-- Shared by every script (prepended when the store is built).
-- A key's hash holds its record — `state`, `tok`, `fp`, `tool`, `created`, `exp` (the lease's
-- end while in progress, the TTL's end once completed), `res` — and its attempt count: `att`
-- (claims since the last recorded result) and `aexp` (when the count expires). The record is
-- live while now < exp, the count while now < aexp; Redis expires the hash at the later of the
-- two. A released claim keeps its hash with `exp` = 0: no record, and its count.
-- `now`: the server's clock in ms.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function ms(n)
  return string.format('%.0f', n)
end

-- The Redis type at k ('none', 'hash', or anything else).
local function kind(k)
  return redis.call('TYPE', k)['ok']
end

-- Whether the hash at k holds a live record.
local function live(k)
  local exp = tonumber(redis.call('HGET', k, 'exp'))
  return exp ~= nil and exp > now
end

-- The live attempt count of the hash at k.
local function attempts(k)
  local f = redis.call('HMGET', k, 'att', 'aexp')
  if (tonumber(f[2]) or 0) > now then
    return tonumber(f[1]) or 0
  end
  return 0
end

-- Expires the hash at k at the later of its record's and its count's ends (at once if both
-- passed).
local function expire(k)
  local f = redis.call('HMGET', k, 'exp', 'aexp')
  local at = math.max(tonumber(f[1]) or 0, tonumber(f[2]) or 0)
  if at <= now then
    redis.call('DEL', k)
  else
    redis.call('PEXPIREAT', k, ms(at))
  end
end

-- The live turn count at k (0 if absent or expired).
local function count(k)
  if kind(k) ~= 'hash' then
    return 0
  end
  local f = redis.call('HMGET', k, 'n', 'exp')
  if (tonumber(f[2]) or 0) <= now then
    return 0
  end
  return tonumber(f[1]) or 0
end

-- Sets the turn count at k to n, live until exp.
local function set_count(k, n, exp)
  if kind(k) ~= 'hash' then
    redis.call('DEL', k)
  end
  redis.call('HSET', k, 'n', ms(n), 'exp', ms(exp))
  redis.call('PEXPIREAT', k, ms(exp))
end

-- The reply for the live record at k.
local function record(k)
  local r = redis.call('HMGET', k, 'state', 'fp', 'tool', 'created', 'exp', 'res')
  return {'record', r[1], r[2], r[3], r[4], r[5], r[6], ms(attempts(k))}
end
