-- Hand-written reference of examples/operations/incr_many.toml: the same replies, writes
-- and errors as the generated op_incr_many.lua (every write attempted), written as a person
-- would. examples/bench/generated_vs_hand.py times one against the other.
-- @key counters... the counters (one or more)
-- @arg by amount to add to each counter
-- @return how many were incremented
local by = ARGV[1]
if by == nil or not (by == '0' or string.match(by, '^%-?[1-9]%d*$')) then
  return redis.error_reply('ERR argument by is not valid')
end
local n = tonumber(by)
if n >= 9007199254740992 or n <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local failed = nil
for i = 1, #KEYS do
  local reply = redis.pcall('INCRBY', KEYS[i], by)
  if failed == nil and type(reply) == 'table' and reply.err then
    failed = reply
  end
end
if failed then
  return failed
end
return #KEYS
