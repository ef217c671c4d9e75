-- Hand-written reference of examples/operations/transfer.toml: the same replies, writes
-- and errors as the generated op_transfer.lua (both balances are parsed, every write is
-- attempted), written as a person would. examples/bench/generated_vs_hand.py times them.
-- @key src source balance
-- @key dst destination balance
-- @arg amount amount to move
-- @return {moved (1 or 0), source balance}
local amount = ARGV[1]
if amount == nil or not (amount == '0' or string.match(amount, '^%-?[1-9]%d*$')) then
  return redis.error_reply('ERR argument amount is not valid')
end
local n = tonumber(amount)
if n >= 9007199254740992 or n <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local src = 0
local s = redis.call('GET', KEYS[1])
if s then
  if not (s == '0' or string.match(s, '^%-?[1-9]%d*$')) then
    return redis.error_reply('NOTINT a value read is not an integer')
  end
  src = tonumber(s)
  if src >= 9007199254740992 or src <= -9007199254740992 then
    return redis.error_reply('OVERFLOW integer beyond 2^53-1')
  end
end
local d = redis.call('GET', KEYS[2])
if d then
  if not (d == '0' or string.match(d, '^%-?[1-9]%d*$')) then
    return redis.error_reply('NOTINT a value read is not an integer')
  end
  local dst = tonumber(d)
  if dst >= 9007199254740992 or dst <= -9007199254740992 then
    return redis.error_reply('OVERFLOW integer beyond 2^53-1')
  end
end
if not (n > 0 and src >= n) then
  return {0, src}
end
local left = src - n
if left >= 9007199254740992 or left <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local first = redis.pcall('DECRBY', KEYS[1], amount)
local second = redis.pcall('INCRBY', KEYS[2], amount)
if type(first) == 'table' and first.err then
  return first
end
if type(second) == 'table' and second.err then
  return second
end
return {1, left}
