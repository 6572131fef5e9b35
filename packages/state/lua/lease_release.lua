-- Ends lease ARGV[1] of tenant ARGV[2] now; its worker is free at once. Only
-- the holder. Payload: {id|record} as it was.
local id, tenant = ARGV[1], ARGV[2]
local now = now_ms()
local expired = prune(now)
local l = live(id)
if not l or l.tenant ~= tenant then return {'not_found', now, {}, expired} end
local rec = encode(l)
drop(id, l)
return {'ok', now, {id .. '|' .. rec}, expired}
