-- release: end the live claim if ARGV[1] is its token (and, if given, ARGV[2] its holder: a
-- claim whose process is gone, freed by another), keeping the key's attempt count.
-- Replies 1, or 0 if the lease is lost (a key of another type fails).
-- Commands: TIME, HMGET, then HSET and PEXPIREAT (a live count) or DEL.
local h = redis.call('HMGET', KEYS[1], 'exp', 'state', 'tok', 'aexp', 'hold')
if (tonumber(h[1]) or 0) <= now or h[2] ~= 'in_progress' or h[3] ~= ARGV[1]
  or (ARGV[2] and h[5] ~= ARGV[2]) then
  return 0
end
local count_end = tonumber(h[4]) or 0
if count_end > now then
  redis.call('HSET', KEYS[1], 'exp', '0')
  redis.call('PEXPIREAT', KEYS[1], ms(count_end))
else
  redis.call('DEL', KEYS[1])
end
return 1
