-- The ids a router's listing reads (both sets), with the registry's epoch: a
-- random name for the data this Redis holds, written once (SET NX) by the
-- first listing that finds none. Redis coming back empty (restarted without
-- persistence, failed over to an empty replica, flushed) loses the epoch
-- with the heartbeats, so a router that reads another epoch than before
-- knows the registry lost its records — not that every worker left — and
-- keeps routing to the workers it knew until they heartbeat again.
-- KEYS[1]: the index of heartbeating workers, KEYS[2]: the invited set,
-- KEYS[3]: the epoch (one hash tag, {registry}).
-- ARGV[1]: the epoch to write when there is none.
-- Returns the epoch, then the ids (the union of both sets).
redis.call('SET', KEYS[3], ARGV[1], 'NX')
local out = redis.call('SUNION', KEYS[1], KEYS[2])
table.insert(out, 1, redis.call('GET', KEYS[3]))
return out
