-- Drop request ARGV[2]'s hold without spending (nothing was charged).
-- Returns {1 if a live hold was released | 0, spent, held}.
local id = ARGV[2]
prune(now_ms())
local amount = redis.call('HGET', K_HOLDS, id)
local released = 0
if amount then
  decr_held(amount)
  redis.call('HDEL', K_HOLDS, id)
  redis.call('ZREM', K_EXPIRY, id)
  redis.call('HINCRBY', K_STATE, 'version', 1)
  touch()
  released = 1
end
local spent, held = counters()
return {released, spent, held}
