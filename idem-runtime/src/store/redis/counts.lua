-- The turn's count of started actions (begin.lua with KEYS[2], and turn.lua).

-- Whether a redis.pcall failed (the key holds another type).
local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

-- The live turn count at k (0 if absent, expired, or not a count).
local function count(k)
  local f = redis.pcall('HMGET', k, 'n', 'exp')
  if failed(f) or (tonumber(f[2]) or 0) <= now then
    return 0
  end
  return tonumber(f[1]) or 0
end

-- Sets the turn count at k to n, live until exp (replacing whatever else is there).
local function set_count(k, n, exp)
  if failed(redis.pcall('HSET', k, 'n', ms(n), 'exp', ms(exp))) then
    redis.call('DEL', k)
    redis.call('HSET', k, 'n', ms(n), 'exp', ms(exp))
  end
  redis.call('PEXPIREAT', k, ms(exp))
end
