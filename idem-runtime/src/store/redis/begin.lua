-- begin: charge the per-key count KEYS[2] (when asked), then claim the record KEYS[1] if it is
-- absent, else return the record it holds. KEYS[2] shares KEYS[1]'s hash slot.
-- ARGV: [1] fencing token, [2] fingerprint (32 bytes), [3] tool name, [4] lease in ms,
--       [5] charge: '' (none), 'charge', or 'turn_refused' (the turn-wide count refused this
--       call: count the key as budget::decide does, claim nothing), [6] max attempts,
--       [7] budget window in ms.
-- Replies: {'claimed'} | {'record', state, fp, tool, created, exp, res} | {'wrongtype', type}
--        | {'exhausted_key', attempts, completed (0 or 1)} | {'exhausted_turn'}.
local kind = live_kind(KEYS[1])
if kind ~= 'none' and kind ~= 'hash' then
  -- Not a record: an error, and no attempt counted.
  return {'wrongtype', kind}
end
local charge = ARGV[5]
if charge ~= '' then
  local completed = 0
  if kind == 'hash' and redis.call('HGET', KEYS[1], 'state') == 'completed' then
    completed = 1
  end
  local before = count(KEYS[2])
  local attempts = before + 1
  local exp = now + tonumber(ARGV[7])
  if attempts > tonumber(ARGV[6]) then
    -- A refused attempt is still counted against the key, so the next refusal is honest.
    set_count(KEYS[2], attempts, exp)
    return {'exhausted_key', attempts, completed}
  end
  if charge == 'turn_refused' then
    if before > 0 then
      set_count(KEYS[2], before, exp)
    end
    return {'exhausted_turn'}
  end
  set_count(KEYS[2], attempts, exp)
end
if kind == 'hash' then
  return record(KEYS[1])
end
local expires = ms(now + tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'state', 'in_progress', 'tok', ARGV[1], 'fp', ARGV[2],
  'tool', ARGV[3], 'created', ms(now), 'exp', expires)
redis.call('PEXPIREAT', KEYS[1], expires)
return {'claimed'}
