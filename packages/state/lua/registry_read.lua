-- Reads worker records (and invites) for routers without ever sending an
-- oversized value over the wire: a worker may write anything into its own
-- key, so its length is looked at first.
-- KEYS: the keys to read (one hash tag, {registry}); ARGV[1]: max bytes;
-- ARGV[2]: how many of the first keys are heartbeats, which must expire (a
-- worker could otherwise SET its record with no TTL and never leave).
-- Per key: false (missing), -1 (not a string), -2 (a heartbeat without a
-- TTL), its length (over the limit), or the value.
local max = tonumber(ARGV[1])
local expiring = tonumber(ARGV[2] or '0')
local out = {}
for i, key in ipairs(KEYS) do
  local t = redis.call('TYPE', key)['ok']
  if t == 'none' then
    out[i] = false
  elseif t ~= 'string' then
    out[i] = -1
  elseif i <= expiring and redis.call('PTTL', key) < 0 then
    out[i] = -2
  else
    local n = redis.call('STRLEN', key)
    if n > max then out[i] = n else out[i] = redis.call('GET', key) end
  end
end
return out
