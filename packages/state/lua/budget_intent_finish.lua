-- Finish a paid attempt exactly once: whoever deletes its intent appends its
-- one ledger row, in the same step. The owner at the normal end, or any
-- router finishing the orphan of a dead one — the first wins, the other
-- finds nothing and does nothing (no row, no settle).
-- KEYS[1] intents stream, KEYS[2] ledger stream, KEYS[3] the intent's
-- progress key; ARGV[1] group, ARGV[2] intent id, ARGV[3] ledger row (JSON).
-- Returns 1 when this call finished it, 0 when it was already finished.
if redis.call('XDEL', KEYS[1], ARGV[2]) == 0 then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[2], '*', 'r', ARGV[3])
redis.call('DEL', KEYS[3])
return 1
