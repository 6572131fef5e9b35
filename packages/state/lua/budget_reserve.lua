-- Hold ARGV[3] micro-cents for request ARGV[2] until ARGV[5] ms from now,
-- only if spent + held + amount <= limit (ARGV[4]). A repeated reserve for the
-- same request replaces its hold instead of stacking a second one.
-- With ARGV[6] = '1', nothing is held on a day no rebuild has checked against
-- the ledger: its counters may be lost ones, not a new day's (-1 is returned).
-- Returns {1|0|-1, spent, held, previous hold of this request}.
local id, amount, limit, ttl = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local now = now_ms()
prune(now)
local spent, held = counters()
local previous = redis.call('HGET', K_HOLDS, id) or '0'
if ARGV[6] == '1' and redis.call('HEXISTS', K_STATE, 'checked') == 0 then
  return {-1, spent, held, previous}
end
if tonumber(spent) + tonumber(held) - tonumber(previous) + tonumber(amount) > tonumber(limit) then
  return {0, spent, held, previous}
end
decr_held(previous)
redis.call('HSET', K_HOLDS, id, amount)
redis.call('ZADD', K_EXPIRY, now + ttl, id)
redis.call('HINCRBY', K_STATE, 'held', amount)
redis.call('HINCRBY', K_STATE, 'version', 1)
touch()
spent, held = counters()
return {1, spent, held, previous}
