-- begin: answer the live record at KEYS[1] without writing anything; else charge the key's
-- attempt count (in the hash) and, when KEYS[2] is given, the turn's count there, then claim.
-- KEYS[2] is given only when it can be reached from this script (a single server, or the same
-- Cluster slot); else ARGV[6] is 'check' or 'claim' and the turn is charged by turn.lua between.
-- ARGV: [1] fencing token, [2] fingerprint (32 bytes), [3] tool name, [4] lease in ms,
--       [5] max attempts per key, [6] mode: 'charge' (claim, charging KEYS[2] if given),
--       'check' (no live record and within the key's budget? then {'free'}, writing nothing),
--       'claim' (claim; the turn was charged already), [7] max turn calls (when KEYS[2]),
--       [8] budget window in ms.
-- Replies: {'claimed'} | {'free'} | {'done', fp, res} | {'running', fp} | {'wrongtype', type}
--        | {'corrupt', what} | {'refused_key', attempts} | {'refused_turn', calls}.
-- Commands: a replay TIME, HGETALL; a claim TIME, HGETALL, HSET, PEXPIREAT.
local k = KEYS[1]
local f, kind = fields(k)
if not f then
  return {'wrongtype', kind}
end
local att = 0
if next(f) ~= nil then
  local exp = tonumber(f.exp)
  if not exp then
    return {'corrupt', 'field `exp` is missing or not a number of ms'}
  end
  if exp > now then
    local wrong = malformed(f)
    if wrong then
      return {'corrupt', wrong}
    end
    if f.state == 'completed' then
      return {'done', f.fp, f.res}
    end
    return {'running', f.fp}
  end
  att = attempts(f)
end
if att >= tonumber(ARGV[5]) then
  return {'refused_key', att}
end
if ARGV[6] == 'check' then
  return {'free'}
end
local window_end = now + tonumber(ARGV[8])
if KEYS[2] then
  local calls = count(KEYS[2])
  if calls >= tonumber(ARGV[7]) then
    return {'refused_turn', calls}
  end
  set_count(KEYS[2], calls + 1, window_end)
end
local expires = now + tonumber(ARGV[4])
-- `res` emptied: an expired result must not stay with the new claim.
redis.call('HSET', k, 'state', 'in_progress', 'tok', ARGV[1], 'fp', ARGV[2], 'tool', ARGV[3],
  'created', ms(now), 'exp', ms(expires), 'att', ms(att + 1), 'aexp', ms(window_end), 'res', '')
redis.call('PEXPIREAT', k, ms(math.max(expires, window_end)))
return {'claimed'}
