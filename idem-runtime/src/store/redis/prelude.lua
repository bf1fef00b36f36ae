-- Shared by every script (prepended when the store is built).
-- A key's hash holds its record — `state`, `tok`, `fp`, `tool`, `created`, `exp` (the lease's
-- end while in progress, the TTL's end once completed), `res` — and its attempt count: `att`
-- (claims since the last recorded result) and `aexp` (when the count expires). The record is
-- live while now < exp, the count while now < aexp; Redis expires the hash at the later of the
-- two. A released claim keeps its hash with `exp` = 0: no record, and its count.
-- Each script runs the fewest commands its step needs: `TIME`, one read of the hash, and for a
-- change one `HSET` and one `PEXPIREAT` (or a `DEL`).
-- `now`: the server's clock in ms.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function ms(n)
  return string.format('%.0f', n)
end

-- Whether a redis.pcall failed (the key holds another type).
local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

-- The hash at k as a table of its fields (empty if there is none); nil and the key's type if
-- it holds another type.
local function fields(k)
  local all = redis.pcall('HGETALL', k)
  if failed(all) then
    return nil, redis.call('TYPE', k)['ok']
  end
  local f = {}
  for i = 1, #all, 2 do
    f[all[i]] = all[i + 1]
  end
  return f
end

-- The live attempt count in f.
local function attempts(f)
  if (tonumber(f.aexp) or 0) > now then
    return tonumber(f.att) or 0
  end
  return 0
end

-- What is wrong with the record in f, which `exp` says is live (nil if nothing).
local function malformed(f)
  if f.state ~= 'in_progress' and f.state ~= 'completed' then
    return 'field `state` is neither in_progress nor completed'
  end
  if not f.fp or #f.fp ~= 32 then
    return 'field `fp` is not 32 bytes'
  end
  if not tonumber(f.created) then
    return 'field `created` is not a number of ms'
  end
  if f.state == 'completed' and not f.res then
    return 'field `res` is missing'
  end
  if f.state == 'in_progress' and not f.tok then
    return 'field `tok` is missing'
  end
  return nil
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
