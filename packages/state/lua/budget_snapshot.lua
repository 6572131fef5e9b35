-- Current counters after dropping expired holds: {spent, held, version, checked}.
prune(now_ms())
local spent, held, version = counters()
return {spent, held, version, redis.call('HEXISTS', K_STATE, 'checked')}
