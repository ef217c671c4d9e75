#!lua flags=no-writes
-- Hand-written reference of examples/operations/fetch_feed.toml: the same replies and
-- errors as the generated op_fetch_feed.lua, written as a person would.
-- examples/bench/generated_vs_hand.py times one against the other.
-- @key feed sorted set id -> time
-- @arg n how many entries
-- @arg prefix detail key = prefix .. id
-- @return {ids, details}
local n = ARGV[1]
if n == nil or not (n == '0' or string.match(n, '^%-?[1-9]%d*$')) then
  return redis.error_reply('ERR argument n is not valid')
end
n = tonumber(n)
if n >= 9007199254740992 or n <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local prefix = ARGV[2]
if prefix == nil then
  return redis.error_reply('ERR argument prefix is not valid')
end
local last = n - 1
if last <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local ids = redis.call('ZREVRANGE', KEYS[1], '0', string.format('%d', last))
local details = {}
for i = 1, #ids do
  details[i] = redis.call('GET', prefix .. ids[i]) or ''
end
return {ids, details}
