-- get: the live record at KEYS[1], if any.
-- Replies: {'none'} | {'record', state, fp, tool, created, exp, res, att} | {'wrongtype', type}
--        | {'corrupt', what}.
local f, kind = fields(KEYS[1])
if not f then
  return {'wrongtype', kind}
end
if next(f) == nil then
  return {'none'}
end
local exp = tonumber(f.exp)
if not exp then
  return {'corrupt', 'field `exp` is missing or not a number of ms'}
end
if exp <= now then
  return {'none'}
end
-- A missing field is `false` (a nil reply), not a hole that would cut the reply short.
return {'record', f.state or false, f.fp or false, f.tool or false, f.created or false, f.exp,
  f.res or false, ms(attempts(f))}
