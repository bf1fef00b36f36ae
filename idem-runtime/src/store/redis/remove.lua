-- remove: delete whatever is at KEYS[1] (record and attempt count, or anything else).
-- Replies 1 if it held a live record or something that is not a record, else 0.
-- Commands: TIME, HGET, DEL.
local exp = redis.pcall('HGET', KEYS[1], 'exp')
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
if type(exp) == 'string' and tonumber(exp) and tonumber(exp) <= now then
  return 0
end
return 1
