-- Hand-written reference of examples/operations/update_token.toml: the same replies, writes
-- and errors as the generated op_update_token.lua (every write attempted), written as a
-- person would. examples/bench/generated_vs_hand.py times one against the other.
-- @key login hash token -> user
-- @key recent sorted set token -> last seen
-- @key viewed sorted set of the items this token viewed
-- @key item_views sorted set item -> -views
-- @arg token the session token
-- @arg user the user it belongs to
-- @arg item the item viewed, '' for none
-- @arg now the time (seconds)
-- @return 1 if an item was viewed, else 0
local token, user, item, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if token == nil then
  return redis.error_reply('ERR argument token is not valid')
end
if user == nil then
  return redis.error_reply('ERR argument user is not valid')
end
if item == nil then
  return redis.error_reply('ERR argument item is not valid')
end
if now == nil or not (now == '0' or string.match(now, '^%-?[1-9]%d*$')) then
  return redis.error_reply('ERR argument now is not valid')
end
local t = tonumber(now)
if t >= 9007199254740992 or t <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local failed = redis.pcall('HSET', KEYS[1], token, user)
if not (type(failed) == 'table' and failed.err) then
  failed = nil
end
local reply = redis.pcall('ZADD', KEYS[2], now, token)
if failed == nil and type(reply) == 'table' and reply.err then
  failed = reply
end
local viewed = #item > 0
if viewed then
  reply = redis.pcall('ZADD', KEYS[3], now, item)
  if failed == nil and type(reply) == 'table' and reply.err then
    failed = reply
  end
  reply = redis.pcall('ZREMRANGEBYRANK', KEYS[3], '0', '-26')
  if failed == nil and type(reply) == 'table' and reply.err then
    failed = reply
  end
  reply = redis.pcall('ZINCRBY', KEYS[4], '-1', item)
  if failed == nil and type(reply) == 'table' and reply.err then
    failed = reply
  end
end
if failed then
  return failed
end
return viewed and 1 or 0
