-- begin: answer the live record at KEYS[1] without writing anything; else charge the key's
-- attempt count (in the hash) and, when KEYS[2] is given, the turn's count there, then claim.
-- KEYS[2] is given only when it can be reached from this script (a single server, or the same
-- Cluster slot); else ARGV[6] is 'check' or 'claim' and the turn is charged by turn.lua between.
-- ARGV: [1] fencing token, [2] fingerprint (32 bytes), [3] tool name, [4] lease in ms,
--       [5] max attempts per key, [6] mode: 'charge' (claim, charging KEYS[2] if given),
--       'check' (no live record and within the key's budget? then {'free'}, writing nothing),
--       'claim' (claim; the turn was charged already), [7] max turn calls (when KEYS[2]),
--       [8] budget window in ms.
-- Replies one string (one value for the client to parse), its first byte saying what follows:
-- 'c' claimed | 'f' free | 'd' .. fp .. res (completed) | 'r' .. fp (running)
-- | 'x' .. what is wrong (corrupt) | 'k' .. attempts (refused by the key's count)
-- | 't' .. calls (refused by the turn's); a key of another type fails.
-- Commands: a replay TIME, HMGET; a claim TIME, HMGET, HSET, PEXPIREAT.
local k = KEYS[1]
local f = redis.call('HMGET', k, 'exp', 'state', 'fp', 'res', 'tok', 'created', 'att', 'aexp')
local att = 0
if f[1] then
  local exp = tonumber(f[1])
  if not exp then
    return 'xfield `exp` is not a number of ms'
  end
  if exp > now then
    local state, fp = f[2], f[3]
    if state ~= 'in_progress' and state ~= 'completed' then
      return 'xfield `state` is neither in_progress nor completed'
    end
    if not fp or #fp ~= 32 then
      return 'xfield `fp` is not 32 bytes'
    end
    if not tonumber(f[6]) then
      return 'xfield `created` is not a number of ms'
    end
    if state == 'completed' then
      if not f[4] then
        return 'xfield `res` is missing'
      end
      return 'd' .. fp .. f[4]
    end
    if not f[5] then
      return 'xfield `tok` is missing'
    end
    return 'r' .. fp
  end
  if (tonumber(f[8]) or 0) > now then
    att = tonumber(f[7]) or 0
  end
elseif f[2] or f[3] or f[4] or f[5] or f[6] then
  -- Some of a record, without the instant that says whether it is live.
  return 'xfield `exp` is missing'
end
if att >= tonumber(ARGV[5]) then
  return 'k' .. ms(att)
end
if ARGV[6] == 'check' then
  return 'f'
end
local window_end = now + tonumber(ARGV[8])
if KEYS[2] then
  local calls = count(KEYS[2])
  if calls >= tonumber(ARGV[7]) then
    return 't' .. ms(calls)
  end
  set_count(KEYS[2], calls + 1, window_end)
end
local expires = now + tonumber(ARGV[4])
-- `res` emptied: an expired result must not stay with the new claim.
redis.call('HSET', k, 'state', 'in_progress', 'tok', ARGV[1], 'fp', ARGV[2], 'tool', ARGV[3],
  'created', ms(now), 'exp', ms(expires), 'att', ms(att + 1), 'aexp', ms(window_end), 'res', '')
redis.call('PEXPIREAT', k, ms(math.max(expires, window_end)))
return 'c'
