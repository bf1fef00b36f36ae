-- turn: the turn-wide call count KEYS[1] (in the turn's own hash slot).
-- ARGV: [1] 'charge' or 'refund', [2] the turn's call limit, [3] budget window in ms.
-- charge: count one more call unless that passes the limit. Replies {1 if counted else 0, calls
-- with this one}.
-- refund: give back a call counted by 'charge' whose per-key attempt was then refused (the
-- count keeps its expiry). Replies {1, calls left}.
if ARGV[1] == 'refund' then
  local n = count(KEYS[1])
  if n > 0 then
    redis.call('HSET', KEYS[1], 'n', ms(n - 1))
    n = n - 1
  end
  return {1, n}
end
local calls = count(KEYS[1]) + 1
if calls > tonumber(ARGV[2]) then
  return {0, calls}
end
set_count(KEYS[1], calls, now + tonumber(ARGV[3]))
return {1, calls}
