-- begin: answer the live record at KEYS[1] without writing anything; else charge the key's
-- attempt count (in the hash; claims of the turn that holds it) and, for a new action (no
-- claim of the key by this turn since its last result), the turn's hash at KEYS[2] (its counts
-- and its index of records), then claim.
-- KEYS[2] is given only when it can be reached from this script (a single server, or the same
-- Cluster slot); else ARGV[5] is 'check', 'claim' or 'retry' and the turn is charged by
-- turn.lua between a 'check' and a 'claim'.
-- ARGV: [1] fencing token, [2] fingerprint (32 bytes), [3] tool name, [4] the claim's terms,
--       six decimal numbers separated by one space each: the lease in ms, the most attempts
--       per key, the turn's cap (empty for none), the budget window in ms, the tool's cap
--       (empty for none), how long to keep the turn's hash at least, in ms; [5] mode: 'charge'
--       (claim, charging KEYS[2] for a new action), 'check' (no live record and within the
--       key's budget? then 'f' .. attempts, writing nothing), 'claim' (claim; the turn's hash
--       was charged already), 'retry' (claim only a retry: a new action replies 'f0'),
--       [6] turn id, [7] the key (32 bytes), [8] the claiming process (`store::holder`; ''
--       where it cannot be named).
-- A live claim with the token ARGV[1] is this call's own (its request sent again: a Cluster
-- client resends a script whose reply was lost): answered as the claim was ('c', or 'n').
-- Replies one string (one value for the client to parse), its first byte saying what follows:
-- 'c' claimed (a retry, or a new action) | 'n' claimed a retry in mode 'claim' (the turn's
-- charge is to be given back) | 'f' .. attempts (free) | 'd' .. fp .. res (completed)
-- | 'r' .. fp .. tok .. ' ' .. holder (running) | 'x' .. what is wrong (corrupt) | 'k' .. attempts (refused by the
-- key's count) | 't' .. calls (refused by the turn's cap) | 'a' .. actions (refused by the
-- tool's); a key of another type fails.
-- Commands: a replay TIME, HMGET; a retry TIME, HMGET, HSET, PEXPIREAT; a new action those and
-- the turn hash's HMGET, HSET, PEXPIREAT.
local k = KEYS[1]
local f = redis.call('HMGET', k, 'exp', 'state', 'fp', 'res', 'tok', 'created', 'att', 'aexp',
  'turn', 'hold')
local att = 0
if f[1] then
  local exp = tonumber(f[1])
  if not exp then
    return 'xfield `exp` is not a number of ms'
  end
  if exp > now then
    local state, fp = f[2], f[3]
    if state ~= 'in_progress' and state ~= 'completed' then
      return 'xfield `state` is neither in_progress nor completed'
    end
    if not fp or #fp ~= 32 then
      return 'xfield `fp` is not 32 bytes'
    end
    if not tonumber(f[6]) then
      return 'xfield `created` is not a number of ms'
    end
    if state == 'completed' then
      if not f[4] then
        return 'xfield `res` is missing'
      end
      return 'd' .. fp .. f[4]
    end
    if not f[5] then
      return 'xfield `tok` is missing'
    end
    if f[5] == ARGV[1] then
      -- This call's own claim, asked for again: a Cluster client resends a script whose reply
      -- its dropped connection lost. The answer is the claim's (its count is `att` - 1 before).
      if ARGV[5] == 'claim' and (tonumber(f[7]) or 0) > 1 then
        return 'n'
      end
      return 'c'
    end
    return 'r' .. fp .. f[5] .. ' ' .. (f[10] or '')
  end
  if (tonumber(f[8]) or 0) > now and f[9] == ARGV[6] then
    att = tonumber(f[7]) or 0
  end
elseif f[2] or f[3] or f[4] or f[5] or f[6] then
  -- Some of a record, without the instant that says whether it is live.
  return 'xfield `exp` is missing'
end
local lease, max_att, turn_cap, window, tool_cap, keep =
  string.match(ARGV[4], '^(%d+) (%d+) (%d*) (%d+) (%d*) (%d+)$')
if not lease then
  return 'xthe claim terms are not six numbers'
end
if att >= tonumber(max_att) then
  return 'k' .. ms(att)
end
local mode = ARGV[5]
if mode == 'check' or (mode == 'retry' and att == 0) then
  return 'f' .. ms(att)
end
if KEYS[2] and att == 0 then
  local refused = charge_turn(KEYS[2], ARGV[3], ARGV[7], tonumber(turn_cap),
    tonumber(tool_cap), tonumber(window), tonumber(keep), nil)
  if refused then
    return refused
  end
end
local window_end = now + tonumber(window)
local expires = now + tonumber(lease)
-- `res` emptied: an expired result must not stay with the new claim.
redis.call('HSET', k, 'state', 'in_progress', 'tok', ARGV[1], 'fp', ARGV[2], 'tool', ARGV[3],
  'created', ms(now), 'exp', ms(expires), 'att', ms(att + 1), 'aexp', ms(window_end), 'res', '',
  'turn', ARGV[6], 'hold', ARGV[8])
redis.call('PEXPIREAT', k, ms(math.max(expires, window_end)))
if mode == 'claim' and att > 0 then
  return 'n'
end
return 'c'
