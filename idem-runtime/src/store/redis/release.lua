-- release: end the live claim if ARGV[1] is its token (and, if given, ARGV[2] its holder: a
-- claim whose process is gone, freed by another), keeping the key's attempt count. A gone
-- holder's claim ends ARGV[3] ms from now instead (if its lease ends later), so that a request
-- it sent before it died lands first.
-- Replies 1, or 0 if the lease is lost (or a gone holder's claim already ends within the grace;
-- a key of another type fails).
-- Commands: TIME, HMGET, then HSET and PEXPIREAT (a live count) or DEL, or HSET (a grace).
local h = redis.call('HMGET', KEYS[1], 'exp', 'state', 'tok', 'aexp', 'hold')
local exp = tonumber(h[1]) or 0
if exp <= now or h[2] ~= 'in_progress' or h[3] ~= ARGV[1]
  or (ARGV[2] and h[5] ~= ARGV[2]) then
  return 0
end
local grace_end = now + (tonumber(ARGV[3]) or 0)
if ARGV[2] and grace_end > now then
  if grace_end < exp then
    redis.call('HSET', KEYS[1], 'exp', ms(grace_end))
    return 1
  end
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
