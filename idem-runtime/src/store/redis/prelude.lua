-- Shared by every script (prepended when the store is built).
-- `now`: the server's clock in ms. A record or count is live while now < its `exp` field; Redis
-- itself expires keys only *after* their PEXPIREAT instant, so the scripts treat `exp <= now` as
-- absent, and delete what they find expired.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function ms(n)
  return string.format('%.0f', n)
end

-- The type of the live value at k ('none' if absent or expired).
local function live_kind(k)
  local kind = redis.call('TYPE', k)['ok']
  if kind == 'hash' then
    local exp = tonumber(redis.call('HGET', k, 'exp'))
    if exp ~= nil and exp <= now then
      redis.call('DEL', k)
      return 'none'
    end
  end
  return kind
end

-- The live count at k (0 if absent or expired).
local function count(k)
  if live_kind(k) ~= 'hash' then
    return 0
  end
  return tonumber(redis.call('HGET', k, 'n')) or 0
end

-- Sets the count at k to n, live until exp.
local function set_count(k, n, exp)
  if redis.call('TYPE', k)['ok'] ~= 'hash' then
    redis.call('DEL', k)
  end
  redis.call('HSET', k, 'n', ms(n), 'exp', ms(exp))
  redis.call('PEXPIREAT', k, ms(exp))
end

local function record(k)
  local r = redis.call('HMGET', k, 'state', 'fp', 'tool', 'created', 'exp', 'res')
  return {'record', r[1], r[2], r[3], r[4], r[5], r[6]}
end
