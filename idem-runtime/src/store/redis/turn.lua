-- turn: the turn's count of started actions at KEYS[1], for a Redis Cluster whose turn count
-- and record are in different slots.
-- ARGV: [1] 'charge' or 'refund', [2] the turn's limit, [3] budget window in ms.
-- charge: count one more action unless the limit is reached. Replies {1 if counted else 0,
-- calls before this one}.
-- refund: give back an action counted by 'charge' whose claim did not happen (the count keeps
-- its expiry). Replies {1, calls left}.
if ARGV[1] == 'refund' then
  local n = count(KEYS[1])
  if n > 0 then
    redis.call('HSET', KEYS[1], 'n', ms(n - 1))
    n = n - 1
  end
  return {1, n}
end
local calls = count(KEYS[1])
if calls >= tonumber(ARGV[2]) then
  return {0, calls}
end
set_count(KEYS[1], calls + 1, now + tonumber(ARGV[3]))
return {1, calls}
