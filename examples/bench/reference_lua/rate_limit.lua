-- Hand-written reference of examples/operations/rate_limit.toml: the same replies, writes
-- and errors as the generated op_rate_limit.lua (every write attempted), written as a person
-- would. examples/bench/generated_vs_hand.py times one against the other.
-- @key counter this window's counter
-- @arg limit hits allowed per window
-- @arg window window length in seconds
-- @return {allowed (1 or 0), remaining}
local limit, window = ARGV[1], ARGV[2]
if limit == nil or not (limit == '0' or string.match(limit, '^%-?[1-9]%d*$')) then
  return redis.error_reply('ERR argument limit is not valid')
end
limit = tonumber(limit)
if limit >= 9007199254740992 or limit <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
if window == nil or not (window == '0' or string.match(window, '^%-?[1-9]%d*$')) then
  return redis.error_reply('ERR argument window is not valid')
end
if tonumber(window) >= 9007199254740992 or tonumber(window) <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local count = 0
local s = redis.call('GET', KEYS[1])
if s then
  if not (s == '0' or string.match(s, '^%-?[1-9]%d*$')) then
    return redis.error_reply('NOTINT a value read is not an integer')
  end
  count = tonumber(s)
  if count >= 9007199254740992 or count <= -9007199254740992 then
    return redis.error_reply('OVERFLOW integer beyond 2^53-1')
  end
end
local allowed = count < limit
local used = count
if allowed then
  used = count + 1
  if used >= 9007199254740992 then
    return redis.error_reply('OVERFLOW integer beyond 2^53-1')
  end
end
local remaining = limit - used
if remaining >= 9007199254740992 or remaining <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
if remaining < 0 then
  remaining = 0
end
if allowed then
  local first = redis.pcall('INCR', KEYS[1])
  if count == 0 then
    local second = redis.pcall('EXPIRE', KEYS[1], window)
    if type(second) == 'table' and second.err and not (type(first) == 'table' and first.err) then
      return second
    end
  end
  if type(first) == 'table' and first.err then
    return first
  end
end
return {allowed and 1 or 0, remaining}
