-- Hand-written reference of examples/operations/sliding_window_rate_limit.toml: the same
-- replies, writes and errors as the generated op_sliding_window_rate_limit.lua (every write
-- attempted), written as a person would. examples/bench/generated_vs_hand.py times them.
-- @key window sorted set request id -> time (ms)
-- @arg now current time in ms
-- @arg width window width in ms
-- @arg limit hits allowed per window
-- @arg request unique id of this request
-- @return {allowed (1 or 0), hits in window}
local now, width, limit, request = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if now == nil or not (now == '0' or string.match(now, '^%-?[1-9]%d*$')) then
  return redis.error_reply('ERR argument now is not valid')
end
local t = tonumber(now)
if t >= 9007199254740992 or t <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
if width == nil or not (width == '0' or string.match(width, '^%-?[1-9]%d*$')) then
  return redis.error_reply('ERR argument width is not valid')
end
local w = tonumber(width)
if w >= 9007199254740992 or w <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
if limit == nil or not (limit == '0' or string.match(limit, '^%-?[1-9]%d*$')) then
  return redis.error_reply('ERR argument limit is not valid')
end
limit = tonumber(limit)
if limit >= 9007199254740992 or limit <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
if request == nil then
  return redis.error_reply('ERR argument request is not valid')
end
local since = t - w
if since >= 9007199254740992 or since <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
since = string.format('%d', since)
local count = redis.call('ZCOUNT', KEYS[1], '(' .. since, '+inf')
local allowed = count < limit
local hits = count
if allowed then
  hits = count + 1
end
if hits >= 9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local failed = redis.pcall('ZREMRANGEBYSCORE', KEYS[1], '-inf', since)
if not (type(failed) == 'table' and failed.err) then
  failed = nil
end
if allowed then
  local reply = redis.pcall('ZADD', KEYS[1], now, request)
  if failed == nil and type(reply) == 'table' and reply.err then
    failed = reply
  end
  reply = redis.pcall('PEXPIRE', KEYS[1], width)
  if failed == nil and type(reply) == 'table' and reply.err then
    failed = reply
  end
end
if failed then
  return failed
end
return {allowed and 1 or 0, hits}
