-- Forget the consumers of dead routers: those holding no intent and silent
-- for ARGV[2] ms (this router, ARGV[1], excepted). Checked and deleted in one
-- step, so a router opening an intent meanwhile cannot lose it (deleting a
-- consumer drops its pending entries). KEYS[1] intents stream; ARGV[3] group.
-- Returns how many were deleted.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[3])
if not ok then return 0 end
local gone = 0
for _, c in ipairs(consumers) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] ~= ARGV[1] and tonumber(f['pending']) == 0 and tonumber(f['idle']) > tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[3], f['name'])
    gone = gone + 1
  end
end
return gone
