-- remove_shown: delete KEYS[1] (record and attempt count) if it still holds the record an
-- operator was shown: state ARGV[1], claimed at ARGV[2] (ms). Replies 2 (deleted, it was live),
-- 1 (deleted, it was not), 0 (another record: kept), -1 (no record there, or only the attempt
-- count of a claim given back, expiry 0: kept).
-- Commands: TIME, HMGET, DEL.
local f = redis.call('HMGET', KEYS[1], 'state', 'created', 'exp')
if (not f[1] and not f[2]) or f[3] == '0' then
  return -1
end
if f[1] ~= ARGV[1] or f[2] ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1])
local exp = tonumber(f[3])
if exp and exp > now then
  return 2
end
return 1
