-- begin: answer the live record at KEYS[1] without writing anything; else charge the key's
-- attempt count (in the hash) and, when KEYS[2] is given, the turn's count there, then claim.
-- KEYS[2] is given only when it can be reached from this script (a single server, or the same
-- Cluster slot); else ARGV[6] is 'check' or 'claim' and the turn is charged by turn.lua between.
-- ARGV: [1] fencing token, [2] fingerprint (32 bytes), [3] tool name, [4] lease in ms,
--       [5] max attempts per key, [6] mode: 'charge' (claim, charging KEYS[2] if given),
--       'check' (no live record and within the key's budget? then {'free'}, writing nothing),
--       'claim' (claim; the turn was charged already), [7] max turn calls (when KEYS[2]),
--       [8] budget window in ms.
-- Replies: {'claimed'} | {'free'} | {'record', state, fp, tool, created, exp, res, att}
--        | {'wrongtype', type} | {'refused_key', attempts} | {'refused_turn', calls}.
local k = KEYS[1]
local t = kind(k)
if t ~= 'none' and t ~= 'hash' then
  return {'wrongtype', t}
end
local att = 0
if t == 'hash' then
  -- A hash without `exp` is no record of ours: answered as it is (a corrupt record), never
  -- overwritten.
  if live(k) or redis.call('HEXISTS', k, 'exp') == 0 then
    return record(k)
  end
  att = attempts(k)
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
redis.call('HDEL', k, 'res')
redis.call('HSET', k, 'state', 'in_progress', 'tok', ARGV[1], 'fp', ARGV[2], 'tool', ARGV[3],
  'created', ms(now), 'exp', ms(expires), 'att', ms(att + 1), 'aexp', ms(window_end))
redis.call('PEXPIREAT', k, ms(math.max(expires, window_end)))
return {'claimed'}
