-- Lease ARGV[1] of tenant ARGV[2] now ends ARGV[3] ms from now, or later if it
-- already did. Only the holder, only while live. Payload: {id|record}.
local id, tenant, duration = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local expired = prune(now)
local l = live(id)
if not l or l.tenant ~= tenant then return {'not_found', now, {}, expired} end
local expires = math.max(tonumber(l.expires), now + duration)
l.expires = tostring(expires)
local rec = encode(l)
redis.call('HSET', K_LEASES, id, rec)
redis.call('ZADD', K_EXPIRY, expires, id)
redis.call('ZADD', K_FENCED, expires, l.worker)
return {'ok', now, {id .. '|' .. rec}, expired}
